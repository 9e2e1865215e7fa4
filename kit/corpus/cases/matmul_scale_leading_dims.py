"""A MatMul scale fusion that drops the scale's leading dimensions (issue 24407; fixed by PR
24492 "Fix MatMulScaleFusion handling of scales with leading dimensions"): the level-2
MatMulScaleFusion folds Mul(MatMul(x, W), s) into FusedMatMul(x, W, alpha=s) whenever s holds
one value, without checking that s has no more dimensions than the MatMul output. A scale of
shape [1, 1, 1, 1] makes Mul's output [1, N, 4, 3]; the fused node returns [N, 4, 3]. Nothing
fails: the next Softmax(axis=2) then normalises the last axis (3 values) instead of the
sequence axis (4 values), and the closing Reshape hides the shape change, so the model returns
silently wrong probabilities."""

from __future__ import annotations

import numpy as np
from onnx import helper

from kit.corpus.case import Array, Built, Case, constant, model, tensor

S, K, OUT = 4, 5, 3


def _softmax(v: Array, axis: int) -> Array:
    e = np.exp(v - v.max(axis=axis, keepdims=True))
    found: Array = e / e.sum(axis=axis, keepdims=True)
    return found


def build(seed: int) -> Built:
    rng = np.random.default_rng(seed + 24)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"], name="matmul"),
             helper.make_node("Mul", ["m", "scale"], ["ms"], name="mul_scale"),
             helper.make_node("Softmax", ["ms"], ["p"], name="softmax", axis=2),
             helper.make_node("Reshape", ["p", "shape"], ["y"], name="reshape")]
    w = rng.standard_normal((K, OUT)).astype(np.float32)
    scale = np.full((1, 1, 1, 1), 0.5, np.float32)
    graph = model(nodes, [tensor("x", ["N", S, K])], [tensor("y", ["N", S, OUT])], 13,
                  [constant("W", w), constant("scale", scale),
                   constant("shape", [-1, S, OUT], np.int64)])
    x = (rng.standard_normal((8, S, K)) * 2).astype(np.float32)
    # the spec by hand (float64): Mul broadcasts to [1, N, S, OUT]; Softmax axis 2 is S
    ms = (x.astype(np.float64) @ w.astype(np.float64))[None] * 0.5
    y = _softmax(ms, 2).reshape(-1, S, OUT)
    return Built(graph, {"x": x}, reference={"y": y})


CASE = Case(
    id="matmul-scale-leading-dims",
    title="MatMulScaleFusion folds a [1,1,1,1] scale and drops its leading dimension",
    op="MatMul+Mul (FusedMatMul)", issue=24407, pr=24492, level="enable_all",
    affected=("1.15.1", "1.16.3", "1.17.3", "1.18.1", "1.19.2", "1.20.1", "1.21.1", "1.22.1"),
    fixed=("1.23.2", "1.24.4", "1.25.1", "1.26.0", "1.27.0", "1.28.0", "1.29.0", "1.30.0",
           "1.31.1", "1.32.0"),
    ground_truth=("matmul", "mul_scale"),
    patch="onnxruntime/core/optimizer/matmul_scale_fusion.cc: GetScaleFromNode (accept a "
          "scale only when its shape does not broadcast leading dimensions onto the "
          "MatMul output)",
    build=build, cnn_op=False,
    relation="a scale of one value broadcasting as [1,1,1,1] only multiplies: scaling by "
             "0.5 through a [1] scale instead must give the same y; the fused graph "
             "changes the rank and so the axis Softmax normalises",
    note="issue 24407 reports the crash form (a later MatMul rejects the fused shape at "
         "session creation); without a rank-sensitive consumer the fused graph returns a "
         "tensor of shape [N,4,3] for the declared [1,N,4,3] (same values); here a "
         "Softmax(axis=2) turns the lost leading dimension into wrong numbers. disable_all "
         "is right everywhere")
