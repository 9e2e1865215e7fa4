"""A QDQ Split whose second output is requantized with other parameters than the input
loses that requantization (PR 18394 "[QDQ Optimizer] Fix logic that drops Q/DQ ops from QDQ
split node groups"): at level 2 the Split node group used DropQDQNodeGroupSelector, which
compares the quantization parameters of input 0 and output 0 only, so the Q/DQ pairs of
every output are dropped and output 1 silently carries the input's uint8 values read with
its own scale and zero point."""

from __future__ import annotations

import numpy as np
from onnx import helper

from kit.corpus.case import Array, Built, Case, constant, model, tensor

# Input and output 0 share scale 2^-5, zero 128; output 1 has scale 3 * 2^-5, zero 100
# (a requantization by 1/3: no element of x_dq / s1 is a rounding tie, all values exact)
X_SCALE, X_ZERO = 2.0 ** -5, 128
S1_SCALE, S1_ZERO = 3 * 2.0 ** -5, 100


def qdq(v: Array, scale: float, zero: int) -> Array:
    """QuantizeLinear then DequantizeLinear to uint8 (round half to even, saturate)."""
    found: Array = (np.clip(np.rint(v / scale) + zero, 0, 255) - zero) * scale
    return found


def reference(x: Array) -> dict[str, Array]:
    """The unfused graph by hand in float64: Q/DQ of x, Split in two halves on axis 1,
    Q/DQ of each half with its own parameters."""
    xd = qdq(x.astype(np.float64), X_SCALE, X_ZERO)
    half = xd.shape[1] // 2
    return {"y0": qdq(xd[:, :half], X_SCALE, X_ZERO), "y1": qdq(xd[:, half:], S1_SCALE, S1_ZERO)}


def build(seed: int) -> Built:
    rng = np.random.default_rng(seed + 31)
    node = helper.make_node
    nodes = [node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["x_q"], name="q_x"),
             node("DequantizeLinear", ["x_q", "x_scale", "x_zero"], ["x_dq"], name="dq_x"),
             node("Split", ["x_dq"], ["s0", "s1"], name="split", axis=1),
             node("QuantizeLinear", ["s0", "x_scale", "x_zero"], ["s0_q"], name="q_s0"),
             node("DequantizeLinear", ["s0_q", "x_scale", "x_zero"], ["y0"], name="dq_s0"),
             node("QuantizeLinear", ["s1", "s1_scale", "s1_zero"], ["s1_q"], name="q_s1"),
             node("DequantizeLinear", ["s1_q", "s1_scale", "s1_zero"], ["y1"], name="dq_s1")]
    inits = [constant("x_scale", X_SCALE), constant("x_zero", X_ZERO, np.uint8),
             constant("s1_scale", S1_SCALE), constant("s1_zero", S1_ZERO, np.uint8)]
    graph = model(nodes, [tensor("x", ["N", 8, 5])],
                  [tensor("y0", ["N", 4, 5]), tensor("y1", ["N", 4, 5])], 13, inits)
    x = (rng.standard_normal((4, 8, 5)) * 1.5).astype(np.float32)
    return Built(graph, {"x": x}, reference=reference(x))


CASE = Case(
    id="qdq-split-output-params",
    title="QDQ Split drops the Q/DQ of an output whose quantization parameters differ",
    op="QDQ Split (drop Q/DQ)", issue=None, pr=18394, level="enable_all",
    affected=("1.15.1", "1.16.3"),
    fixed=("1.17.3", "1.18.1", "1.19.2", "1.20.1", "1.21.1", "1.22.1", "1.23.2", "1.24.4",
           "1.25.1", "1.26.0", "1.27.0", "1.28.0", "1.29.0", "1.30.0", "1.31.1", "1.32.0"),
    ground_truth=("split", "q_s1", "dq_s1"),
    patch="onnxruntime/core/optimizer/qdq_transformer/selectors_actions/qdq_selectors.cc and "
          "shared/utils.cc: Split moved from DropQDQNodeGroupSelector (input 0 vs output 0 only) "
          "to a new SplitNodeGroupSelector that requires every output's Q to match the input DQ",
    build=build, cnn_op=False,
    relation="Split: y_i = x[..., slice_i, ...] along the axis (channel groups in a network)",
    note="PR 18394 (merged 2023-11, first in 1.17.0) names no issue; its description: the "
         "selector 'does not ensure that all quantization parameters are equal'. The release "
         "sweep finds 1.15.1 and 1.16.3 wrong at enable_all, right at disable_all; the error "
         "also appears when output 0 (not 1) or both outputs differ. Optimized models: 1.16.3 "
         "drops every Q/DQ around the Split whether or not output 1's parameters differ; 1.17.3 "
         "still drops them when all parameters are equal and keeps them here, as PR 18394 says")
