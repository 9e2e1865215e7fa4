"""The digits substrate's 8x8 -> 32x32x3 rule on real and hand-made images."""

from __future__ import annotations

import numpy as np
import pytest

from kit.drift.digits import load_digits_rgb32, to_rgb32
from kit.errors import KitError


def test_real_digits_become_32x32x3_uint8() -> None:
    images, labels = load_digits_rgb32()
    assert images.shape == (1797, 32, 32, 3)
    assert images.dtype == np.uint8
    assert np.bincount(labels).min() >= 174  # every class has enough for 30 + 30 + training
    np.testing.assert_array_equal(images[..., 0], images[..., 2])
    assert images.max() == 255
    assert images.min() == 0


def test_rule_scales_and_resizes() -> None:
    flat = np.full((1, 8, 8), 8)
    out = to_rgb32(flat)
    assert np.all(out == 128)  # round(8 * 255 / 16) = 128, constant under bicubic
    spot = np.zeros((1, 8, 8))
    spot[0, 0, 0] = 16
    out = to_rgb32(spot)
    assert out[0, 0, 0, 0] > 200
    assert out[0, 31, 31, 0] == 0


def test_bad_digits_are_refused() -> None:
    with pytest.raises(KitError, match="must be N x 8 x 8"):
        to_rgb32(np.zeros((2, 9, 9)))
    with pytest.raises(KitError, match=r"in 0\.\.16"):
        to_rgb32(np.full((1, 8, 8), 17))
