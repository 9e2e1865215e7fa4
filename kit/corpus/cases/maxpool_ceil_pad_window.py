"""MaxPool with ceil_mode=1 keeps a last window that starts in the end padding (issue 15446,
"MaxPool op does not work as expected when ceil_mode=True and padding=1"; fixed by PR 16752,
"Align AvgPool ceil_mode on last value to torch", whose description says it also "fixes the
shape mismatch caused by sliding window starting from padding", per onnx PR 6650 / 5741):
the spec (and PyTorch) drop an output position whose window would start in the right/bottom
padding; the CPU kernels up to 1.20 computed ceil((in + pads - k) / stride) + 1 positions
without that correction, so a 5x5 map pooled with kernel 2, stride 2, pads 1 comes out 4x4
instead of 3x3, the extra row and column holding -FLT_MAX (the max over an all-padding
window). No error is raised."""

from __future__ import annotations

import numpy as np
from onnx import helper

from kit.corpus.case import Built, Case, model, tensor

AFTER = ("1.21.1", "1.22.1", "1.23.2", "1.24.4", "1.25.1", "1.26.0", "1.27.0", "1.28.0",
         "1.29.0", "1.30.0", "1.31.1", "1.32.0")


def build(seed: int) -> Built:
    node = helper.make_node("MaxPool", ["x"], ["y"], name="maxpool", kernel_shape=[2, 2],
                            strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)
    # output spatial dims left symbolic: the affected releases return 4x4, the spec 3x3
    graph = model([node], [tensor("x", ["N", 2, 5, 5])], [tensor("y", ["N", 2, "H", "W"])], 12)
    x = np.random.default_rng(seed + 5).standard_normal((8, 2, 5, 5)).astype(np.float32)
    return Built(graph, {"x": x})


CASE = Case(
    id="maxpool-ceil-pad-window",
    title="MaxPool ceil_mode=1 keeps a window that starts in the padding",
    op="MaxPool", issue=15446, pr=16752, level="disable_all",
    affected=("1.15.1", "1.16.3", "1.17.3", "1.18.1", "1.19.2", "1.20.1"), fixed=AFTER,
    ground_truth=("maxpool",),
    patch="onnxruntime/core/providers/cpu/nn/pool_attributes.h: ComputeOutputSize (ceil_mode "
          "output size reduced by one when the last window would start in the end padding), "
          "PR 16752 (merged for the 1.21.0 release)",
    build=build,
    note="same boundary for AveragePool (opsets 11 and 19, count_include_pad=0) and LpPool-18 "
         "with ceil_mode and end padding, and for MaxPool's Indices output (-6 garbage there); "
         "AveragePool with count_include_pad=1 stays wrong until 1.29 (the corpus's "
         "avgpool-ceil-include-pad, issue 16203); both levels; no padding needed when "
         "kernel < stride (kernel 1, stride 2 on an even side)")
