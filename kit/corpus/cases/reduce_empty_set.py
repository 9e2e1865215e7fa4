"""Reductions over an axis of length 0 with keepdims=1 (issue 8146; the CPU kernels follow the
spec's empty-set values since PR 17805, "reduce max/min 20"): the spec reduces the empty set
to the operator's identity (ReduceSum 0, ReduceProd 1, ReduceL2 0) and keeps the reduced
axis with length 1; the CPU kernels returned an empty tensor of shape (N, 0, 3) instead of
(N, 1, 3), without an error. The empty tensor is sliced inside the graph from a non-empty
input."""

from __future__ import annotations

import numpy as np
from onnx import helper

from kit.corpus.case import Built, Case, constant, model, tensor


def build(seed: int) -> Built:
    nodes = [helper.make_node("Slice", ["x", "start", "end", "axis1"], ["e"], name="slice"),
             helper.make_node("ReduceSum", ["e", "axis1"], ["y_sum"], name="reducesum",
                              keepdims=1),
             helper.make_node("ReduceProd", ["e"], ["y_prod"], name="reduceprod", axes=[1],
                              keepdims=1),
             helper.make_node("ReduceL2", ["e"], ["y_l2"], name="reducel2", axes=[1],
                              keepdims=1)]
    inits = [constant("start", [0], np.int64), constant("end", [0], np.int64),
             constant("axis1", [1], np.int64)]
    graph = model(nodes, [tensor("x", ["N", 4, 3])],
                  [tensor("y_sum", ["N", 1, 3]), tensor("y_prod", ["N", 1, 3]),
                   tensor("y_l2", ["N", 1, 3])], 13, inits)
    # x[:, 0:0, :] is empty along axis 1 whatever x holds; the batch axis stays non-empty
    x = np.random.default_rng(seed + 13).standard_normal((4, 4, 3)).astype(np.float32)
    return Built(graph, {"x": x})


CASE = Case(
    id="reduce-empty-set", title="Reductions over an empty axis return an empty tensor",
    op="ReduceSum, ReduceProd, ReduceL2", issue=8146, pr=17805, level="disable_all",
    affected=("1.15.1", "1.16.3"),
    fixed=("1.17.3", "1.18.1", "1.19.2", "1.20.1", "1.21.1", "1.22.1", "1.23.2", "1.24.4",
           "1.25.1", "1.26.0", "1.27.0", "1.28.0", "1.29.0", "1.30.0", "1.31.1", "1.32.0"),
    ground_truth=("reducesum", "reduceprod", "reducel2"),
    patch="onnxruntime/core/providers/cpu/reduction/reduction_ops.cc: "
          "check_and_reduce_empty_set_input (fills the output with the aggregator's "
          "fill_for_empty_set value), added by PR 17805 for the 1.17.0 release",
    build=build, cnn_op=False,
    relation="identity element: the reduction of an empty set is the operation's identity "
             "(sum 0, product 1, norm 0), so concatenating an empty slice to any tensor must "
             "leave its reduction unchanged; the defect returns no values at all (shape "
             "(N, 0, 3) for (N, 1, 3))",
    note="keepdims=0 over the same axis raised instead (crashes.py reducesum-empty-axis, "
         "issue 7563, same boundary): this is its silent keepdims=1 side; ReduceMax over an "
         "empty axis raises from 1.17 to 1.20, so it is left out; "
         "opset 13 and 18 alike; both levels")
