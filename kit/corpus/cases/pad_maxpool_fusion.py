"""Pad fused into MaxPool (issue 24737; the fusion came with PR 18136): the level-1 PadFusion
moves a constant-zero Pad into the MaxPool's pads, but MaxPool pads with -inf, so a window
whose real values are all negative returns their maximum instead of the padded zero."""

from __future__ import annotations

import numpy as np
from onnx import helper

from kit.corpus.case import Built, Case, constant, model, tensor


def build(seed: int) -> Built:
    pad = helper.make_node("Pad", ["x", "pads", "value"], ["p"], name="pad", mode="constant")
    pool = helper.make_node("MaxPool", ["p"], ["y"], name="maxpool", kernel_shape=[3, 3],
                            strides=[2, 2], pads=[0, 0, 0, 0])
    inits = [constant("pads", [0, 0, 1, 1, 0, 0, 1, 1], np.int64), constant("value", 0.0)]
    graph = model([pad, pool], [tensor("x", ["N", 2, 7, 7])], [tensor("y", ["N", 2, 4, 4])],
                  13, inits)
    # Negative-leaning, as after a convolution with a negative bias and no ReLU before the pad
    x = np.random.default_rng(seed + 6).standard_normal((8, 2, 7, 7)).astype(np.float32) - 1.5
    return Built(graph, {"x": x})


CASE = Case(
    id="pad-maxpool-fusion", title="A zero Pad fused into MaxPool pads with -inf instead",
    op="Pad+MaxPool", issue=24737, pr=None, level="enable_all",
    affected=("1.17.3", "1.18.1", "1.19.2", "1.20.1", "1.21.1", "1.22.1", "1.23.2", "1.24.4",
              "1.25.1", "1.26.0", "1.27.0", "1.28.0", "1.29.0", "1.30.0", "1.31.1"),
    fixed=("1.32.0",), ground_truth=("maxpool", "pad"),
    patch="onnxruntime/core/optimizer/pad_fusion.cc: PadFusion::SatisfyCondition (a Pad "
          "whose value is not -inf no longer fuses into MaxPool); the fixing pull request "
          "was not found in the stored tracker, the fix is attributed by the release sweep",
    build=build, note="1.15 and 1.16 predate the fusion (PR 18136, first in 1.17) and are "
                      "right; the defect needs optimisation level basic or higher")
