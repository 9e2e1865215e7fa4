"""A QDQ Conv fused into QLinearConv although its bias is not quantized with scale
x_scale * w_scale (issue 24711, fixed by PR 28229 "validate bias scale in QDQ Conv ->
QLinearConv fusion"): at level 2 the QDQ selector checks only that the bias is int32 and
hands its integers to QLinearConv, which reads them at scale x_scale * w_scale; a bias
DequantizeLinear with any other scale is silently rescaled (here by 1/512)."""

from __future__ import annotations

import numpy as np
from onnx import helper

from kit.corpus.case import Array, Built, Case, constant, model, tensor

# Power-of-two input and weight scales (their products 2^-13 are exact in float32, so the
# float Conv is exact) and an output scale of 163 * 2^-13 (odd multiple: no element of
# conv / y_scale lies within 1/326 of a rounding tie)
X_SCALE, X_ZERO, W_SCALE, B_SCALE = 2.0 ** -6, 128, 2.0 ** -7, 2.0 ** -4
Y_SCALE, Y_ZERO = 163 * 2.0 ** -13, 128


def reference(x: Array, wq: Array, bq: Array) -> Array:
    """The unfused graph by hand in float64: Q/DQ of x, DQ of W and b, Conv (3x3, pads 1),
    Q/DQ of the result (round half to even, saturate to uint8)."""
    xd = (np.clip(np.rint(x.astype(np.float64) / X_SCALE) + X_ZERO, 0, 255) - X_ZERO) * X_SCALE
    wd, bd = wq.astype(np.float64) * W_SCALE, bq.astype(np.float64) * B_SCALE
    n, _, h, w = xd.shape
    xp = np.pad(xd, ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv = np.zeros((n, wq.shape[0], h, w)) + bd[None, :, None, None]
    for i in range(3):
        for j in range(3):
            conv += np.einsum("nchw,oc->nohw", xp[:, :, i:i + h, j:j + w], wd[:, :, i, j])
    found: Array = (np.clip(np.rint(conv / Y_SCALE) + Y_ZERO, 0, 255) - Y_ZERO) * Y_SCALE
    return found


def build(seed: int) -> Built:
    rng = np.random.default_rng(seed + 13)
    wq = rng.integers(-30, 31, (4, 3, 3, 3)).astype(np.int8)
    bq = rng.integers(-16, 17, 4).astype(np.int32)
    node = helper.make_node
    nodes = [node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["x_q"], name="q_x"),
             node("DequantizeLinear", ["x_q", "x_scale", "x_zero"], ["x_dq"], name="dq_x"),
             node("DequantizeLinear", ["w_q", "w_scale"], ["w_dq"], name="dq_w"),
             node("DequantizeLinear", ["b_q", "b_scale"], ["b_dq"], name="dq_b"),
             node("Conv", ["x_dq", "w_dq", "b_dq"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             node("QuantizeLinear", ["c", "y_scale", "y_zero"], ["c_q"], name="q_y"),
             node("DequantizeLinear", ["c_q", "y_scale", "y_zero"], ["y"], name="dq_y")]
    inits = [constant("x_scale", X_SCALE), constant("x_zero", X_ZERO, np.uint8),
             constant("w_q", wq, np.int8), constant("w_scale", W_SCALE),
             constant("b_q", bq, np.int32), constant("b_scale", B_SCALE),
             constant("y_scale", Y_SCALE), constant("y_zero", Y_ZERO, np.uint8)]
    graph = model(nodes, [tensor("x", ["N", 3, 6, 6])], [tensor("y", ["N", 4, 6, 6])], 13,
                  inits)
    x = (rng.standard_normal((8, 3, 6, 6)) * 0.8).astype(np.float32)
    return Built(graph, {"x": x}, reference={"y": reference(x, wq, bq)})


CASE = Case(
    id="qdq-conv-bias-scale",
    title="QDQ Conv fused into QLinearConv with a bias scale other than x_scale * w_scale",
    op="QDQ Conv (QLinearConv fusion)", issue=24711, pr=28229, level="enable_all",
    affected=("1.15.1", "1.16.3", "1.17.3", "1.18.1", "1.19.2", "1.20.1", "1.21.1", "1.22.1",
              "1.23.2", "1.24.4", "1.25.1", "1.26.0"),
    fixed=("1.27.0", "1.28.0", "1.29.0", "1.30.0", "1.31.1", "1.32.0"),
    ground_truth=("conv", "dq_b"),
    patch="onnxruntime/core/optimizer/qdq_transformer/selectors_actions/qdq_selectors.cc: "
          "ConvNodeGroupSelector::Check (a new CheckConvBiasScale: fuse only when the bias "
          "scale equals x_scale * w_scale within 1%)",
    build=build,
    note="tracker: issue 24711 (ORT 1.19.2, level ENABLE_EXTENDED and above); the release "
         "sweep finds every release from 1.15.1 to 1.26.0 wrong at enable_all and right at "
         "disable_all; a quantizer that follows the QLinearConv convention "
         "(b_scale = x_scale * w_scale) never meets it")
