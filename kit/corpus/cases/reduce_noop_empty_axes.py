"""Reduce-18 with an empty axes input and noop_with_empty_axes=1 (issue 16586): the spec makes
the node an identity, the CPU kernels of ReduceMean, ReduceMax and others reduced over every
axis instead, returning a tensor of another shape without an error."""

from __future__ import annotations

import numpy as np
from onnx import helper

from kit.corpus.case import Built, Case, constant, model, tensor


def build(seed: int) -> Built:
    nodes = [helper.make_node("ReduceMean", ["x", "axes"], ["y_mean"], name="reducemean",
                              keepdims=1, noop_with_empty_axes=1),
             helper.make_node("ReduceMax", ["x", "axes"], ["y_max"], name="reducemax",
                              keepdims=1, noop_with_empty_axes=1)]
    graph = model(nodes, [tensor("x", ["N", 3, 4])],
                  [tensor("y_mean", ["N", 3, 4]), tensor("y_max", ["N", 3, 4])], 18,
                  [constant("axes", np.zeros(0), np.int64)])
    # One sample: the wrong output (1, 1, 1) then still has the batch axis the worker checks,
    # and its shape is compared with the reference's (1, 3, 4)
    x = np.random.default_rng(seed + 8).standard_normal((1, 3, 4)).astype(np.float32)
    return Built(graph, {"x": x})


CASE = Case(
    id="reduce-noop-empty-axes", title="Reduce-18 noop_with_empty_axes=1 reduces every axis",
    op="ReduceMean, ReduceMax", issue=16586, pr=None, level="disable_all",
    affected=("1.15.1", "1.16.3"),
    fixed=("1.17.3", "1.18.1", "1.19.2", "1.20.1", "1.21.1", "1.22.1", "1.23.2", "1.24.4",
           "1.25.1", "1.26.0", "1.27.0", "1.28.0", "1.29.0", "1.30.0", "1.31.1", "1.32.0"),
    ground_truth=("reducemean", "reducemax"),
    patch="onnxruntime/core/providers/cpu/reduction/reduction_ops.cc: the axes handling of "
          "the opset-18 reductions; the fixing pull request was not found in the stored "
          "tracker, the fix is attributed by the release sweep (first right in 1.17)",
    build=build, cnn_op=False,
    relation="identity: with empty axes and noop_with_empty_axes=1 the spec defines the "
             "node as the identity, so the follow-up is the source input itself; the defect "
             "breaks it by changing the output's shape",
    note="the tracker closed the issue as stale; ReduceSum was right in every release")
