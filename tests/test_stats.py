"""kit.stats: the one bootstrap engine (scipy's one-sample bootstrap draws what draw_indices
draws; draw_counts counts the same draws) and the shared share intervals."""

from __future__ import annotations

import numpy as np
import pytest

from kit.stats import (
    bootstrap_interval,
    clopper_pearson,
    draw_counts,
    draw_indices,
    percentile_interval,
    wilson,
)


def test_draw_counts_counts_the_draws_draw_indices_makes() -> None:
    index = draw_indices(np.random.default_rng(3), 7, 50)
    counts = draw_counts(np.random.default_rng(3), 7, 50)
    assert counts.shape == (50, 7)
    assert (counts.sum(axis=1) == 7).all()
    assert all((np.bincount(row, minlength=7) == c).all() for row, c in zip(index, counts,
                                                                           strict=True))


def test_the_one_sample_bootstrap_resamples_as_draw_indices_does() -> None:
    x = np.random.default_rng(0).standard_normal(23)
    index = draw_indices(np.random.default_rng(11), len(x), 4000)
    medians = np.median(x[index], axis=-1)
    expected = (float(np.percentile(medians, 2.5)), float(np.percentile(medians, 97.5)))
    assert bootstrap_interval(x, np.median, 11, 4000) == expected
    assert bootstrap_interval(x, np.median, 12, 4000) != expected


def test_percentile_interval_and_the_share_intervals() -> None:
    values = np.arange(101, dtype=float)
    assert percentile_interval(values, 0.9) == pytest.approx([5.0, 95.0], abs=1e-12)
    low, high = wilson(8, 10)
    assert 0.49 < low < 0.5
    assert 0.94 < high < 0.95
    assert clopper_pearson(0, 10)[0] == 0.0
