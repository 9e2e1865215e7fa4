"""The detector study's record judged through its inputs (``kit.corpus.derived``), on
copies of the shipped detector evidence: a record that moved with its arrays is within
tolerance; one edited alone, one that differs outside its measures, or one whose arrays
are out of their bound stays ``differs``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kit.corpus.derived import HOSTS_JSON, judge_hosts, revise
from kit.corpus.detector_measures import host_measures
from kit.corpus.recompute_detectors import committed_params
from kit.files import canonical_json, load_npz, write_npz
from kit.paths import ROOT
from kit.tolerance import Verdict, load_bounds

SHIPPED = ROOT / "claims" / "corpus" / "evidence" / "detectors"


@pytest.fixture
def sides(tmp_path: Path) -> tuple[Path, Path]:
    """A fresh copy whose first host's release control moved (its affected control
    logits scaled), its record recomputed from the moved arrays, and the shipped copy."""
    fresh, shipped = tmp_path / "fresh", tmp_path / "shipped"
    for target in (fresh, shipped):
        shutil.copytree(SHIPPED, target)
    record = json.loads((fresh / HOSTS_JSON).read_text())
    row = next(r for r in record["hosts"] if r["hosted"])
    arrays = load_npz(fresh / row["evidence"])
    arrays["control/affected/orig"] = arrays["control/affected/orig"] * np.float32(1.5)
    write_npz(fresh / row["evidence"], arrays)
    row.update(json.loads(canonical_json(host_measures(arrays, committed_params()))))
    (fresh / HOSTS_JSON).write_bytes(canonical_json(record))
    return fresh, shipped


def _found() -> Verdict:
    return Verdict(HOSTS_JSON, "differs", 1.0, 0.5, where="/hosts/0/release_control",
                   bound="atol 1e-06, rtol 0.0001")


def test_a_record_that_moved_with_its_arrays_is_within_tolerance(
        sides: tuple[Path, Path]) -> None:
    fresh, shipped = sides
    assert json.loads((fresh / HOSTS_JSON).read_text()) != \
        json.loads((shipped / HOSTS_JSON).read_text())
    judged = judge_hosts(fresh, shipped, load_bounds(), _found(), inputs_within=True)
    assert judged.verdict == "within tolerance"
    assert "moved only through its inputs" in judged.bound
    assert judged.detail == {"moved_first": "/hosts/0/release_control"}


def _more_alarms(record: dict[str, Any]) -> None:
    next(r for r in record["hosts"] if r["hosted"])["detection"]["direct"]["fpr"]["alarms"] += 1


def _placed_elsewhere(record: dict[str, Any]) -> None:
    record["hosts"][0]["placement"] = "elsewhere"


@pytest.mark.parametrize(("edit", "named"), [
    (_more_alarms, "recomputed from the fresh arrays it differs from the fresh file"),
    (_placed_elsewhere, "outside the measures"),
])
def test_a_record_edited_alone_stays_differs(sides: tuple[Path, Path], edit: Any,
                                             named: str) -> None:
    """A count edited without its arrays, or a field outside the measures."""
    fresh, shipped = sides
    record = json.loads((fresh / HOSTS_JSON).read_text())
    edit(record)
    (fresh / HOSTS_JSON).write_bytes(canonical_json(record))
    judged = judge_hosts(fresh, shipped, load_bounds(), _found(), inputs_within=True)
    assert judged.verdict == "differs"
    assert named in judged.where


def test_arrays_out_of_their_bound_leave_the_record_differing(
        sides: tuple[Path, Path]) -> None:
    fresh, shipped = sides
    verdicts = [Verdict("detectors/evidence/a/resnet20.npz", "differs"), _found()]
    assert [v.verdict for v in revise(verdicts, fresh, shipped, load_bounds())] == \
        ["differs", "differs"]
    verdicts[0] = Verdict("detectors/evidence/a/resnet20.npz", "within tolerance")
    assert [v.verdict for v in revise(verdicts, fresh, shipped, load_bounds())] == \
        ["within tolerance", "within tolerance"]
