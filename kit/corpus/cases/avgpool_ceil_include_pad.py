"""AveragePool with ceil_mode=1 and count_include_pad=1 (issue 16203, PR 29629 for opsets
7-18): the last, partial window is divided by the full kernel size instead of the number of
elements of the padded input it covers (PyTorch's AvgPool2d(ceil_mode=True) semantics)."""

from __future__ import annotations

import numpy as np
from onnx import helper

from kit.corpus.case import Built, Case, model, tensor


def build(seed: int) -> Built:
    node = helper.make_node("AveragePool", ["x"], ["y"], name="avgpool", kernel_shape=[3, 3],
                            strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
                            count_include_pad=1)
    graph = model([node], [tensor("x", ["N", 2, 6, 6])], [tensor("y", ["N", 2, 4, 4])], 13)
    x = np.random.default_rng(seed + 1).standard_normal((8, 2, 6, 6)).astype(np.float32)
    return Built(graph, {"x": x})


CASE = Case(
    id="avgpool-ceil-include-pad", title="AveragePool ceil_mode=1 with count_include_pad=1",
    op="AveragePool", issue=16203, pr=29629, level="disable_all",
    affected=("1.15.1", "1.16.3", "1.17.3", "1.18.1", "1.19.2", "1.20.1", "1.21.1", "1.22.1",
              "1.23.2", "1.24.4", "1.25.1", "1.26.0", "1.27.0", "1.28.0"),
    fixed=("1.29.0", "1.30.0", "1.31.1", "1.32.0"), ground_truth=("avgpool",),
    patch="onnxruntime/core/providers/cpu/nn/pool.cc: Pool<float, AveragePool>::Compute "
          "(ceil_mode with count_include_pad routed away from MLAS); the opset-19 path was "
          "fixed earlier by PR 16752 (pool_functors.h)",
    build=build, note="opset 13 runs the float MLAS path that PR 29629 fixed")
