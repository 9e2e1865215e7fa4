"""Calibration: thresholds from clean calibration scores only.

Rule (the paper's): the threshold is the smallest calibration score at or above the
empirical 99th percentile (numpy's default linear quantile); a case alarms when its score
is strictly greater than the threshold. Realised rates are measured, never assumed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kit.errors import KitError

Array = np.ndarray[Any, Any]


def threshold(scores: Array, quantile: float = 0.99) -> float:
    """The calibration threshold of one detector for one model."""
    values = np.asarray(scores, dtype=np.float64)
    if values.ndim != 1 or len(values) == 0 or not np.isfinite(values).all():
        raise KitError("calibration scores must be a non-empty finite vector")
    cut = np.quantile(values, quantile)
    return float(values[values >= cut].min())


def alarms(scores: Array, limit: float) -> Array:
    """Boolean alarms: score strictly above the threshold."""
    return np.asarray(scores, dtype=np.float64) > limit
