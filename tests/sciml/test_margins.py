"""The SciML records judged through their decisions on a replay (``kit.sciml.margins``,
``verify --evidence``): a detection that crosses its threshold by a rounding is within
tolerance with its summaries recounted on each side; a decision flipped away from its
threshold, a summary edited alone and a printed number past the bound each still differ."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

from kit.paths import ROOT
from kit.sciml.margins import fires_both_ways, judge_decided, same_words, verdicts_reachable
from kit.sciml.recompute_catalogue import unified_again
from kit.tolerance import Verdict, bound_for, load_bounds

SHIPPED = ROOT / "claims" / "sciml" / "evidence" / "kit"
BOUND = bound_for(load_bounds(), "sciml", "unified.json")
LIMITS = {"permutation": 1e-5, "ratio": 1.5}
SCALE_ENTRY = 13  # pinn-burgers-scale-1.5: every boundary metric is 1.5 x its control


def _fresh(tmp_path: Path, edit: Any, name: str = "unified.json") -> Path:
    fresh = tmp_path / "fresh"
    fresh.mkdir(parents=True)
    for other in ("unified.json", "mgn_faults.json", "ledger.json", "pinn.json"):
        shutil.copy(SHIPPED / other, fresh / other)
    record = json.loads((fresh / name).read_text())
    edit(record)
    (fresh / name).write_text(json.dumps(record))
    return fresh


def _judge(fresh: Path, name: str = "unified.json") -> Verdict:
    assert BOUND is not None
    return judge_decided(fresh, SHIPPED, name, BOUND, Verdict(name, "differs", 1.0, 1.0,
                                                                where="/first"))


def test_a_detection_decided_by_rounding_fires_both_ways_and_one_far_from_it_does_not(
        ) -> None:
    assert BOUND is not None
    assert fires_both_ways("boundary", 0.041274695872982534, 0.027516463915321688, LIMITS,
                           BOUND)  # the EPYC's replay: 1.5 exactly, shipped 1.5000000000000002
    assert not fires_both_ways("boundary", 0.0619, 0.0275, LIMITS, BOUND)  # 2.25 x
    assert not fires_both_ways("conservation", 0.4759, 0.0161, LIMITS, BOUND)
    assert fires_both_ways("permutation", 1e-5 + 1e-8, 0.0, LIMITS, BOUND)
    assert not fires_both_ways("permutation", 2e-5, 0.0, LIMITS, BOUND)


def test_a_verdict_at_its_tolerance_reaches_both_verdicts_and_one_far_from_it_one() -> None:
    assert BOUND is not None
    row = {"card": "c", "case": "k", "violation": 1e-5 + 1e-8, "tolerance": 1e-5,
           "floor": 0.0, "domain": 0.0, "verdict": "fail"}
    assert {"pass", "fail"} <= verdicts_reachable(row, BOUND)
    assert verdicts_reachable({**row, "violation": 2e-5}, BOUND) == {"fail"}


def test_texts_agree_only_in_their_words_and_within_the_bound() -> None:
    assert BOUND is not None
    shipped = "tolerance 1e-05 > 10 x floor 7.48e-08"
    assert same_words(shipped, "tolerance 1e-05 > 10 x floor 7.99e-08", BOUND)
    assert not same_words(shipped, "tolerance 1e-05 > 10 x floor 7.48e-06", BOUND)
    assert not same_words(shipped, "tolerance 1e-05 does not dominate 10 x floor 7.48e-08",
                          BOUND)


def _nudge_to_fire(record: dict[str, Any]) -> None:
    """Trial 0 of the scale probe one rounding over the ratio, its summaries recounted."""
    trial = record["entries"][SCALE_ENTRY]["trials"][0]
    assert trial["detected"]["boundary"] is False
    trial["metrics"]["boundary"] = math.nextafter(trial["metrics"]["boundary"], 1.0)
    trial["detected"]["boundary"] = True
    faults = json.loads((SHIPPED / "mgn_faults.json").read_text())
    record.update(unified_again(record, faults))


def test_a_detection_crossing_its_threshold_by_a_rounding_is_within(tmp_path: Path) -> None:
    found = _judge(_fresh(tmp_path, _nudge_to_fire))
    assert found.verdict == "within tolerance", found.where
    assert found.detail["decisions_moved"] == 1
    assert found.detail["moved_first"] == "/first"


def test_a_decision_flipped_far_from_its_threshold_differs(tmp_path: Path) -> None:
    def flip(record: dict[str, Any]) -> None:  # conservation fires at 29 x its control
        trial = record["entries"][SCALE_ENTRY]["trials"][0]
        trial["detected"]["conservation"] = not trial["detected"]["conservation"]

    found = _judge(_fresh(tmp_path, flip))
    assert found.verdict == "differs"
    assert found.where == (f"/entries/{SCALE_ENTRY}/trials/0/detected/conservation "
                           "(away from its threshold)")


def test_a_summary_edited_alone_still_differs(tmp_path: Path) -> None:
    def edit(record: dict[str, Any]) -> None:
        _nudge_to_fire(record)
        record["any_detector"]["count"] += 1

    found = _judge(_fresh(tmp_path, edit))
    assert found.verdict == "differs"
    assert "the fresh record's own recount fails" in found.where


def test_a_gate_floor_is_judged_as_a_number_in_its_text(tmp_path: Path) -> None:
    def why(text: str) -> Any:
        def edit(record: dict[str, Any]) -> None:
            record["decisions"][6]["conditions"]["numerically_decidable"]["why"] = text
        return edit

    within = _judge(_fresh(tmp_path / "a", why("tolerance 1e-05 > 10 x floor 7.99e-08"),
                           "ledger.json"), "ledger.json")
    assert within.verdict == "within tolerance", within.where
    assert within.detail["texts_moved"] == 1
    past = _judge(_fresh(tmp_path / "b", why("tolerance 1e-05 > 10 x floor 7.99e-06"),
                         "ledger.json"), "ledger.json")
    assert past.verdict == "differs"
    assert past.where.startswith("/decisions/6/conditions/numerically_decidable/why")


def _pinn_verdict(subject: int, relation: str, violation: float, verdict: str) -> Any:
    """An edit of pinn.json: one subject's violation and verdict, its PDE's summary
    recomputed, so the record recounts on its own."""
    from kit.sciml.pinn import PDES
    from kit.sciml.pinn_study import comparison, summaries

    def edit(record: dict[str, Any]) -> None:
        row = record["subjects"][subject]
        row[f"{relation}_violation"] = violation
        row["verdicts"][relation] = verdict
        if relation == "mr_b":
            row["mr_b_ratio"] = violation / record["boundary_floor"]
        pde = row["pde"]
        rows = [s for s in record["subjects"] if s["pde"] == pde]
        record["summary"][pde] = summaries(rows, list(PDES).index(pde))
        record["mr_b_comparison"] = comparison(
            *([s["mr_b_ratio"] for s in record["subjects"] if s["pde"] == name]
              for name in ("heat", "burgers")))
    return edit


def test_a_pinn_verdict_at_its_exact_tolerance_moves_within_and_one_far_from_it_differs(
        tmp_path: Path) -> None:
    """MR-A compares a permuted evaluation against a tolerance of one float64 ulp (2.2e-16):
    the Xeon's MKL-restricted replay turned subject 0's 0 into 1.2e-16, and a CPU that
    makes it 3e-16 fails it. That flip, at its threshold within the bound, is within
    tolerance; MR-B's verdict flipped with its violation moved from 3.3 times its floor to
    half of it differs (a decision that moves with its value past the bound is never
    absorbed), and so does a verdict edited alone (the fresh record's own recount)."""
    at = _judge(_fresh(tmp_path / "a", _pinn_verdict(0, "mr_a", 3e-16, "fail"), "pinn.json"),
                "pinn.json")
    assert at.verdict == "within tolerance", at.where
    assert at.detail["decisions_moved"] == 1
    far = _judge(_fresh(tmp_path / "b", _pinn_verdict(0, "mr_b", 0.005, "pass"),
                        "pinn.json"), "pinn.json")
    assert far.verdict == "differs"
    assert "mr_b" in far.where, far.where
    assert "recount" not in far.where, far.where

    def alone(record: dict[str, Any]) -> None:
        record["subjects"][0]["verdicts"]["mr_b"] = "pass"

    edited = _judge(_fresh(tmp_path / "c", alone, "pinn.json"), "pinn.json")
    assert edited.verdict == "differs"
    assert "the fresh record's own recount fails" in edited.where


def test_verify_evidence_judges_the_sciml_records_through_their_decisions(
        tmp_path: Path) -> None:
    from kit.claims.fresh import fresh_report

    fresh = tmp_path / "fresh"
    for folder in ("claims/sciml/evidence/kit", "claims/sciml/evidence/null"):
        shutil.copytree(ROOT / folder, fresh / folder)
    path = fresh / "claims/sciml/evidence/kit/unified.json"
    record = json.loads(path.read_text())
    _nudge_to_fire(record)
    path.write_text(json.dumps(record))
    study = fresh_report(fresh)["studies"]["sciml/kit"]
    verdicts = {v["file"]: v for v in study["verdicts"]}
    assert verdicts["unified.json"]["verdict"] == "within tolerance"
    assert verdicts["unified.json"]["detail"]["decisions_moved"] == 1
    assert study["holds"], study["status_changes"]
