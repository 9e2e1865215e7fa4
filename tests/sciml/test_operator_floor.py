"""The P1 divergence floor: exact on affine fields, equal to its closed form, bounded,
first order; and the finite-volume balance at machine precision."""

from __future__ import annotations

import numpy as np
import pytest

from kit.sciml.operator_floor import (
    closed_form,
    finite_volume_balance,
    measured_divergence,
    sweep,
    symmetric_mesh,
)


def test_p1_divergence_is_exact_on_affine_fields() -> None:
    mesh = symmetric_mesh(3)
    div = measured_divergence(mesh, lambda x, y: (2.0 * x - y + 1.0, 0.5 * x + 3.0 * y))
    np.testing.assert_allclose(div, 5.0, rtol=0, atol=1e-11)


def test_measured_floor_equals_the_taylor_remainder() -> None:
    mesh = symmetric_mesh(4)
    exact, predicted, bound, _ = closed_form(mesh)
    measured = measured_divergence(mesh)
    np.testing.assert_allclose(measured, exact, rtol=0, atol=1e-10)
    assert np.all(np.abs(measured) <= bound + 1e-12)
    assert np.abs(predicted - measured).max() < 0.2 * np.abs(measured).max()


def test_sweep_is_first_order_with_a_dominating_bound() -> None:
    result = sweep(range(1, 6))
    assert result["bound_dominates"]
    assert 0.9 < result["slope"] < 1.1
    low, high = result["slope_ci95"]
    assert low < result["slope"] < high
    assert result["r_squared"] > 0.999
    floors = [r["measured"] for r in result["resolutions"]]
    assert floors == sorted(floors, reverse=True)


def test_finite_volume_divergence_telescopes_to_round_off() -> None:
    balance = finite_volume_balance(32)
    assert balance["imbalance"] <= balance["floor"]
    assert balance["max_cell_divergence"] <= balance["floor"]
    assert balance["flux_scale"] > 1.0


@pytest.mark.parametrize("bad", [-1, 0])
def test_a_degenerate_grid_is_refused(bad: int) -> None:
    with pytest.raises(ValueError, match="at least one cell"):
        finite_volume_balance(bad)
