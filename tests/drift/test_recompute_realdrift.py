"""The real-drift ledger's recompute functions on synthetic sweep rows: each hypothesis
holds on rows built to satisfy it and fails on rows built to break it, and the ledger
grades them "hypothesis holds" / "hypothesis fails", never a reproduction."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kit.claims.ledger import clear_cache, evaluate, load_ledger
from kit.drift import recompute_realdrift as rd
from kit.errors import KitError
from kit.paths import ROOT

RELEASES = ["1.20.1", "1.28.0", "1.29.0", "1.32.0"]


def row(release: str, level: str = "disable_all", threads: int = 1, export: str = "folded",
        drift: float = 0.0, **fields: Any) -> dict[str, Any]:
    found = {"release": release, "level": level, "threads": threads, "model": "m",
             "export": export, "max_abs_logit": drift,
             "norm_quantiles": {"0.5": drift / 2, "0.9": drift, "0.99": drift, "1.0": drift},
             "flips": {"orig": 0, "rot10-bilinear": 0}, "first_moving_layer": None,
             "vs_one_thread": 1e-7 if threads == 2 else 0.0,
             "alarms": {d: {"alarms": 0, "n": 10, "rate": 0.0, "interval": [0.0, 0.0]}
                        for d in ("direct", "metamorphic", "maximum", "mixed")},
             "polygraphy": {"alarms": 0, "n": 10, "rate": 0.0}}
    found.update(fields)
    return found


def sweep_rows() -> list[dict[str, Any]]:
    """Rows on which H1-H5 hold and H6, H7 fail."""
    rows = []
    for release in RELEASES:
        step = 6e-5 if release >= "1.29.0" else 0.0
        rows += [row(release), row(release, export="unfolded", drift=step),
                 row(release, threads=2, drift=7e-7),
                 row(release, threads=2, export="unfolded", drift=7e-7)]
    return rows


@pytest.fixture(autouse=True)
def _rows_built_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows here are built for each hypothesis, not run on the drift evidence's cells:
    the recount of the drift cells' rows against the drift evidence beside them
    (``recount_pair``) is tested on the shipped evidence (tests/drift/test_drift_recount.py)
    and left out here."""
    monkeypatch.setattr(rd, "recount_pair", lambda record, drift, deep=False: [])


def evidence(tmp_path: Path, rows: list[dict[str, Any]], matrix: bool = False
             ) -> rd.SweepEvidence:
    """A sweep evidence folder of these rows; ``matrix``: laid out as in the checkout, with
    the shipped fault matrix and the drift evidence it was computed from beside it."""
    root = tmp_path / "claims/realdrift/evidence/digits" if matrix else tmp_path
    (root / "sweep").mkdir(parents=True, exist_ok=True)
    (root / "sweep" / "cells.json").write_text(json.dumps({"rows": rows}))
    if matrix:
        (root / rd.FAULT_MATRIX).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "claims/realdrift/evidence/digits" / rd.FAULT_MATRIX,
                    root / rd.FAULT_MATRIX)
        for part in ("score", "split", "fault"):
            shutil.copytree(ROOT / "claims/drift/evidence/digits" / part,
                            tmp_path / "claims/drift/evidence/digits" / part)
    return rd.SweepEvidence(root)


def test_hypotheses_hold_on_rows_built_for_them(tmp_path: Path) -> None:
    ev = evidence(tmp_path, sweep_rows(), matrix=True)
    assert rd.h1_folded_release_alone(ev)
    assert rd.h2_unfolded_step_at_1_29(ev)
    assert rd.h3_order_of_drift(ev)
    assert rd.h4_no_flips(ev)
    assert rd.h5_threads_move_bits(ev)
    assert not rd.h6_calibration_does_not_transfer(ev)
    assert rd.h7_polygraphy_silent(ev)
    assert rd.polygraphy_tpr(ev) == 2816 / 16200  # the shipped per-fault rows, recounted
    assert rd.h8_polygraphy_misses_faults(ev)
    shutil.rmtree(tmp_path / "claims/drift")
    with pytest.raises(KitError, match="the drift evidence it was computed from"):
        rd.polygraphy_tpr(rd.SweepEvidence(ev.root))
    assert rd.cells_swept(ev) == 8
    assert rd.drifting_share(ev, "unfolded") == 6 / 8
    assert rd.largest_drift(ev, "unfolded") == 6e-5


@pytest.mark.parametrize(("change", "broken"), [
    ({"export": "folded", "drift": 1e-6}, rd.h1_folded_release_alone),
    ({"export": "unfolded", "drift": 1e-6}, rd.h2_unfolded_step_at_1_29),
    ({"export": "unfolded", "drift": 3e-4}, rd.h3_order_of_drift),
    ({"flips": {"orig": 1, "rot10-bilinear": 0}, "drift": 1e-3}, rd.h4_no_flips),
    ({"polygraphy": {"alarms": 2, "n": 10, "rate": 0.2}}, rd.h7_polygraphy_silent),
])
def test_each_hypothesis_can_fail(tmp_path: Path, change: dict[str, Any], broken: Any) -> None:
    rows = sweep_rows()
    target = next(r for r in rows if r["release"] == "1.28.0" and r["threads"] == 1
                  and r["export"] == change.get("export", "folded"))
    target.update({k: v for k, v in change.items() if k not in ("export", "drift")})
    if "drift" in change:  # consistent with its own summaries (the sweep's recount)
        target["max_abs_logit"] = change["drift"]
        for q in ("0.99", "1.0"):
            target["norm_quantiles"][q] = max(target["norm_quantiles"][q], change["drift"])
    assert not broken(evidence(tmp_path, rows))


def test_threads_and_transfer_fail_and_hold(tmp_path: Path) -> None:
    rows = sweep_rows()
    for r in rows:
        if r["release"] == "1.32.0" and r["threads"] == 2:
            r["vs_one_thread"] = 0.0
    rows[0]["alarms"]["direct"]["interval"] = [0.05, 0.2]
    ev = evidence(tmp_path, rows)
    assert not rd.h5_threads_move_bits(ev)
    assert rd.h6_calibration_does_not_transfer(ev)


def test_missing_cells_are_an_error_not_a_pass(tmp_path: Path) -> None:
    ev = evidence(tmp_path, [row("1.20.1", export="unfolded")])
    with pytest.raises(KitError, match="no folded disable_all 1-thread cell"):
        rd.h1_folded_release_alone(ev)
    with pytest.raises(KitError, match=r"lacks releases on one side of 1\.29\.0"):
        rd.h2_unfolded_step_at_1_29(ev)


def test_the_ledger_grades_hypotheses_never_as_reproductions(tmp_path: Path) -> None:
    shutil.copy(ROOT / "claims" / "realdrift.yaml", tmp_path / "realdrift.yaml")
    evidence(tmp_path / "claims" / "realdrift" / "evidence" / "digits", sweep_rows())
    clear_cache()
    outcomes = {o.claim: o.status for o in evaluate(
        load_ledger(tmp_path / "realdrift.yaml"), tmp_path)}
    clear_cache()
    assert outcomes["R-001"] == "hypothesis holds"
    assert outcomes["R-006"] == "hypothesis fails"
    assert outcomes["R-008"] == "not run here"  # no fault matrix shipped
    assert outcomes["R-012"] == "described"
    assert not {"reproduced", "direction reproduced"} & set(outcomes.values())


def test_the_hypotheses_are_decided_by_the_protocol_as_first_committed() -> None:
    """The sweep's protocol has one commit and no revision (its revisions file says so, kept
    apart because the shipped sweep record holds the protocol's sha256, which still names
    the committed file); every hypothesis rule carries where its threshold comes from, and
    none is labelled not a finding (none follows from the sweep's own selection)."""
    from kit.files import read_json, read_yaml, sha256

    protocols = ROOT / "kit" / "protocols"
    record = read_json(ROOT / "claims" / "realdrift" / "evidence" / "digits" / "sweep"
                       / "sweep.json")
    assert record["protocol_sha256"] == sha256(protocols / "realdrift.yaml")
    revisions = read_yaml(protocols / "realdrift.revisions.yaml")
    assert revisions["protocol"] == "kit/protocols/realdrift.yaml"
    assert revisions["revisions"] == []
    assert revisions["not_a_finding"] == {}
    ledger = load_ledger(ROOT / "claims" / "realdrift.yaml")
    rules = [c["rules"]["digits"] for c in ledger["claims"] if c["kind"] == "hypothesis"]
    assert len(rules) == 8
    assert all(r["threshold"]["source"] in {"paper", "boundary", "kit"} for r in rules)
    assert not any("not_a_finding" in r or "revised" in r for r in rules)
