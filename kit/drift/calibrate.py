"""Calibration: thresholds from clean calibration scores only.

Rule (the paper's): the threshold is the smallest calibration score at or above the
empirical 99th percentile (the linear percentile, numpy's default); a case alarms when its
score is strictly greater than the threshold. Realised rates are measured, never assumed.

The percentile lies between the order statistics ``x[lo]`` and ``x[lo + 1]`` with
``h = (n - 1) q`` and ``lo = floor(h)``; the smallest score at or above it is ``x[h]`` when
``h`` is a whole number and ``x[lo + 1]`` otherwise. The kit computes ``h`` in exact
rational arithmetic and picks that order statistic, so the scalar rule, the vectorised
bootstrap and a float percentile (away from rounding ties) all agree.

Matched false-alarm rate (beyond the paper, fixed in the protocol): the threshold is the
linear percentile itself, ``x[lo] + (h - lo) (x[lo + 1] - x[lo])``, so every detector
alarms on the same share of its calibration scores.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from kit.errors import KitError

Array = np.ndarray[Any, Any]


def _position(n: int, quantile: float) -> Fraction:
    if n < 1:
        raise KitError("calibration needs at least one score")
    if not 0.0 <= quantile <= 1.0:
        raise KitError(f"quantile {quantile} outside [0, 1]")
    return Fraction(repr(quantile)) * (n - 1)


def order_index(n: int, quantile: float = 0.99) -> int:
    """The 0-based order statistic the threshold rule picks from ``n`` scores."""
    h = _position(n, quantile)
    return int(h) if h.denominator == 1 else int(h) + 1


def _check(scores: Array) -> Array:
    values = np.asarray(scores, dtype=np.float64)
    if values.ndim != 1 or len(values) == 0 or not np.isfinite(values).all():
        raise KitError("calibration scores must be a non-empty finite vector")
    return values


def threshold(scores: Array, quantile: float = 0.99) -> float:
    """The calibration threshold of one detector for one model."""
    values = np.sort(_check(scores))
    return float(values[order_index(len(values), quantile)])


def matched_threshold(scores: Array, fpr: float = 0.01) -> float:
    """The linear ``1 - fpr`` percentile of the calibration scores."""
    values = np.sort(_check(scores))
    return float(_lerp(values[None, :], np.ones((1, len(values)), np.int64), 1.0 - fpr)[0])


def resampled_order_statistic(sorted_scores: Array, counts: Array, k: int) -> Array:
    """The ``k``-th smallest (0-based) score of each resample.

    ``sorted_scores`` (n,) ascending or (R, n) ascending per row; ``counts`` (R, n) how
    often each pool score is drawn in each replicate. Returns (R,)."""
    cumulative = np.cumsum(counts, axis=-1)
    pick = np.argmax(cumulative > k, axis=-1)
    scores = np.broadcast_to(sorted_scores, counts.shape)
    return np.take_along_axis(scores, pick[:, None], axis=-1)[:, 0]


def resampled_thresholds(sorted_scores: Array, counts: Array, quantile: float = 0.99) -> Array:
    """``threshold`` of every resample, vectorised over replicates (R,)."""
    n = int(counts[0].sum())
    return resampled_order_statistic(sorted_scores, counts, order_index(n, quantile))


def _lerp(sorted_scores: Array, counts: Array, quantile: float) -> Array:
    n = int(counts[0].sum())
    h = _position(n, quantile)
    lo = int(h)
    low = resampled_order_statistic(sorted_scores, counts, lo)
    if h.denominator == 1:
        return low
    high = resampled_order_statistic(sorted_scores, counts, lo + 1)
    return np.asarray(low + float(h - lo) * (high - low))


def resampled_matched_thresholds(sorted_scores: Array, counts: Array, fpr: float = 0.01
                                 ) -> Array:
    """``matched_threshold`` of every resample (R,)."""
    return _lerp(sorted_scores, counts, 1.0 - fpr)


def alarms(scores: Array, limit: float | Array) -> Array:
    """Boolean alarms: score strictly above the threshold."""
    return np.asarray(scores, dtype=np.float64) > limit
