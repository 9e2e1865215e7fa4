"""Pad fused into AveragePool (issue 22177, introduced by PR 21556, fixed by PR 23190): the
optimiser folds a constant-zero Pad into the following AveragePool's pads but keeps
count_include_pad=0, so the padded zeros stop counting in the divisor."""

from __future__ import annotations

import numpy as np
from onnx import helper

from kit.corpus.case import Built, Case, constant, model, tensor


def build(seed: int) -> Built:
    pad = helper.make_node("Pad", ["x", "pads", "value"], ["p"], name="pad", mode="constant")
    pool = helper.make_node("AveragePool", ["p"], ["y"], name="avgpool", kernel_shape=[3, 3],
                            strides=[1, 1], pads=[0, 0, 0, 0], count_include_pad=0)
    inits = [constant("pads", [0, 0, 1, 1, 0, 0, 1, 1], np.int64), constant("value", 0.0)]
    graph = model([pad, pool], [tensor("x", ["N", 2, 5, 5])], [tensor("y", ["N", 2, 5, 5])],
                  13, inits)
    x = np.random.default_rng(seed + 2).standard_normal((8, 2, 5, 5)).astype(np.float32)
    return Built(graph, {"x": x})


CASE = Case(
    id="pad-avgpool-fusion", title="Pad fused into AveragePool ignores count_include_pad=0",
    op="Pad+AveragePool", issue=22177, pr=23190, level="enable_all",
    affected=("1.19.2", "1.20.1"),
    fixed=("1.21.1", "1.22.1", "1.23.2", "1.24.4", "1.25.1", "1.26.0", "1.27.0", "1.28.0",
           "1.29.0", "1.30.0", "1.31.1", "1.32.0"),
    ground_truth=("avgpool", "pad"),
    patch="onnxruntime/core/optimizer/pad_fusion.cc: PadFusion::SatisfyCondition, Apply",
    build=build, note="tracker: 1.19-1.20 with optimisation on; the AveragePool carries the "
                      "exporter's explicit pads=[0,0,0,0] (without a pads attribute 1.19 "
                      "does not fuse)")
