"""Rotation and normalisation."""

from __future__ import annotations

import numpy as np
import pytest

from kit.drift.rotate import rotate, to_input
from kit.errors import KitError


def test_rotation_is_counter_clockwise_and_fills_black() -> None:
    img = np.zeros((1, 32, 32, 3), np.uint8)
    img[0, 16, 28] = 255  # right of centre
    quarter = rotate(img, 90, "nearest")
    ys, xs = np.nonzero(quarter[0, :, :, 0])
    assert (int(ys.mean()), int(xs.mean())) in {(3, 16), (4, 16)}  # now above centre
    full = np.full((1, 32, 32, 3), 200, np.uint8)
    tilted = rotate(full, 10, "bilinear")
    assert tilted[0, 0, 0, 0] == 0
    assert tilted[0, 16, 16, 0] == 200


def test_filters_differ_and_repeat_exactly() -> None:
    img = np.random.default_rng(1).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    outs = {f: rotate(img, 10, f) for f in ("nearest", "bilinear", "bicubic")}
    assert not np.array_equal(outs["nearest"], outs["bilinear"])
    assert not np.array_equal(outs["bilinear"], outs["bicubic"])
    np.testing.assert_array_equal(rotate(img, 10, "bilinear"), outs["bilinear"])
    assert np.array_equal(rotate(img, 0, "bilinear"), img)


def test_to_input_normalises_per_channel() -> None:
    img = np.zeros((1, 2, 2, 3), np.uint8)
    img[..., 1] = 255
    x = to_input(img, (0.5, 0.5, 0.5), (0.25, 0.5, 1.0))
    assert x.shape == (1, 3, 2, 2)
    assert x.dtype == np.float32
    np.testing.assert_allclose(x[0, :, 0, 0], [-2.0, 1.0, -0.5])


def test_bad_rotation_input_is_refused() -> None:
    with pytest.raises(KitError, match="interpolation must be one of"):
        rotate(np.zeros((1, 4, 4, 3), np.uint8), 10, "lanczos")
    with pytest.raises(KitError, match="must be uint8"):
        rotate(np.zeros((1, 4, 4, 3), np.float32), 10, "nearest")


def test_the_fill_grey_level_reaches_the_uncovered_corners() -> None:
    full = np.full((1, 32, 32, 3), 200, np.uint8)
    assert rotate(full, 10, "nearest", fill=255)[0, 0, 0, 0] == 255
    assert rotate(full, 10, "nearest", fill=7)[0, 0, 0].tolist() == [7, 7, 7]
    assert rotate(full, 10, "nearest")[0, 0, 0, 0] == 0
    with pytest.raises(KitError, match=r"fill must be a grey level 0\.\.255, not 256"):
        rotate(full, 10, "nearest", fill=256)
