"""Q/DQ dropped around a linear Resize (issue 21319, also filed as 28448; fixed by PR 28414
"fix: preserve Q/DQ around Resize when mode is linear or cubic"): at level 2
DropQDQNodeGroupSelector removes the Q/DQ pair around every Resize, so a linear Resize runs
on the int8 values themselves; the integer kernel does not round its interpolated values as
QuantizeLinear does (round half to even of the float result), and output elements come back
one quantization step off."""

from __future__ import annotations

import numpy as np
from onnx import helper

from kit.corpus.case import Array, Built, Case, constant, model, tensor

# int8 with a power-of-two scale and zero point 3; Resize linear, asymmetric coordinates,
# scales 3 on both spatial axes: every interpolation weight is a multiple of 1/3, so every
# interpolated value / scale is an integer plus a multiple of 1/9 (never within 1/18 of a
# rounding tie) and the Q/DQ'd reference is exact
SCALE, ZERO = 2.0 ** -3, 3
FACTOR = 3


def axis_weights(n_in: int, n_out: int) -> tuple[Array, Array, Array]:
    """asymmetric coordinates x_in = x_out / FACTOR, clamped; lower index, upper, weight."""
    xin = np.clip(np.arange(n_out) / FACTOR, 0, n_in - 1)
    lo = np.floor(xin).astype(int)
    hi = np.minimum(lo + 1, n_in - 1)
    return lo, hi, xin - lo


def reference(x: Array) -> Array:
    """The unfused graph by hand in float64: Q/DQ of x (int8), bilinear Resize by 3,
    Q/DQ of the result (round half to even, saturate to int8)."""
    xd = (np.clip(np.rint(x.astype(np.float64) / SCALE) + ZERO, -128, 127) - ZERO) * SCALE
    h, w = xd.shape[2:]
    hl, hh, hw = axis_weights(h, h * FACTOR)
    wl, wh, ww = axis_weights(w, w * FACTOR)
    rows = xd[:, :, hl, :] * (1 - hw)[:, None] + xd[:, :, hh, :] * hw[:, None]
    r = rows[:, :, :, wl] * (1 - ww) + rows[:, :, :, wh] * ww
    found: Array = (np.clip(np.rint(r / SCALE) + ZERO, -128, 127) - ZERO) * SCALE
    return found


def build(seed: int) -> Built:
    rng = np.random.default_rng(seed + 37)
    node = helper.make_node
    nodes = [node("QuantizeLinear", ["x", "scale", "zero"], ["x_q"], name="q_x"),
             node("DequantizeLinear", ["x_q", "scale", "zero"], ["x_dq"], name="dq_x"),
             node("Resize", ["x_dq", "", "scales"], ["r"], name="resize", mode="linear",
                  coordinate_transformation_mode="asymmetric"),
             node("QuantizeLinear", ["r", "scale", "zero"], ["r_q"], name="q_y"),
             node("DequantizeLinear", ["r_q", "scale", "zero"], ["y"], name="dq_y")]
    inits = [constant("scale", SCALE), constant("zero", ZERO, np.int8),
             constant("scales", [1, 1, FACTOR, FACTOR])]
    graph = model(nodes, [tensor("x", ["N", 2, 4, 5])],
                  [tensor("y", ["N", 2, 4 * FACTOR, 5 * FACTOR])], 13, inits)
    x = (rng.standard_normal((2, 2, 4, 5)) * 5).astype(np.float32)
    return Built(graph, {"x": x}, reference={"y": reference(x)})


CASE = Case(
    id="qdq-resize-linear",
    title="Q/DQ dropped around a linear Resize, which then interpolates int8 values",
    op="QDQ Resize (linear, drop Q/DQ)", issue=21319, pr=28414, level="enable_all",
    affected=("1.15.1", "1.16.3", "1.17.3", "1.18.1", "1.19.2", "1.20.1", "1.21.1", "1.22.1",
              "1.23.2", "1.24.4", "1.25.1", "1.26.0"),
    fixed=("1.27.0", "1.28.0", "1.29.0", "1.30.0", "1.31.1", "1.32.0"),
    ground_truth=("resize", "q_x", "dq_x", "q_y", "dq_y"),
    patch="onnxruntime/core/optimizer/qdq_transformer/selectors_actions/qdq_selectors.cc: "
          "DropQDQNodeGroupSelector::Check (refuse the drop for a Resize whose mode is not "
          "nearest)",
    build=build,
    note="tracker: issue 21319 (2024, int8 linear Resize, ORT_DISABLE_ALL right) and its "
         "duplicate 28448 (2026, half_pixel with sizes); PR 28414 says 'Fixes #21319'. The "
         "release sweep finds 1.15.1 to 1.26.0 one step off at enable_all and right at "
         "disable_all; uint8 and half_pixel / pytorch_half_pixel variants behave the same "
         "(cubic raised an error at enable_all before the fix: not used)")
