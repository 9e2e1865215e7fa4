"""The bootstrap engine: vectorised equals the per-replicate loop, seeds reproduce,
the source image is the resampling unit, and the decision rule."""

from __future__ import annotations

import numpy as np
import pytest

from kit.drift import analysis
from kit.drift import bootstrap as engine

CAL, HELD = np.arange(40), np.arange(40, 70)


def test_vectorised_nested_equals_the_loop(table: tuple[dict, dict]) -> None:
    cases, _ = table
    fast = engine.detection_replicates(cases, CAL, HELD, 60, seed=11, nested=True)
    slow = engine.loop_nested(cases, CAL, HELD, 60, seed=11)
    for key, values in slow.items():
        np.testing.assert_array_equal(fast[key], values, err_msg=key)


def test_replicates_reproduce_from_their_seed_and_differ_across_seeds(
        table: tuple[dict, dict]) -> None:
    cases, _ = table
    a = engine.detection_replicates(cases, CAL, HELD, 30, seed=5, nested=True)
    b = engine.detection_replicates(cases, CAL, HELD, 30, seed=5, nested=True)
    c = engine.detection_replicates(cases, CAL, HELD, 30, seed=6, nested=True)
    np.testing.assert_array_equal(a["direct/tpr"], b["direct/tpr"])
    assert not np.array_equal(a["direct/tpr"], c["direct/tpr"])


def test_the_source_image_is_the_unit(table: tuple[dict, dict]) -> None:
    """A replicate equals the plain rate over a table in which every row of each image
    is repeated as often as the image was drawn, across all models and faults."""
    cases, _ = table
    reps = engine.detection_replicates(cases, CAL, HELD, 3, seed=2, nested=False)
    limits = analysis.thresholds(cases, "metamorphic")
    for r in range(3):
        counts = dict(zip(HELD.tolist(), reps["held_counts"][r].tolist(), strict=True))
        repeat = np.array([counts.get(int(s), 1) if role == 1 else 1
                           for s, role in zip(cases["sample"], cases["role"], strict=True)])
        expanded = {k: np.repeat(v, repeat) for k, v in cases.items()}
        found = analysis.detection(expanded, "metamorphic", limits)
        assert reps["metamorphic/tpr"][r] == pytest.approx(found["tpr"]["rate"], abs=1e-15)
        assert reps["metamorphic/fpr"][r] == pytest.approx(found["fpr"]["rate"], abs=1e-15)


def test_fixed_bootstrap_keeps_thresholds_fixed(table: tuple[dict, dict]) -> None:
    cases, _ = table
    ones = np.ones((1, len(HELD)), np.int64)
    for detector in ("direct", "mixed"):
        pools = engine.pools(cases, detector, CAL, HELD)
        found = engine.rates(pools, ones, None)
        point = analysis.detection(cases, detector, analysis.thresholds(cases, detector))
        assert found["tpr"][0] == pytest.approx(point["tpr"]["rate"], abs=1e-15)


def test_localisation_replicates_at_unit_weights_equal_the_point_estimate(
        table: tuple[dict, dict]) -> None:
    cases, layers = table
    ranks = analysis.ranks_from_layers(cases, layers, ["m0", "m1"])
    cases = {**cases, **{f"rank_{k}": v for k, v in ranks.items()}}
    point = analysis.localisation(cases, ["m0", "m1"])
    ones = np.ones((2, len(HELD)), np.int64)
    found = engine.localisation_replicates(cases, layers, ["m0", "m1"], None, ones, CAL, HELD)
    unit_cal = np.ones((2, len(CAL)), np.int64)
    nested = engine.localisation_replicates(cases, layers, ["m0", "m1"], unit_cal, ones,
                                            CAL, HELD)
    for kind in ("direct", "metamorphic", "maximum"):
        for stat in ("top1", "top3", "mrr"):
            assert found[f"{kind}/{stat}"][0] == pytest.approx(point[kind][stat], abs=1e-6)
            assert nested[f"{kind}/{stat}"][1] == pytest.approx(point[kind][stat], abs=1e-6)


def test_localisation_in_processes_adds_the_serial_loops_bits(
        table: tuple[dict, dict], monkeypatch: pytest.MonkeyPatch) -> None:
    cases, layers = table
    rng = np.random.default_rng(11)
    cal_counts = rng.multinomial(len(CAL), np.full(len(CAL), 1 / len(CAL)), size=30)
    held_counts = rng.multinomial(len(HELD), np.full(len(HELD), 1 / len(HELD)), size=30)
    found = {}
    for cores in (1, 2):
        monkeypatch.setattr(engine.os, "cpu_count", lambda cores=cores: cores)
        found[cores] = engine.localisation_replicates(cases, layers, ["m0", "m1"], cal_counts,
                                                      held_counts, CAL, HELD, chunk=7)
    assert found[1].keys() == found[2].keys()
    for key, value in found[1].items():
        assert value.tobytes() == found[2][key].tobytes(), key
    assert len({found[1]["direct/top1"].tobytes(), found[1]["direct/mrr"].tobytes()}) == 2


def test_holm_decision_rule() -> None:
    rng = np.random.default_rng(0)
    up = rng.normal(5, 1, 1000)
    down = rng.normal(-5, 1, 1000)
    assert engine.holm({"direct": up, "mixed": up}, 0.05)["superior"]
    found = engine.holm({"direct": down, "mixed": up}, 0.05)
    assert not found["superior"]
    assert found["rejected"] == {"direct": False, "mixed": True}
    # Holm: the smaller p is tested at alpha / 2
    edge = np.r_[np.ones(960), -np.ones(40)]  # p = 41/1001 ~ 0.041 > 0.025
    assert not engine.holm({"a": edge, "b": edge}, 0.05)["rejected"]["a"]


def test_describe_share_negative() -> None:
    found = engine.describe(np.array([-1.0, 1.0, 2.0, 3.0]))
    assert found["share_negative"] == 0.25
    assert found["min"] == -1.0
    assert found["n"] == 4
