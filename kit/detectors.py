"""Detector scores from reference and candidate logits (float64 arithmetic).

e_o = c_o - r_o on the source image; e_t = c_t - r_t on the rotated image.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]


def errors(candidate: Array, reference: Array) -> Array:
    """Per-row candidate-minus-reference error vectors, in float64."""
    return candidate.astype(np.float64) - reference.astype(np.float64)


def direct_l2(candidate: Array, reference: Array) -> Array:
    """||e_o||: the Euclidean length of each row's error."""
    return np.asarray(np.linalg.norm(errors(candidate, reference), axis=1))
