"""A lossy Cast chain removed as a duplicate (issue 17565, PR 17953): float32 -> float16 ->
float32 collapses into one Cast to float32 even with every optimisation off, so the float16
rounding (and overflow to inf) never happens."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from kit.corpus.case import Built, Case, model, tensor


def build(seed: int) -> Built:
    nodes = [helper.make_node("Cast", ["x"], ["h"], name="cast0", to=TensorProto.FLOAT16),
             helper.make_node("Cast", ["h"], ["y"], name="cast1", to=TensorProto.FLOAT)]
    graph = model(nodes, [tensor("x", ["N", 64])], [tensor("y", ["N", 64])], 13)
    x = (np.random.default_rng(seed + 3).standard_normal((8, 64)) * 300).astype(np.float32)
    return Built(graph, {"x": x})


CASE = Case(
    id="cast-chain-fp16", title="Lossy Cast chain float32-float16-float32 removed",
    op="Cast", issue=17565, pr=17953, level="disable_all",
    affected=("1.15.1", "1.16.3"),
    fixed=("1.17.3", "1.18.1", "1.19.2", "1.20.1", "1.21.1", "1.22.1", "1.23.2", "1.24.4",
           "1.25.1", "1.26.0", "1.27.0", "1.28.0", "1.29.0", "1.30.0", "1.31.1", "1.32.0"),
    ground_truth=("cast0", "cast1"),
    patch="onnxruntime/core/optimizer/insert_cast_transformer.cc: "
          "RemoveDuplicateCastTransformer::ApplyImpl (a LossOfPrecision check)",
    build=build, cnn_op=False,
    relation="a float16 round trip is idempotent: cast16(cast16(x)) = cast16(x), so running "
             "the model on its own output must change nothing; the removed chain fails "
             "it wherever x is not a float16 value",
    note="tracker: fixed in 1.17.0; the transformer runs even at disable_all")
