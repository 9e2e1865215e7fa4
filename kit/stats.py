"""Interval estimates shared by the studies (scipy's, never re-derived): the Wilson score and
Clopper-Pearson intervals of a share."""

from __future__ import annotations

from scipy import stats


def wilson(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a pass rate."""
    interval = stats.binomtest(successes, trials).proportion_ci(confidence, method="wilson")
    return float(interval.low), float(interval.high)


def clopper_pearson(successes: int, trials: int, confidence: float = 0.95
                    ) -> tuple[float, float]:
    """Clopper-Pearson (exact) interval of a share."""
    interval = stats.binomtest(successes, trials).proportion_ci(confidence, method="exact")
    return float(interval.low), float(interval.high)
