"""Detector scores and error geometry from reference and candidate logits (float64).

e_o = c_o - r_o on the source image; e_t = c_t - r_t on the rotated image.

    direct L2             ||e_o||
    metamorphic contrast  ||e_t - e_o||
    mixed tolerance       max_k |e_o,k| / (atol + rtol |r_o,k|)   (a single-input rule)
    two-input maximum     max(||e_o||, ||e_t||)
    cosine                cos(e_o, e_t)                   (NaN when either error is 0)
    cancellation ratio    ||e_t - e_o|| / (||e_o|| + ||e_t||)   (NaN when both are 0)

so that ||e_t - e_o||^2 = ||e_t||^2 + ||e_o||^2 - 2 ||e_t|| ||e_o|| cos.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]
DETECTORS = ("metamorphic", "direct", "mixed", "maximum")
# The score table column of each detector (direct L2 is ||e_o||).
COLUMN = {"metamorphic": "metamorphic", "direct": "e_o_norm", "mixed": "mixed",
          "maximum": "maximum"}


def errors(candidate: Array, reference: Array) -> Array:
    """Per-row candidate-minus-reference error vectors, in float64."""
    return candidate.astype(np.float64) - reference.astype(np.float64)


def norm(rows: Array) -> Array:
    """Euclidean length of each row."""
    return np.asarray(np.linalg.norm(rows, axis=1))


def direct_l2(candidate: Array, reference: Array) -> Array:
    """||e_o||: the Euclidean length of each row's error."""
    return norm(errors(candidate, reference))


def mixed_tolerance(candidate: Array, reference: Array, atol: float, rtol: float) -> Array:
    """max_k |e_k| / (atol + rtol |r_k|): above 1 where numpy.allclose would fail."""
    e = np.abs(errors(candidate, reference))
    return np.asarray((e / (atol + rtol * np.abs(reference.astype(np.float64)))).max(axis=1))


def cosine(e_o: Array, e_t: Array) -> Array:
    """cos(e_o, e_t) per row; NaN where either error is exactly zero."""
    lengths = norm(e_o) * norm(e_t)
    dot = np.einsum("ij,ij->i", e_o, e_t)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(lengths > 0, dot / np.where(lengths > 0, lengths, 1.0), np.nan)


def cancellation_ratio(e_o: Array, e_t: Array) -> Array:
    """||e_t - e_o|| / (||e_o|| + ||e_t||) per row, in [0, 1]; NaN where both are 0."""
    total = norm(e_o) + norm(e_t)
    return np.where(total > 0, norm(e_t - e_o) / np.where(total > 0, total, 1.0), np.nan)


@dataclass(frozen=True)
class Scores:
    """Every per-case quantity of the score table for a block of rows."""

    e_o_norm: Array
    e_t_norm: Array
    metamorphic: Array
    mixed: Array
    maximum: Array
    cosine: Array
    ratio: Array

    @property
    def direct(self) -> Array:
        return self.e_o_norm

    def detector(self, name: str) -> Array:
        return {"metamorphic": self.metamorphic, "direct": self.e_o_norm,
                "mixed": self.mixed, "maximum": self.maximum}[name]


def score_block(c_o: Array, r_o: Array, c_t: Array, r_t: Array, atol: float, rtol: float
                ) -> Scores:
    """All detector scores and the geometry of one block of (source, rotated) rows."""
    e_o, e_t = errors(c_o, r_o), errors(c_t, r_t)
    n_o, n_t = norm(e_o), norm(e_t)
    return Scores(e_o_norm=n_o, e_t_norm=n_t, metamorphic=norm(e_t - e_o),
                  mixed=mixed_tolerance(c_o, r_o, atol, rtol), maximum=np.maximum(n_o, n_t),
                  cosine=cosine(e_o, e_t), ratio=cancellation_ratio(e_o, e_t))
