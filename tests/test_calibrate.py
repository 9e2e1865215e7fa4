"""The calibration rule on hand-made scores."""

from __future__ import annotations

import numpy as np
import pytest

from kit.calibrate import alarms, threshold
from kit.detectors import direct_l2
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
