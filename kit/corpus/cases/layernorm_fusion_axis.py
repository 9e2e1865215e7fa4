"""A LayerNormalization fusion over the wrong axis (PR 15844): the decomposed layer norm
(ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add) normalising axis 1 is fused
into LayerNormalization(axis=-1) without checking the ReduceMean axes."""

from __future__ import annotations

import numpy as np
from onnx import helper

from kit.corpus.case import Built, Case, constant, model, tensor


def build(seed: int) -> Built:
    rng = np.random.default_rng(seed + 4)
    nodes = [helper.make_node("ReduceMean", ["x"], ["mu"], name="reducemean_mean", axes=[1]),
             helper.make_node("Sub", ["x", "mu"], ["d"], name="sub"),
             helper.make_node("Pow", ["d", "two"], ["d2"], name="pow"),
             helper.make_node("ReduceMean", ["d2"], ["var"], name="reducemean_var", axes=[1]),
             helper.make_node("Add", ["var", "eps"], ["ve"], name="add_eps"),
             helper.make_node("Sqrt", ["ve"], ["sd"], name="sqrt"),
             helper.make_node("Div", ["d", "sd"], ["n"], name="div"),
             helper.make_node("Mul", ["n", "gamma"], ["g"], name="mul_gamma"),
             helper.make_node("Add", ["g", "beta"], ["y"], name="add_beta")]
    inits = [constant("two", 2.0), constant("eps", 1e-5),
             constant("gamma", rng.standard_normal(4) * 0.5 + 1),
             constant("beta", rng.standard_normal(4) * 0.1)]
    graph = model(nodes, [tensor("x", ["N", 3, 4])], [tensor("y", ["N", 3, 4])], 13, inits)
    x = (rng.standard_normal((8, 3, 4)) * 2 + 0.5).astype(np.float32)
    return Built(graph, {"x": x})


CASE = Case(
    id="layernorm-fusion-axis", title="LayerNorm fusion matches a ReduceMean over axis 1",
    op="LayerNormalization (fused)", issue=None, pr=15844, level="enable_all",
    affected=("1.15.1",),
    fixed=("1.16.3", "1.17.3", "1.18.1", "1.19.2", "1.20.1", "1.21.1", "1.22.1", "1.23.2",
           "1.24.4", "1.25.1", "1.26.0", "1.27.0", "1.28.0", "1.29.0", "1.30.0", "1.31.1",
           "1.32.0"),
    ground_truth=("reducemean_mean", "reducemean_var"),
    patch="onnxruntime/core/optimizer/layer_norm_fusion.cc: LayerNormFusion::ApplyImpl (a "
          "check of the ReduceMean axes)",
    build=build, cnn_op=False,
    relation="normalisation over axis 1 is equivariant to permuting axis 2 (the gamma/beta "
             "axis) together with gamma and beta; a norm over the last axis is not, so the "
             "fused graph breaks the relation",
    note="PR 15844 shipped in 1.16; the ConvNeXt-style channels-first form (gamma [C,1,1]) "
         "is not fused even in 1.15.1, so no image model of this kind hits it")
