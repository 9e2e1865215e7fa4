"""The RMS-norm fusion over the wrong axis (PR 15844, "More checks on ReduceMean axes"): the
decomposed RMS norm Pow(x, 2) -> ReduceMean -> Add(eps) -> Sqrt -> Div -> Mul normalising
axis 1 is fused into SimplifiedLayerNormalization(axis=-1), which normalises the last axis,
without checking the ReduceMean axes. The same pull request added the check at both match
sites of layer_norm_fusion.cc; this is the SimplifiedLayerNormFusion site, the corpus's
layernorm-fusion-axis the LayerNormFusion one."""

from __future__ import annotations

import numpy as np
from onnx import helper

from kit.corpus.case import Built, Case, constant, model, tensor


def build(seed: int) -> Built:
    rng = np.random.default_rng(seed + 16)
    nodes = [helper.make_node("Pow", ["x", "two"], ["x2"], name="pow"),
             helper.make_node("ReduceMean", ["x2"], ["m"], name="reducemean", axes=[1]),
             helper.make_node("Add", ["m", "eps"], ["me"], name="add_eps"),
             helper.make_node("Sqrt", ["me"], ["s"], name="sqrt"),
             helper.make_node("Div", ["x", "s"], ["n"], name="div"),
             helper.make_node("Mul", ["n", "gamma"], ["y"], name="mul_gamma")]
    inits = [constant("two", 2.0), constant("eps", 1e-5),
             constant("gamma", rng.standard_normal(4) * 0.5 + 1)]
    graph = model(nodes, [tensor("x", ["N", 3, 4])], [tensor("y", ["N", 3, 4])], 13, inits)
    x = (rng.standard_normal((8, 3, 4)) * 2 + 0.5).astype(np.float32)
    return Built(graph, {"x": x})


CASE = Case(
    id="simplified-layernorm-fusion-axis",
    title="RMS-norm fusion matches a ReduceMean over axis 1",
    op="SimplifiedLayerNormalization (fused)", issue=None, pr=15844, level="enable_all",
    affected=("1.15.1",),
    fixed=("1.16.3", "1.17.3", "1.18.1", "1.19.2", "1.20.1", "1.21.1", "1.22.1", "1.23.2",
           "1.24.4", "1.25.1", "1.26.0", "1.27.0", "1.28.0", "1.29.0", "1.30.0", "1.31.1",
           "1.32.0"),
    ground_truth=("reducemean",),
    patch="onnxruntime/core/optimizer/layer_norm_fusion.cc: SimplifiedLayerNormFusion::"
          "ApplyImpl (the check of the ReduceMean axes PR 15844 added at both fusions)",
    build=build, cnn_op=False,
    relation="an RMS norm over axis 1 is equivariant to permuting axis 2 (the gamma axis) "
             "together with gamma; a norm over the last axis is not, so the fused graph "
             "breaks the relation",
    note="the same pull request as layernorm-fusion-axis, at the other fusion's match "
         "site (a model holding only the RMS-norm pattern is hit by this one alone); "
         "PR 15844 shipped in 1.16")
