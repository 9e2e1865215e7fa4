"""The fault stage on shipped models injects the shipped severity choices, whatever the rule
chooses on this CPU (``kit.drift.stages.fault.shipped_choices``): a run of the tiny
configuration stands in for the shipped evidence, one of its choices moved a grid step, as
another CPU's clean drift moves it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kit.drift.protocol import load_protocol
from kit.drift.stages.fault import run_fault
from kit.errors import KitError
from kit.files import canonical_json, sha256
from kit.runfolder import SHIPPED_MANIFEST, Run


def _shipped(run: Run, target: Path, edit: Any = None) -> tuple[Path, str]:
    """An evidence folder holding ``run``'s fetch record and its severity choices with one
    moved a grid step (its id returned), listed by a run manifest."""
    (target / "fetch").mkdir(parents=True)
    shutil.copy(run.root / "fetch" / "fetch.json", target / "fetch" / "fetch.json")
    record = json.loads((run.stage("fault") / "severity.json").read_text())
    entry = record["selection"][4]
    grid = entry["grid"]
    low = grid.index(entry["low"])
    moved = 0 if low > 0 else 1
    entry["low"], entry["high"] = grid[moved], grid[moved + 1]
    if edit is not None:
        edit(record)
    (target / "fault").mkdir()
    (target / "fault" / "severity.json").write_bytes(canonical_json(record))
    (target / SHIPPED_MANIFEST).write_bytes(canonical_json(
        {"files": {"fault/severity.json": sha256(target / "fault" / "severity.json")}}))
    return target, f"{entry['model']}-{entry['position']}-{entry['family']}"


def _copy(run: Run, target: Path) -> Run:
    shutil.copytree(run.root, target, symlinks=True)
    return Run(target)


def test_the_shipped_choices_are_injected_and_this_cpu_s_are_kept_beside(
        tiny_run: tuple[Run, Path], tmp_path: Path) -> None:
    run, protocol_file = tiny_run
    shipped, moved = _shipped(run, tmp_path / "evidence")
    again = _copy(run, tmp_path / "run")
    run_fault(load_protocol(protocol_file), again, backend="venv", shipped=shipped)

    assert (again.stage("fault") / "severity.json").read_bytes() == \
        (shipped / "fault" / "severity.json").read_bytes()
    here = json.loads((again.stage("fault") / "severity-here.json").read_text())
    assert here["differs_from_shipped"] == [moved]
    assert here["selection"] == json.loads(
        (run.stage("fault") / "severity.json").read_text())["selection"]
    taken = {e["model"] + "-" + e["position"] + "-" + e["family"]: e for e in json.loads(
        (shipped / "fault" / "severity.json").read_text())["selection"]}
    before = {f["id"]: f for f in run.record("fault")["faults"]}
    after = {f["id"]: f for f in again.record("fault")["faults"]}
    assert sorted(before) == sorted(after)
    for fid, fault in after.items():
        coordinate, level = fid.rsplit("-", 1)
        assert fault["severity"] == taken[coordinate][level]
        same = fault["model_sha256"] == before[fid]["model_sha256"]
        assert same == (coordinate != moved), fid


@pytest.mark.parametrize(("damage", "message"), [
    ("manifest", "sha256 differs from"),
    ("grid", "is not on this protocol's severity grid"),
    ("missing", "of the protocol's 9 model, layer and family coordinates"),
    ("model", "is not the shipped model"),
])
def test_shipped_choices_that_do_not_apply_are_refused_by_name(
        tiny_run: tuple[Run, Path], tmp_path: Path, damage: str, message: str) -> None:
    run, protocol_file = tiny_run
    edits = {"grid": lambda r: r["selection"][0].update(grid=[1, 2, 3]),
             "missing": lambda r: r["selection"].pop()}
    shipped, _ = _shipped(run, tmp_path / "evidence", edits.get(damage))
    if damage == "manifest":
        (shipped / "fault" / "severity.json").write_text("{}")
    if damage == "model":
        fetch = json.loads((shipped / "fetch" / "fetch.json").read_text())
        fetch["models"]["resnet20"]["onnx_sha256"] = "0" * 64
        (shipped / "fetch" / "fetch.json").write_bytes(canonical_json(fetch))
    again = _copy(run, tmp_path / "run")
    before = sorted(p.relative_to(again.root) for p in again.root.rglob("*"))
    with pytest.raises(KitError, match=message):
        run_fault(load_protocol(protocol_file), again, backend="venv", shipped=shipped)
    assert sorted(p.relative_to(again.root) for p in again.root.rglob("*")) == before
