"""Resize nearest with half_pixel and round_prefer_ceil (issue 28291): the source coordinate
of an exact .5 tie is computed in float32 as 14.4999990 and rounds down, so the output takes
its neighbour's pixel at specific size pairs (20 -> 6 among them)."""

from __future__ import annotations

import numpy as np
from onnx import helper

from kit.corpus.case import Built, Case, constant, model, tensor

N = 8


def build(seed: int) -> Built:
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], name="resize",
                            mode="nearest", coordinate_transformation_mode="half_pixel",
                            nearest_mode="round_prefer_ceil")
    inits = [constant("sizes", [N, 2, 6, 6], np.int64)]
    graph = model([node], [tensor("x", [N, 2, 20, 20])], [tensor("y", [N, 2, 6, 6])], 13, inits)
    x = np.random.default_rng(seed + 5).standard_normal((N, 2, 20, 20)).astype(np.float32)
    return Built(graph, {"x": x})


CASE = Case(
    id="resize-nearest-tie", title="Resize nearest half_pixel round_prefer_ceil rounds a tie down",
    op="Resize", issue=28291, pr=None, level="disable_all",
    affected=("1.15.1", "1.16.3", "1.17.3", "1.18.1", "1.19.2", "1.20.1", "1.21.1", "1.22.1",
              "1.23.2", "1.24.4", "1.25.1", "1.26.0"),
    fixed=("1.27.0", "1.28.0", "1.29.0", "1.30.0", "1.31.1", "1.32.0"),
    ground_truth=("resize",),
    patch="the CPU fix's pull request was not found by search (the WebGPU sibling fix is PR "
          "28757); the nearest-pixel rounding of onnxruntime/core/providers/cpu/tensor/"
          "upsamplebase.h is where the probe places it (unconfirmed)",
    build=build, note="tracker: fixed in 1.27.0; the whole batch has a fixed size (sizes "
                      "names it), so the worker runs it in one call; not embeddable in the digits "
                      "CNNs: their "
                      "feature maps are 32, 16, 8 and 4 wide, so every Resize between them has a "
                      "scale exact in binary, where the tie is computed exactly (probed: 32 to "
                      "6, 10, 12, 20, 24 and 28, by scales or sizes, bit-identical on 1.26.0 and "
                      "1.27.0)")
