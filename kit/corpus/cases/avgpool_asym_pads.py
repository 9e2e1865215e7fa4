"""AveragePool-19 with count_include_pad=1 and asymmetric pads (issue 26708, PR 27375): the
opset-19 2-D/3-D kernels clamp the window's end with the wrong pad index (``pads[1]`` where
``pads[2]`` belongs), so a window that reaches into the end padding is divided wrongly."""

from __future__ import annotations

import numpy as np
from onnx import helper

from kit.corpus.case import Built, Case, model, tensor

AFTER = ("1.25.1", "1.26.0", "1.27.0", "1.28.0", "1.29.0", "1.30.0", "1.31.1", "1.32.0")


def build(seed: int) -> Built:
    node = helper.make_node("AveragePool", ["x"], ["y"], name="avgpool", kernel_shape=[3, 3],
                            strides=[1, 1], pads=[0, 0, 1, 1], count_include_pad=1)
    graph = model([node], [tensor("x", ["N", 2, 6, 6])], [tensor("y", ["N", 2, 5, 5])], 19)
    x = np.random.default_rng(seed).standard_normal((8, 2, 6, 6)).astype(np.float32)
    return Built(graph, {"x": x})


CASE = Case(
    id="avgpool-asym-pads", title="AveragePool-19 count_include_pad=1 with end-only pads",
    op="AveragePool", issue=26708, pr=27375, level="disable_all",
    affected=("1.21.1", "1.22.1", "1.23.2", "1.24.4"), fixed=AFTER,
    ground_truth=("avgpool",),
    patch="onnxruntime/core/providers/cpu/nn/pool_functors.h: AveragePool2DTask, "
          "AveragePool3DTask (window end clamped with pads[1] instead of pads[2])",
    build=build, note="tracker: wrong from 1.21.0, right again in 1.25.1; 1.15 has no "
                      "AveragePool-19 kernel (NOT_IMPLEMENTED)")
