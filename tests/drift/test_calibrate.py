"""The calibration rule on hand-made scores."""

from __future__ import annotations

import numpy as np
import pytest

from kit.drift.calibrate import (
    alarms,
    matched_threshold,
    order_index,
    resampled_matched_thresholds,
    resampled_thresholds,
    threshold,
)
from kit.drift.detectors import direct_l2
from kit.errors import KitError


def test_threshold_is_the_smallest_score_at_or_above_the_99th_percentile() -> None:
    scores = np.arange(1, 301, dtype=np.float64)  # 99th percentile (linear) = 297.01
    assert threshold(scores) == 298.0
    assert alarms(scores, threshold(scores)).sum() == 2  # strictly greater: 299, 300


def test_threshold_with_ties_and_order() -> None:
    scores = np.array([5.0, 1.0, 5.0, 2.0, 5.0])
    assert threshold(scores, 0.5) == 5.0
    assert not alarms(scores, 5.0).any()


def test_bad_scores_are_refused() -> None:
    with pytest.raises(KitError, match="non-empty finite"):
        threshold(np.array([1.0, np.nan]))


def test_direct_l2_uses_float64() -> None:
    c = np.array([[1.0, 2.0]], np.float32)
    r = np.array([[1.0, 2.0 + 2.0**-22]], np.float32)
    assert direct_l2(c, r)[0] == pytest.approx(2.0**-22)


def numpy_rule(scores: np.ndarray, quantile: float) -> float:
    """The rule as the paper states it, with numpy's float percentile."""
    cut = np.quantile(scores, quantile)
    return float(scores[scores >= cut].min())


@pytest.mark.parametrize("n", [1, 2, 3, 7, 100, 101, 300])
def test_order_statistic_rule_matches_the_float_percentile(n: int) -> None:
    rng = np.random.default_rng(n)
    for _ in range(20):
        scores = rng.integers(0, 6, n).astype(np.float64)  # many ties
        assert threshold(scores) == numpy_rule(scores, 0.99)
        scores = rng.normal(size=n)
        assert threshold(scores) == numpy_rule(scores, 0.99)


def test_order_index_exact_arithmetic() -> None:
    assert order_index(300, 0.99) == 297   # h = 296.01
    assert order_index(101, 0.99) == 99    # h = 99 exactly: no rounding up
    assert order_index(1, 0.99) == 0
    with pytest.raises(KitError):
        order_index(0)


def test_tiny_sample_threshold_is_its_maximum_and_never_alarms_on_itself() -> None:
    scores = np.array([3.0, 1.0])
    assert threshold(scores) == 3.0
    assert not alarms(scores, threshold(scores)).any()


def test_matched_threshold_alarms_on_exactly_the_fpr_share() -> None:
    scores = np.random.default_rng(0).normal(size=300)
    limit = matched_threshold(scores, 0.01)
    assert limit == pytest.approx(np.quantile(scores, 0.99), rel=1e-12)
    assert alarms(scores, limit).sum() == 3
    assert alarms(scores, threshold(scores)).sum() == 2


def test_resampled_thresholds_equal_the_scalar_rule_per_replicate() -> None:
    rng = np.random.default_rng(1)
    pool = np.round(rng.normal(size=40), 1)  # ties
    draws = rng.integers(0, 40, size=(200, 40))
    counts = np.stack([np.bincount(d, minlength=40) for d in draws])
    order = np.argsort(pool, kind="stable")
    vector = resampled_thresholds(pool[order], counts[:, order])
    matched = resampled_matched_thresholds(pool[order], counts[:, order], 0.05)
    for r in range(200):
        assert vector[r] == threshold(pool[draws[r]])
        assert matched[r] == pytest.approx(matched_threshold(pool[draws[r]], 0.05), abs=1e-15)
