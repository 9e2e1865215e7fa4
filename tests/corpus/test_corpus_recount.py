"""Recount, never read, for the corpus (``kit.corpus.recount``): each stored decision and
summary of the shipped corpus and detector-study evidence, edited alone, is named by its
recount; Polygraphy's verdicts are Polygraphy's, run again on the shipped outputs (K5 reads
them), the hosts' per-image ones under ``--deep``; verify fails on an edit re-hashed."""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kit.corpus import recount
from kit.corpus.recompute import CorpusEvidence, k5_polygraphy_flags_all
from kit.files import canonical_json, load_npz, write_npz
from kit.paths import ROOT
from tests.conftest import verify_edited_json

EVIDENCE = ROOT / "claims" / "corpus" / "evidence"


def test_the_shipped_records_agree_with_their_recount() -> None:
    assert recount.problems(CorpusEvidence(EVIDENCE / "kit")) == []
    assert recount.problems(CorpusEvidence(EVIDENCE / "detectors")) == []


def _case(record: dict[str, Any], case_id: str) -> dict[str, Any]:
    return next(c for c in record["cases"] if c["id"] == case_id)


def _decision(r: dict[str, Any]) -> None:
    _case(r, "qdq-resize-linear")["decision"]["reproduced"] = False


def _deviation(r: dict[str, Any]) -> None:
    _case(r, "qdq-resize-linear")["deviations"]["1.20.1"]["enable_all"] = 0.0


def _range(r: dict[str, Any]) -> None:
    _case(r, "qdq-resize-linear")["range"]["missing"] = ["1.26.0"]


def _polygraphy(r: dict[str, Any]) -> None:
    _case(r, "qdq-resize-linear")["polygraphy"]["mismatch"] = False


def _summary(r: dict[str, Any]) -> None:
    r["summary"]["reproduced"] = 21


@pytest.mark.parametrize(("edit", "field"), [
    (_decision, "/decision/reproduced"), (_deviation, "/deviations/1.20.1/enable_all"),
    (_range, "/range/missing"), (_polygraphy, "/polygraphy/mismatch"),
    (_summary, "summary/reproduced")])
def test_each_case_record_field_edited_alone_is_named(
        tmp_path: Path, edit: Callable[[dict[str, Any]], None], field: str) -> None:
    folder = tmp_path / "kit"
    shutil.copytree(EVIDENCE / "kit", folder)
    path = folder / "corpus" / "cases.json"
    record = json.loads(path.read_text())
    edited = copy.deepcopy(record)
    edit(edited)
    path.write_bytes(canonical_json(edited))
    found = recount.problems(CorpusEvidence(folder))
    assert found, "the edit went unseen"
    assert all(p.startswith(f"{path}: ") and field in p for p in found), found


def test_a_crash_decision_and_a_host_measure_edited_alone_are_named(tmp_path: Path) -> None:
    kit = tmp_path / "kit"
    shutil.copytree(EVIDENCE / "kit", kit)
    crashes = kit / "corpus" / "crashes.json"
    record = json.loads(crashes.read_text())
    record["crashes"][0]["decision"]["reproduced"] = not \
        record["crashes"][0]["decision"]["reproduced"]
    crashes.write_bytes(canonical_json(record))
    [problem] = recount.problems(CorpusEvidence(kit))
    assert problem.startswith(f"{crashes}: crashes/0/decision/reproduced says ")
    detectors = tmp_path / "detectors"
    shutil.copytree(EVIDENCE / "detectors", detectors)
    hosts = detectors / "detectors" / "hosts.json"
    record = json.loads(hosts.read_text())
    i = next(i for i, row in enumerate(record["hosts"]) if row.get("hosted"))
    record["hosts"][i]["detection"]["direct"]["tpr"]["rate"] = 0.25
    hosts.write_bytes(canonical_json(record))
    [problem] = recount.problems(CorpusEvidence(detectors))
    assert problem.startswith(f"{hosts}: hosts/{i}/detection/direct/tpr/rate says 0.25")


def test_k5_reads_polygraphy_run_again_not_the_record(tmp_path: Path) -> None:
    """The record edited to say Polygraphy found no mismatch on a case: K5 still holds,
    because it decides on Polygraphy run again on the outputs (the recount names the edit);
    and the verdict run again follows the outputs (a fixed release made the affected one's
    is no mismatch)."""
    folder = tmp_path / "kit"
    shutil.copytree(EVIDENCE / "kit", folder)
    path = folder / "corpus" / "cases.json"
    record = json.loads(path.read_text())
    _polygraphy(record)
    path.write_bytes(canonical_json(record))
    assert k5_polygraphy_flags_all(CorpusEvidence(folder), rule_version=2)
    outputs = folder / "cases" / "qdq-resize-linear" / "outputs"
    shutil.copy(outputs / "1.15.1" / "enable_all.npz", outputs / "1.27.0" / "enable_all.npz")
    assert CorpusEvidence(folder).polygraphy["qdq-resize-linear"] == {
        "fixed": "1.27.0", "affected": "1.15.1", "mismatch": False}


def test_a_hosts_polygraphy_verdicts_are_recounted_with_deep(tmp_path: Path) -> None:
    folder = tmp_path / "detectors"
    shutil.copytree(EVIDENCE / "detectors", folder)
    row = next(r for r in json.loads((folder / "detectors" / "hosts.json").read_text())[
        "hosts"] if r.get("hosted"))
    evidence = folder / row["evidence"]
    arrays = load_npz(evidence)
    arrays["polygraphy/positive"] = np.zeros_like(arrays["polygraphy/positive"])
    write_npz(evidence, arrays)
    # the measures read the flipped verdicts too, so the stored rates now disagree with
    # them; the arrays themselves are named only by --deep
    plain = recount.problems(CorpusEvidence(folder))
    deep = recount.problems(CorpusEvidence(folder), deep=True)
    assert not any("says other than Polygraphy run again" in p for p in plain)
    assert any("polygraphy/positive says other than Polygraphy run again" in p for p in deep)


def test_verify_fails_on_a_polygraphy_verdict_edited_and_rehashed(tmp_path: Path) -> None:
    code, problems = verify_edited_json(tmp_path, "claims/corpus/evidence/kit",
                                        "corpus/cases.json", _polygraphy)
    assert code == 1
    assert not any("sha256" in p for p in problems), problems
    assert any("corpus/cases.json" in p and "polygraphy/mismatch" in p for p in problems), \
        problems
