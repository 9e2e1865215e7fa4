"""Statistics of the SciML claims: Wilson and Clopper-Pearson intervals (``kit.stats``), Wilcoxon
signed-rank and the percentile bootstrap from scipy; Cliff's delta written out (it is a
two-line count); the one tally of a detector's flags against labels (``stat_scores``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from kit.stats import bootstrap_interval, clopper_pearson, wilson

Array = np.ndarray[Any, Any]
__all__ = ["bootstrap_ci", "bootstrap_mean_ci", "cliffs_delta", "clopper_pearson", "rate",
           "stat_scores", "wilcoxon", "wilson"]


def rate(hits: int, n: int, count: str = "count", value: bool = True) -> dict[str, Any]:
    """A pass or detection rate as the evidence files record it: ``{count: hits, "n": n,
    "wilson95": [low, high]}``, with ``"value"`` (hits / n) unless ``value`` is False.
    An empty rate (n = 0) has no value and no interval."""
    interval = list(wilson(hits, n)) if n else None
    record: dict[str, Any] = {count: hits, "n": n, "wilson95": interval}
    if value:
        record["value"] = hits / n if n else None
    return record


def stat_scores(pairs: Iterable[tuple[bool, bool]]) -> dict[str, int]:
    """Counts of (flagged, label) pairs: ``entries``, ``targeted`` (label true),
    ``true_positives`` and ``false_positives``."""
    counts = {"entries": 0, "targeted": 0, "true_positives": 0, "false_positives": 0}
    for flagged, label in pairs:
        counts["entries"] += 1
        counts["targeted"] += int(bool(label))
        counts["true_positives"] += int(bool(flagged) and bool(label))
        counts["false_positives"] += int(bool(flagged) and not label)
    return counts


def wilcoxon(x: Array, y: Array) -> float:
    """Two-sided Wilcoxon signed-rank p-value of paired samples."""
    from scipy import stats  # imported where used: verify loads this module

    return float(stats.wilcoxon(x, y).pvalue)


def cliffs_delta(x: Array, y: Array) -> float:
    """P(X > Y) - P(X < Y) over all pairs, in [-1, 1]."""
    a, b = np.asarray(x, float)[:, None], np.asarray(y, float)[None, :]
    return float((a > b).mean() - (a < b).mean())


def bootstrap_ci(x: Array, statistic: Callable[..., Any], seed: int, resamples: int = 10_000,
                 confidence: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic``: the kit's one engine
    (``kit.stats.bootstrap_interval``)."""
    return bootstrap_interval(x, statistic, seed, resamples, confidence)


def bootstrap_mean_ci(x: Array, seed: int, resamples: int = 10_000,
                      confidence: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean."""
    return bootstrap_ci(x, np.mean, seed, resamples, confidence)
