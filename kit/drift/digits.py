"""The offline ``digits`` substrate: scikit-learn's bundled 8x8 digits as 32x32x3 uint8.

Rule (fixed, documented in the protocol): the 0..16 intensities are scaled to 0..255
(``round(v * 255 / 16)``), each 8x8 image is resized to 32x32 with Pillow's bicubic
filter (values clipped to 0..255 by Pillow), and the grey plane is repeated into three
identical RGB channels. 1,797 real images, labels 0..9.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from PIL import Image

from kit.errors import KitError

Array = np.ndarray[Any, Any]
SIZE = 32


def to_rgb32(images8: Array) -> Array:
    """(N, 8, 8) digits intensities 0..16 -> (N, 32, 32, 3) uint8 by the rule above."""
    if images8.ndim != 3 or images8.shape[1:] != (8, 8):
        raise KitError(f"digits images must be N x 8 x 8, found {images8.shape}")
    if images8.min() < 0 or images8.max() > 16:
        raise KitError("digits intensities must lie in 0..16")
    grey = np.rint(images8.astype(np.float64) * 255.0 / 16.0).astype(np.uint8)
    big = np.stack([np.asarray(Image.fromarray(img, mode="L").resize(
        (SIZE, SIZE), Image.Resampling.BICUBIC)) for img in grey])
    return np.repeat(big[..., None], 3, axis=3)


def load_digits_rgb32() -> tuple[Array, Array]:
    """(images N x 32 x 32 x 3 uint8, labels N int64) from scikit-learn's bundled copy."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return to_rgb32(np.asarray(bunch.images)), np.asarray(bunch.target, dtype=np.int64)
