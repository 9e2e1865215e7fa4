"""In-plane rotation of uint8 HWC images (Pillow) and the float32 NCHW model input.

Pillow's ``Image.rotate`` rotates counter-clockwise about the image centre, keeps the
32x32 frame and fills uncovered corners with the protocol's ``rotation.fill`` grey level
(0, black, in the frozen protocol); ``nearest``, ``bilinear`` and
``bicubic`` are its three filters. Model inputs are ``(x / 255 - mean) / std`` per channel.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from PIL import Image

from kit.errors import KitError

Array = np.ndarray[Any, Any]
FILTERS = {"nearest": Image.Resampling.NEAREST, "bilinear": Image.Resampling.BILINEAR,
           "bicubic": Image.Resampling.BICUBIC}


def rotate(images: Array, degrees: float, interpolation: str, fill: int = 0) -> Array:
    """Rotate every (N, H, W, 3) uint8 image by ``degrees`` with ``interpolation``; the
    corners the rotation uncovers take grey level ``fill``."""
    if interpolation not in FILTERS:
        raise KitError(f"interpolation must be one of {sorted(FILTERS)}")
    if not isinstance(fill, int) or isinstance(fill, bool) or not 0 <= fill <= 255:
        raise KitError(f"fill must be a grey level 0..255, not {fill!r}")
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[3] != 3:
        raise KitError(f"images must be uint8 N x H x W x 3, found {images.dtype} "
                       f"{images.shape}")
    return np.stack([np.asarray(Image.fromarray(img, mode="RGB").rotate(
        degrees, resample=FILTERS[interpolation], fillcolor=(fill, fill, fill))) for img in images])


def to_input(images: Array, mean: Sequence[float], std: Sequence[float]) -> Array:
    """uint8 N x H x W x 3 -> normalised float32 N x 3 x H x W."""
    x = images.astype(np.float32) / np.float32(255.0)
    x = (x - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2), dtype=np.float32)
