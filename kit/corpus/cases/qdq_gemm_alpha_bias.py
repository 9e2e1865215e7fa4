"""A QDQ Gemm with alpha != 1 and a quantized bias fused into QGemm (issue 28130, fixed by
PR 28131 "Reject QDQ Gemm->QGemm fusion when alpha != 1 with bias"): at level 2 the QDQ
selector checks beta == 1 but not alpha, and QGemm adds the int32 bias to the integer
accumulator before applying the output scale alpha * a_scale * b_scale, so the bias is
silently multiplied by alpha (Y = alpha*A*B + alpha*C instead of alpha*A*B + C)."""

from __future__ import annotations

import numpy as np
from onnx import helper

from kit.corpus.case import Array, Built, Case, constant, model, tensor

# The weight DequantizeLinear carries an explicit zero point (0): from 1.28.0 the QGemm
# selector also rejects a weight DQ without one (apparently PR 28714), which would hide the
# boundary.
# Power-of-two input and weight scales (their product 2^-11 is exact in float32, so the float
# Gemm is exact), the bias at the canonical scale x_scale * w_scale (the fusion's own
# convention) and an output scale of 163 * 2^-13 (odd multiple: no element of gemm / y_scale
# lies within 1/326 of a rounding tie)
X_SCALE, X_ZERO, W_SCALE = 2.0 ** -5, 128, 2.0 ** -6
B_SCALE = X_SCALE * W_SCALE
Y_SCALE, Y_ZERO = 163 * 2.0 ** -13, 128
ALPHA = 2.0


def reference(x: Array, wq: Array, bq: Array) -> Array:
    """The unfused graph by hand in float64: Q/DQ of x, DQ of W and C, Gemm (alpha, beta 1),
    Q/DQ of the result (round half to even, saturate to uint8)."""
    xd = (np.clip(np.rint(x.astype(np.float64) / X_SCALE) + X_ZERO, 0, 255) - X_ZERO) * X_SCALE
    wd, bd = wq.astype(np.float64) * W_SCALE, bq.astype(np.float64) * B_SCALE
    gemm = ALPHA * (xd @ wd) + bd[None, :]
    found: Array = (np.clip(np.rint(gemm / Y_SCALE) + Y_ZERO, 0, 255) - Y_ZERO) * Y_SCALE
    return found


def build(seed: int) -> Built:
    rng = np.random.default_rng(seed + 29)
    wq = rng.integers(-40, 41, (16, 8)).astype(np.int8)
    bq = rng.integers(-3000, 3001, 8).astype(np.int32)
    node = helper.make_node
    nodes = [node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["x_q"], name="q_x"),
             node("DequantizeLinear", ["x_q", "x_scale", "x_zero"], ["x_dq"], name="dq_x"),
             node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w_dq"], name="dq_w"),
             node("DequantizeLinear", ["b_q", "b_scale"], ["b_dq"], name="dq_b"),
             node("Gemm", ["x_dq", "w_dq", "b_dq"], ["g"], name="gemm", alpha=ALPHA, beta=1.0),
             node("QuantizeLinear", ["g", "y_scale", "y_zero"], ["g_q"], name="q_y"),
             node("DequantizeLinear", ["g_q", "y_scale", "y_zero"], ["y"], name="dq_y")]
    inits = [constant("x_scale", X_SCALE), constant("x_zero", X_ZERO, np.uint8),
             constant("w_q", wq, np.int8), constant("w_scale", W_SCALE),
             constant("w_zero", 0, np.int8),
             constant("b_q", bq, np.int32), constant("b_scale", B_SCALE),
             constant("y_scale", Y_SCALE), constant("y_zero", Y_ZERO, np.uint8)]
    graph = model(nodes, [tensor("x", ["N", 16])], [tensor("y", ["N", 8])], 13, inits)
    x = (rng.standard_normal((8, 16)) * 0.8).astype(np.float32)
    return Built(graph, {"x": x}, reference={"y": reference(x, wq, bq)})


CASE = Case(
    id="qdq-gemm-alpha-bias",
    title="QDQ Gemm with alpha != 1 and a bias fused into QGemm, which scales the bias by alpha",
    op="QDQ Gemm (QGemm fusion)", issue=28130, pr=28131, level="enable_all",
    affected=("1.15.1", "1.16.3", "1.17.3", "1.18.1", "1.19.2", "1.20.1", "1.21.1", "1.22.1",
              "1.23.2", "1.24.4", "1.25.1", "1.26.0", "1.27.0"),
    fixed=("1.28.0", "1.29.0", "1.30.0", "1.31.1", "1.32.0"),
    ground_truth=("gemm", "dq_b"),
    patch="onnxruntime/core/optimizer/qdq_transformer/selectors_actions/qdq_selectors.cc: "
          "GemmNodeGroupSelector::Check (reject the QGemm fusion when a bias is present and "
          "alpha != 1, symmetric to the existing beta == 1 check)",
    build=build, cnn_op=False,
    relation="Gemm: Y = alpha * A @ B + beta * C (a fully connected layer with a scaled product)",
    note="tracker: issue 28130 (ORT_DISABLE_ALL right, ORT_ENABLE_ALL wrong, discrepancy gone "
         "with a zero bias); the release sweep finds every release from 1.15.1 to 1.27.0 wrong "
         "at enable_all and right at disable_all; the same error appears with a float output "
         "(no output Q, QGemm with float Y) and with transB=1, alpha 0.5. Without the explicit "
         "weight zero point 1.28.0 also skips the fusion for an unrelated reason (PR 28714 "
         "requires the QGemm zero points), so the explicit zero point pins the boundary on "
         "PR 28131: with it 1.28.0 still fuses alpha == 1 (QGemm in the optimized model) and "
         "leaves alpha == 2 unfused")
