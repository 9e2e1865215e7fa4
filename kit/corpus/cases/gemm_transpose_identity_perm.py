"""An identity Transpose folded into Gemm (issues 32228, 32417, 32418; fixed by PR 32435 "fix:
avoid fusing identity transpose into Gemm"): the level-1 GemmTransposeFusion removes any
Transpose feeding a Gemm and toggles transA/transB without reading its perm, so a
Transpose(perm=[0, 1]), which changes nothing, turns Gemm(x, W, b) into Gemm(x^T, W, b). A
square x runs and returns x^T W + b; any other shape fails to run."""

from __future__ import annotations

import numpy as np
from onnx import helper

from kit.corpus.case import Built, Case, constant, model, tensor

K, OUT = 8, 5  # the batch must equal K (x square), else the fused Gemm rejects the shapes


def build(seed: int) -> Built:
    rng = np.random.default_rng(seed + 12)
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], name="transpose", perm=[0, 1]),
             helper.make_node("Gemm", ["xt", "W", "b"], ["y"], name="gemm")]
    w = rng.standard_normal((K, OUT)).astype(np.float32)
    b = rng.standard_normal(OUT).astype(np.float32)
    graph = model(nodes, [tensor("x", ["N", K])], [tensor("y", ["N", OUT])], 13,
                  [constant("W", w), constant("b", b)])
    x = rng.standard_normal((K, K)).astype(np.float32)
    # the spec by hand: perm=[0, 1] is the identity, so y = x W + b (float64)
    y = x.astype(np.float64) @ w.astype(np.float64) + b.astype(np.float64)
    return Built(graph, {"x": x}, reference={"y": y})


CASE = Case(
    id="gemm-transpose-identity-perm",
    title="GemmTransposeFusion folds an identity Transpose (perm=[0,1]) into transA",
    op="Transpose+Gemm", issue=32228, pr=32435, level="enable_all",
    affected=("1.15.1", "1.16.3", "1.17.3", "1.18.1", "1.19.2", "1.20.1", "1.21.1", "1.22.1",
              "1.23.2", "1.24.4", "1.25.1", "1.26.0", "1.27.0", "1.28.0", "1.29.0"),
    fixed=("1.30.0", "1.31.1", "1.32.0"),
    ground_truth=("transpose", "gemm"),
    patch="onnxruntime/core/optimizer/gemm_transpose_fusion.cc: GemmTransposeFusion::"
          "SatisfyCondition, Apply (fold only a rank-2 Transpose with perm [1, 0], or no perm "
          "on a known rank-2 input)",
    build=build, cnn_op=False,
    relation="batch permutation equivariance: permuting the rows of x (the batch) must "
             "permute the rows of y the same way; the fused x^T W mixes the batch into every "
             "row, so a permuted batch changes every output row",
    note="tracker: issue 32228 calls it a regression after 1.20.1, but the release sweep finds "
         "every release from 1.15.1 to 1.29.0 wrong at enable_all (also for the issue's "
         "Transpose -> MatMul -> Add form, which MatMulAddFusion turns into this Gemm); "
         "disable_all is right everywhere; a non-square x makes the fused Gemm raise "
         "(issues 32417, 32418); the batch must be 8 here")
