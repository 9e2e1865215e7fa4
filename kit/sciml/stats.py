"""Statistics of the SciML claims: Wilson intervals, Wilcoxon signed-rank and bootstrap
from scipy; Cliff's delta written out (it is a two-line count)."""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import stats

Array = np.ndarray[Any, Any]


def wilson(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a pass rate."""
    interval = stats.binomtest(successes, trials).proportion_ci(confidence, method="wilson")
    return float(interval.low), float(interval.high)


def wilcoxon(x: Array, y: Array) -> float:
    """Two-sided Wilcoxon signed-rank p-value of paired samples."""
    return float(stats.wilcoxon(x, y).pvalue)


def cliffs_delta(x: Array, y: Array) -> float:
    """P(X > Y) - P(X < Y) over all pairs, in [-1, 1]."""
    a, b = np.asarray(x, float)[:, None], np.asarray(y, float)[None, :]
    return float((a > b).mean() - (a < b).mean())


def bootstrap_mean_ci(x: Array, seed: int, resamples: int = 10_000,
                      confidence: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean."""
    result = stats.bootstrap((np.asarray(x, float),), np.mean, n_resamples=resamples,
                             confidence_level=confidence, method="percentile",
                             random_state=np.random.default_rng(seed))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)
