"""QuantizeLinear-19 on a float16 input truncates (issue 18576, fixed by PR 32452 "Fix float16
QuantizeLinear rounding on CPU"): the CPU kernel's MLFloat16 path (ParQuantizeLinearStd)
converts x / scale to an integer with a plain cast, which truncates toward zero, where the
spec rounds to nearest, ties to even; every element whose quotient has a fractional part of
one half or more comes out one step toward zero."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from kit.corpus.case import Built, Case, constant, model, tensor

SCALE, ZERO = 0.125, 3  # a power-of-two scale: x / scale is exact in float16, 32 and 64


def build(seed: int) -> Built:
    node = helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["y"],
                            name="quantizelinear")
    graph = model([node], [tensor("x", ["N", 4, 8], TensorProto.FLOAT16)],
                  [tensor("y", ["N", 4, 8], TensorProto.INT8)], 19,
                  [constant("scale", SCALE, np.float16), constant("zero", ZERO, np.int8)])
    x = (np.random.default_rng(seed + 11).standard_normal((8, 4, 8)) * 4).astype(np.float16)
    # the spec by hand: saturate(round_half_even(x / scale) + zero_point) into int8
    q = np.clip(np.rint(x.astype(np.float64) / SCALE) + ZERO, -128, 127).astype(np.int8)
    return Built(graph, {"x": x}, reference={"y": q})


CASE = Case(
    id="quantizelinear-fp16-truncate",
    title="QuantizeLinear-19 on float16 input truncates instead of rounding to nearest even",
    op="QuantizeLinear", issue=18576, pr=32452, level="disable_all",
    affected=("1.16.3", "1.17.3", "1.18.1", "1.19.2", "1.20.1", "1.21.1", "1.22.1", "1.23.2",
              "1.24.4", "1.25.1", "1.26.0", "1.27.0", "1.28.0", "1.29.0"),
    fixed=("1.30.0", "1.31.1", "1.32.0"),
    ground_truth=("quantizelinear",),
    patch="onnxruntime/core/util/qmath.h: ParQuantizeLinearStd, the MLFloat16 overload "
          "(std::nearbyint before the int32 cast)",
    build=build, cnn_op=False,
    relation="shift equivariance: adding k * scale to x (exact in float16 for a power-of-two "
             "scale) adds k to every unsaturated output; truncation toward zero breaks it "
             "wherever x / scale and x / scale + k lie on opposite sides of zero, and "
             "round-to-nearest never does",
    note="tracker: issue 18576 (ORT 1.16, closed stale) reported the truncation; PR 32452 "
         "reproduced it on 1.29.0; 1.15.1 has no float16 QuantizeLinear-19 kernel "
         "(NOT_IMPLEMENTED), so it is in neither list; float32 input takes the MLAS path, "
         "which rounds correctly in every release; both levels")
