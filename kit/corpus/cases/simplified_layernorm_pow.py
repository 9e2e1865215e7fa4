"""The RMS-norm fusion ignores the Pow exponent (fixed by PR 29196, which adds the check that
the exponent is 2): Pow(x, 3) -> ReduceMean -> Add(eps) -> Sqrt -> Div -> Mul is fused into
SimplifiedLayerNormalization, which always squares."""

from __future__ import annotations

import numpy as np
from onnx import helper

from kit.corpus.case import Built, Case, constant, model, tensor


def build(seed: int) -> Built:
    rng = np.random.default_rng(seed + 7)
    nodes = [helper.make_node("Pow", ["x", "power"], ["x3"], name="pow"),
             helper.make_node("ReduceMean", ["x3"], ["m"], name="reducemean", axes=[-1]),
             helper.make_node("Add", ["m", "eps"], ["me"], name="add_eps"),
             helper.make_node("Sqrt", ["me"], ["s"], name="sqrt"),
             helper.make_node("Div", ["x", "s"], ["n"], name="div"),
             helper.make_node("Mul", ["n", "gamma"], ["y"], name="mul_gamma")]
    inits = [constant("power", 3.0), constant("eps", 1e-5),
             constant("gamma", rng.standard_normal(16))]
    graph = model(nodes, [tensor("x", ["N", 3, 16])], [tensor("y", ["N", 3, 16])], 13, inits)
    # Positive inputs keep x^3's mean positive, so the unfused graph is finite
    x = (np.abs(rng.standard_normal((8, 3, 16))) + 0.2).astype(np.float32)
    return Built(graph, {"x": x})


CASE = Case(
    id="simplified-layernorm-pow", title="RMS-norm fusion of a Pow whose exponent is not 2",
    op="SimplifiedLayerNormalization (fused)", issue=None, pr=29196, level="enable_all",
    affected=("1.15.1", "1.16.3", "1.17.3", "1.18.1", "1.19.2", "1.20.1", "1.21.1", "1.22.1",
              "1.23.2", "1.24.4", "1.25.1", "1.26.0", "1.27.0"),
    fixed=("1.28.0", "1.29.0", "1.30.0", "1.31.1", "1.32.0"), ground_truth=("pow",),
    patch="onnxruntime/core/optimizer/layer_norm_fusion.cc: SimplifiedLayerNormFusion::"
          "ApplyImpl (IsPowExponentTwo on the Pow's exponent)",
    build=build, cnn_op=False,
    relation="degree of homogeneity: with mean(x^3) >> eps the graph is homogeneous of "
             "degree 1 - 3/2 = -1/2 in x, so the follow-up 4x must give half the source's "
             "output; an RMS norm (exponent 2) is of degree 0 and gives the same output, so "
             "the fused graph breaks the relation",
    note="RMS norm sits in transformer blocks, not in the digits CNNs")
