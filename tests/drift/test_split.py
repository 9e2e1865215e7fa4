"""The class-balanced round-robin sample: balance, disjointness, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from kit.drift.split import Sample, check_disjoint, round_robin_sample, training_pool
from kit.errors import KitError


def labels_like_digits() -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.permutation(np.repeat(np.arange(10), 90))


def test_sample_is_class_balanced_in_both_roles() -> None:
    sample = round_robin_sample(labels_like_digits(), 600, seed=11)
    assert len(sample.index) == 600
    for role in ("calibration", "heldout"):
        counts = np.bincount(sample.label[sample.role == role], minlength=10)
        assert counts.tolist() == [30] * 10
    assert sample.label[:10].tolist() == list(range(10))  # round robin over classes


def test_roles_are_disjoint_and_the_pool_is_the_rest() -> None:
    labels = labels_like_digits()
    sample = round_robin_sample(labels, 600, seed=11)
    cal = set(sample.index[sample.role == "calibration"].tolist())
    held = set(sample.index[sample.role == "heldout"].tolist())
    assert not cal & held
    pool = training_pool(len(labels), sample)
    assert len(pool) == 300
    assert not set(pool.tolist()) & (cal | held)


def test_same_seed_same_sample_other_seed_other_sample() -> None:
    labels = labels_like_digits()
    a = round_robin_sample(labels, 600, seed=11)
    b = round_robin_sample(labels, 600, seed=11)
    c = round_robin_sample(labels, 600, seed=12)
    np.testing.assert_array_equal(a.index, b.index)
    assert not np.array_equal(a.index, c.index)


def test_reduced_split_keeps_the_first_of_each_role() -> None:
    sample = round_robin_sample(labels_like_digits(), 600, seed=11)
    first = sample.of_role("heldout", 150)
    assert len(first) == 150
    np.testing.assert_array_equal(first, sample.of_role("heldout")[:150])
    assert np.bincount(sample.label[first], minlength=10).tolist() == [15] * 10


def test_impossible_samples_are_refused() -> None:
    with pytest.raises(KitError, match="multiple of 2 x 10"):
        round_robin_sample(labels_like_digits(), 590, seed=1)
    with pytest.raises(KitError, match="class 0 has"):
        round_robin_sample(np.repeat(np.arange(10), 5), 600, seed=1)
    overlap = Sample(index=np.array([1, 1]), label=np.array([0, 0]),
                     role=np.array(["calibration", "heldout"]))
    with pytest.raises(KitError, match="repeats a source image"):
        check_disjoint(overlap)
