"""Localisation ranks, normalisers and their resampled form."""

from __future__ import annotations

import numpy as np

from kit.drift.localise import (
    layer_scores,
    normalisers,
    replicate_ranks,
    resampled_normalisers,
    summary,
    true_layer_rank,
)


def test_normalisation_changes_the_winner() -> None:
    scores = np.array([[10.0, 2.0, 1.0]])
    assert true_layer_rank(scores, np.ones(3), np.array([1]))[0] == 2
    assert true_layer_rank(scores, np.array([100.0, 1.0, 1.0]), np.array([1]))[0] == 1


def test_ties_count_against_the_method() -> None:
    scores = np.array([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    ranks = true_layer_rank(scores, np.ones(3), np.array([0, 2]))
    assert ranks.tolist() == [3, 3]


def test_zero_threshold_layer_that_moves_ranks_first() -> None:
    scores = np.array([[1e-9, 5.0]])
    assert true_layer_rank(scores, np.array([0.0, 1.0]), np.array([0]))[0] == 1
    assert true_layer_rank(np.array([[0.0, 5.0]]), np.array([0.0, 1.0]), np.array([0]))[0] == 2


def test_summary_counts() -> None:
    found = summary(np.array([1, 2, 3, 4]))
    assert found["top1"] == 0.25
    assert found["top3"] == 0.75
    assert found["mrr"] == (1 + 1 / 2 + 1 / 3 + 1 / 4) / 4


def test_layer_scores_kinds() -> None:
    ref = [np.zeros((1, 2)), np.zeros((1, 2))]
    c_o = [np.array([[3.0, 4.0]]), np.zeros((1, 2))]
    c_t = [np.array([[3.0, 4.0]]), np.array([[0.0, 2.0]])]
    found = layer_scores(c_o, ref, c_t, ref)
    np.testing.assert_allclose(found["direct"], [[5.0, 0.0]])
    np.testing.assert_allclose(found["metamorphic"], [[0.0, 2.0]])
    np.testing.assert_allclose(found["maximum"], [[5.0, 2.0]])


def test_resampled_normalisers_match_per_replicate_rule() -> None:
    rng = np.random.default_rng(3)
    clean = rng.exponential(size=(30, 4))
    draws = rng.integers(0, 30, size=(50, 30))
    counts = np.stack([np.bincount(d, minlength=30) for d in draws])
    found = resampled_normalisers(clean, counts)
    for r in range(50):
        np.testing.assert_array_equal(found[r], normalisers(clean[draws[r]]))


def test_replicate_ranks_are_true_layer_rank_under_each_replicates_norms() -> None:
    rng = np.random.default_rng(5)
    scores = rng.integers(0, 4, size=(40, 6)).astype(np.float64)  # ties and zeros
    scores[::7] *= 1e-9
    truth = rng.integers(0, 6, size=40)
    norms = rng.choice([0.0, 0.5, 1.0, 2.0, 3.0], size=(9, 6))  # zero thresholds too
    norms[0] = 0.0
    norms[1] = 1.0
    found = replicate_ranks(scores, norms, truth)
    assert found.shape == (9, 40)
    for r in range(9):
        np.testing.assert_array_equal(found[r], true_layer_rank(scores, norms[r], truth))
    np.testing.assert_array_equal(found, true_layer_rank(scores[None], norms[:, None, :], truth))
