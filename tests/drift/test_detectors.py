"""Detector scores and error geometry on hand-built vectors."""

from __future__ import annotations

import numpy as np
import pytest

from kit.drift.detectors import cancellation_ratio, cosine, mixed_tolerance, norm, score_block


def test_identity_of_contrast_norms_and_cosine() -> None:
    rng = np.random.default_rng(0)
    e_o, e_t = rng.normal(size=(50, 10)), rng.normal(size=(50, 10))
    lhs = norm(e_t - e_o) ** 2
    rhs = norm(e_t) ** 2 + norm(e_o) ** 2 - 2 * norm(e_t) * norm(e_o) * cosine(e_o, e_t)
    np.testing.assert_allclose(lhs, rhs, rtol=1e-12)


def test_parallel_errors_cancel_and_opposite_errors_add() -> None:
    r = np.zeros((3, 2))
    c_o = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    c_t = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]])
    s = score_block(c_o, r, c_t, r, atol=1e-6, rtol=1e-5)
    np.testing.assert_allclose(s.metamorphic, [0.0, 2.0, np.sqrt(2)])
    np.testing.assert_allclose(s.direct, [1.0, 1.0, 1.0])
    np.testing.assert_allclose(s.maximum, [1.0, 1.0, 1.0])
    np.testing.assert_allclose(s.cosine, [1.0, -1.0, 0.0], atol=1e-15)
    np.testing.assert_allclose(s.ratio, [0.0, 1.0, np.sqrt(2) / 2])


def test_zero_errors_give_nan_geometry_not_a_number_that_looks_real() -> None:
    zero = np.zeros((1, 3))
    one = np.array([[1.0, 0.0, 0.0]])
    assert np.isnan(cosine(zero, one)[0])
    assert np.isnan(cancellation_ratio(zero, zero)[0])
    assert cancellation_ratio(zero, one)[0] == 1.0


def test_mixed_tolerance_is_relative_to_the_reference() -> None:
    r = np.array([[100.0, 0.0]], np.float32)
    c = np.array([[100.001, 0.0]], np.float32)
    score = mixed_tolerance(c, r, atol=1e-6, rtol=1e-5)
    expected = abs(float(np.float32(100.001)) - 100.0) / (1e-6 + 1e-5 * 100.0)
    assert score[0] == pytest.approx(expected)
    assert mixed_tolerance(r, r, 1e-6, 1e-5)[0] == 0.0
