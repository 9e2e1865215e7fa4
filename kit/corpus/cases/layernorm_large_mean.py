"""LayerNormalization on rows with a large mean (issues 21935 and 28463): the CPU kernel
computed the variance as E[x^2] - E[x]^2 in float32, which cancels for rows like
[40000, 40001, 40002, 40003]; the output is wrong or NaN. The two-pass, mean-centred variance
is attributed to PR 28743 ("Address numerical accuracy issues")."""

from __future__ import annotations

import numpy as np
from onnx import helper

from kit.corpus.case import Built, Case, constant, model, tensor


def build(seed: int) -> Built:
    node = helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["y"],
                            name="layernorm", axis=-1, epsilon=1e-5)
    graph = model([node], [tensor("x", ["N", 4])], [tensor("y", ["N", 4])], 17,
                  [constant("gamma", np.ones(4)), constant("beta", np.zeros(4))])
    # The issue's rows: four consecutive integers from a large start (exact in float32)
    starts = np.random.default_rng(seed + 9).integers(20000, 80000, size=8)
    x = (starts[:, None] + np.arange(4)[None, :]).astype(np.float32)
    return Built(graph, {"x": x})


CASE = Case(
    id="layernorm-large-mean", title="LayerNormalization variance cancels for a large mean",
    op="LayerNormalization", issue=28463, pr=28743, level="disable_all",
    affected=("1.15.1", "1.16.3", "1.17.3", "1.18.1", "1.19.2", "1.20.1", "1.21.1", "1.22.1",
              "1.23.2", "1.24.4", "1.25.1", "1.26.0"),
    fixed=("1.27.0", "1.28.0", "1.29.0", "1.30.0", "1.31.1", "1.32.0"),
    ground_truth=("layernorm",),
    patch="onnxruntime/core/providers/cpu/nn/layer_norm_impl.cc: ComputeJob (a mean-centred "
          "variance instead of E[x^2] - E[x]^2); attributed to PR 28743 by its description",
    build=build, cnn_op=False,
    relation="translation invariance along the normalised axis: LayerNormalization of x + c "
             "(c one constant for the whole row) equals that of x, so the follow-up row "
             "x + 40000 must give the source row's output; a variance taken as E[x^2] - E[x]^2 "
             "cancels for a large c and breaks the relation",
    note="activations of the digits CNNs stay far below the means (>= 2e4) the defect needs; "
         "earlier report: issue 21935 (closed stale); rows with mean 1000 and spread 0.1 "
         "stay wrong up to 1.29.0, a second change in 1.30.0; both levels")
