"""Max and Min drop a NaN (issue 21455, fixed by PR 21492 "Propagate NaNs in the CPU min and
max operators"): a NaN in the second input, or in the first against a broadcast scalar, is
replaced by the other operand. The NaN comes from a Sqrt of a negative input, since the
kit's worker refuses non-finite inputs."""

from __future__ import annotations

import numpy as np
from onnx import helper

from kit.corpus.case import Built, Case, constant, model, tensor


def build(seed: int) -> Built:
    nodes = [helper.make_node("Sqrt", ["x"], ["r"], name="sqrt"),  # NaN where x < 0
             helper.make_node("Max", ["z", "r"], ["y_max"], name="max"),
             helper.make_node("Min", ["r", "six"], ["y_min"], name="min")]
    graph = model(nodes, [tensor("x", ["N", 6]), tensor("z", ["N", 6])],
                  [tensor("y_max", ["N", 6]), tensor("y_min", ["N", 6])], 13,
                  [constant("six", [6.0])])
    rng = np.random.default_rng(seed + 10)
    # Finite inputs (the worker takes no other); the Sqrt makes NaN upstream of Max and Min
    # where x < 0, as an activation gone NaN would reach them
    x = (rng.standard_normal((8, 6)) * 20 + 10).astype(np.float32)
    z = rng.standard_normal((8, 6)).astype(np.float32)
    return Built(graph, {"x": x, "z": z})


CASE = Case(
    id="minmax-nan", title="Max and Min drop a NaN operand",
    op="Max, Min", issue=21455, pr=21492, level="disable_all",
    affected=("1.15.1", "1.16.3", "1.17.3", "1.18.1"),
    fixed=("1.19.2", "1.20.1", "1.21.1", "1.22.1", "1.23.2", "1.24.4", "1.25.1", "1.26.0",
           "1.27.0", "1.28.0", "1.29.0", "1.30.0", "1.31.1", "1.32.0"),
    ground_truth=("max", "min"),
    patch="onnxruntime/core/providers/cpu/math/element_wise_ops.cc: Max_8, Min_8 "
          "(NaN-propagating comparisons)",
    build=build, cnn_op=False,
    relation="NaN propagation: IEEE max and min of NaN and any number are NaN, so a "
             "follow-up with a NaN planted in one operand must be NaN exactly there; the "
             "defect returns the other operand",
    note="Min(x, 6) is the upper half of a ReLU6 written as Min(Max(x, 0), 6); the digits "
         "CNNs use Relu, and a NaN input is not an image, so no image model hits it")
