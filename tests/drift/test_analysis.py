"""Results from a case table: rates, AUROC/AUPRC, cells, localisation and geometry."""

from __future__ import annotations

import numpy as np
import pytest

from kit.drift import analysis
from kit.drift.calibrate import threshold


def direct_auroc(pos: np.ndarray, neg: np.ndarray) -> float:
    """P(pos > neg) + P(pos == neg) / 2 by counting every pair."""
    greater = (pos[:, None] > neg[None, :]).sum()
    ties = (pos[:, None] == neg[None, :]).sum()
    return float((greater + 0.5 * ties) / (len(pos) * len(neg)))


def test_auroc_equals_a_direct_pair_count(table: tuple[dict, dict]) -> None:
    cases, _ = table
    found = analysis.threshold_free(cases, "direct")
    held = cases["role"] == 1
    pos = cases["e_o_norm"][held & (cases["fault"] >= 0)]
    neg = cases["e_o_norm"][held & (cases["fault"] < 0)]
    assert found["auroc"] == pytest.approx(direct_auroc(pos, neg), abs=1e-12)


def test_auroc_with_ties_on_a_hand_case() -> None:
    cases = {"role": np.ones(4, np.int8), "fault": np.array([-1, -1, 0, 0]),
             "e_o_norm": np.array([1.0, 2.0, 2.0, 3.0])}
    assert analysis.threshold_free(cases, "direct")["auroc"] == 0.875


def test_rates_use_calibration_thresholds_and_count_held_out_rows(table: tuple[dict, dict]
                                                                   ) -> None:
    cases, _ = table
    limits = analysis.thresholds(cases, "direct")
    clean_cal = (cases["model"] == 0) & (cases["fault"] == -1) & (cases["role"] == 0)
    assert limits[0] == threshold(cases["e_o_norm"][clean_cal])
    found = analysis.detection(cases, "direct", limits)
    assert found["tpr"]["n"] == 2 * 4 * 30
    assert found["fpr"]["n"] == 2 * 30
    by_hand = sum(int((cases["e_o_norm"][(cases["model"] == m) & (cases["role"] == 1)
                                         & (cases["fault"] >= 0)] > limits[m]).sum())
                  for m in (0, 1))
    assert found["tpr"]["count"] == by_hand


def test_matched_thresholds_equalise_calibration_fpr(table: tuple[dict, dict]) -> None:
    cases, _ = table
    found = analysis.matched(cases, 0.05)
    assert found["metamorphic"]["calibration_fpr"]["count"] == \
        found["maximum"]["calibration_fpr"]["count"] == 2 * 2  # 5% of 40, two models


def test_ranks_from_layers_and_localisation(table: tuple[dict, dict]) -> None:
    cases, layers = table
    ranks = analysis.ranks_from_layers(cases, layers, ["m0", "m1"])
    fault = cases["fault"] >= 0
    assert (ranks["direct"][fault] >= 1).all()
    assert (ranks["direct"][~fault] == 0).all()
    cases = {**cases, **{f"rank_{k}": v for k, v in ranks.items()}}
    loc = analysis.localisation(cases, ["m0", "m1"])
    assert loc["direct"]["n"] == 240
    assert 0.3 < loc["direct"]["top1"] <= 1.0  # the true layer carries +1.5


def test_geometry_groups(table: tuple[dict, dict]) -> None:
    cases, _ = table
    geo = analysis.geometry(cases)
    assert -1 <= geo["spearman_rho"] < 0   # ratio falls as cosine rises
    assert geo["stable"]["n"] + geo["unstable"]["n"] == 240


def test_fault_cells_cover_every_fault_row(table: tuple[dict, dict]) -> None:
    cases, _ = table
    codes = {"models": ["m0", "m1"], "positions": ["early", "middle", "late"],
             "families": ["scale", "noise", "quantise"], "levels": ["low", "high"]}
    cells = analysis.fault_cells(cases, codes)
    assert sum(c["direct"]["n"] for c in cells) == 240
    pooled = analysis.pooled_cells(cells, ("family",))
    assert sum(p["direct"]["count"] for p in pooled) == sum(c["direct"]["count"] for c in cells)


def test_factor_clean_zero_for_identical_cells() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 4)).astype(np.float32)
    y = x + np.float32(1e-3)
    clean = {f"{cell}/m/orig": x for cell in ("ref", "cand-off")}
    clean.update({f"{cell}/m/orig": y for cell in ("ref-on", "cand")})
    found = analysis.factor_clean(clean, ["m"], ["orig"])
    assert found["version_at_opt_off"]["max_abs"] == 0.0
    assert found["opt_at_version_ref"]["max_abs"] == pytest.approx(1e-3, rel=1e-3)
    assert found["opt_at_version_ref"]["disagree"] == 0
