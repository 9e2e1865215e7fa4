"""A replay verdict per file (``kit.tolerance``) and the claims recomputed from a fresh run
beside the shipped ones (``kit.claims.fresh``, ``verify --evidence``): an injected
difference below its declared bound is ``within tolerance``, one above it ``differs``
naming the file, array and element, a file no bound names must be identical, and a
changed status is reported and fails the verdict."""

from __future__ import annotations

import fnmatch
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kit.claims.fresh import fresh_report, verify_fresh
from kit.errors import KitError
from kit.files import load_npz, sha256, write_npz
from kit.machine import cpu_flags
from kit.paths import ROOT
from kit.tolerance import (
    Bound,
    Verdict,
    _compare_floats,
    bound_for,
    compare_file,
    compare_folders,
    load_bounds,
    load_tolerances,
    relative_difference,
)

CORPUS = "claims/corpus/evidence/kit"
CASE = "cases/simplified-layernorm-pow/reference.npz"
BOUND = Bound("corpus", "cases/*/reference.npz", atol=1e-6, rtol=1e-5, reason="a test bound")


def _pair(tmp_path: Path, shipped: dict[str, np.ndarray], fresh: dict[str, np.ndarray]
          ) -> tuple[Path, Path]:
    a, b = tmp_path / "fresh.npz", tmp_path / "shipped.npz"
    write_npz(a, fresh)
    write_npz(b, shipped)
    return a, b


def test_identical_within_tolerance_and_differs_on_arrays(tmp_path: Path) -> None:
    x = np.linspace(-1.0, 1.0, 384, dtype=np.float32).reshape(3, 128)
    same = compare_file(*_pair(tmp_path, {"y": x}, {"y": x.copy()}), "r.npz", BOUND)
    assert same.verdict == "identical"
    near = x.copy()
    near[1, 5] += np.float32(2.4e-7)
    found = compare_file(*_pair(tmp_path, {"y": x}, {"y": near}), "r.npz", BOUND)
    assert found.verdict == "within tolerance"
    assert 1e-7 < found.max_abs < 1e-6
    far = x.copy()
    far[2, 7] += np.float32(1e-3)
    found = compare_file(*_pair(tmp_path, {"y": x}, {"y": far}), "r.npz", BOUND)
    assert found.verdict == "differs"
    assert found.where == "array y element [2, 7]"
    assert found.detail["abs"] == pytest.approx(1e-3, rel=1e-3)
    # without a declared bound the same small difference differs
    assert compare_file(*_pair(tmp_path, {"y": x}, {"y": near}), "r.npz", None).verdict \
        == "differs"


def test_nan_positions_shapes_dtypes_and_names_must_agree(tmp_path: Path) -> None:
    x = np.array([1.0, np.nan, 3.0])
    moved = np.array([np.nan, 2.0, 3.0])
    found = compare_file(*_pair(tmp_path, {"y": x}, {"y": moved}), "r.npz", BOUND)
    assert (found.verdict, found.where) == ("differs", "array y element [0] (NaN position)")
    assert compare_file(*_pair(tmp_path, {"y": x}, {"y": x.astype(np.float32)}), "r.npz",
                        BOUND).where == "array y"
    assert compare_file(*_pair(tmp_path, {"y": x}, {"z": x}), "r.npz", BOUND).where == \
        "array names"
    both_nan = np.array([1.0 + 1e-9, np.nan, 3.0])
    assert compare_file(*_pair(tmp_path, {"y": x}, {"y": both_nan}), "r.npz",
                        BOUND).verdict == "within tolerance"


def test_json_records_compare_their_numbers_the_same_way(tmp_path: Path) -> None:
    shipped, fresh = tmp_path / "a.json", tmp_path / "b.json"
    shipped.write_text(json.dumps({"d": [1.0, 2.0], "name": "x", "n": 3}))
    fresh.write_text(json.dumps({"d": [1.0, 2.0 + 1e-7], "name": "x", "n": 3}))
    assert compare_file(fresh, shipped, "c.json", BOUND).verdict == "within tolerance"
    fresh.write_text(json.dumps({"d": [1.0, 2.5], "name": "x", "n": 3}))
    found = compare_file(fresh, shipped, "c.json", BOUND)
    assert (found.verdict, found.where) == ("differs", "/d/1")
    fresh.write_text(json.dumps({"d": [1.0, 2.0], "name": "y", "n": 3}))
    assert compare_file(fresh, shipped, "c.json", BOUND).where == "/name"


def test_a_hash_of_another_file_is_not_compared_under_a_bound(tmp_path: Path) -> None:
    """The record's hash of a table follows the table, which is judged itself; without a
    bound the record must be identical, hash included."""
    shipped, fresh = tmp_path / "a.json", tmp_path / "b.json"
    shipped.write_text(json.dumps({"table_sha256": "a" * 64, "n": 3}))
    fresh.write_text(json.dumps({"table_sha256": "b" * 64, "n": 3}))
    assert compare_file(fresh, shipped, "c.json", BOUND).verdict == "within tolerance"
    assert compare_file(fresh, shipped, "c.json", None).verdict == "differs"
    fresh.write_text(json.dumps({"table": "b" * 64, "n": 3}))
    shipped.write_text(json.dumps({"table": "a" * 64, "n": 3}))
    assert compare_file(fresh, shipped, "c.json", BOUND).where == "/table"


def test_the_declared_bounds_name_their_files_and_reasons() -> None:
    bounds = load_bounds()
    assert bound_for(bounds, "corpus", CASE) is not None
    assert bound_for(bounds, "corpus", "cases/x/model.onnx") is None
    assert bound_for(bounds, "drift", "score/cases/cand-rot10-bilinear.npz") is not None
    assert bound_for(bounds, "drift", "fetch/models/resnet20.onnx") is None
    assert all(len(b.reason) > 40 for b in bounds)


def _evidence_files() -> list[tuple[str, str]]:
    """(study, file relative to its evidence folder) of every shipped evidence file a
    replay compares."""
    from kit.claims.ledger import load_ledger
    from kit.files import plain_files
    from kit.runfolder import SHIPPED_MANIFEST, UNHASHED

    found = []
    for path in sorted((ROOT / "claims").glob("*.yaml")):
        ledger = load_ledger(path)
        for substrate in ledger["substrates"].values():
            folder = ROOT / substrate["evidence"]
            found += [(ledger["study"], p.relative_to(folder).as_posix())
                      for p in plain_files(folder)[0]
                      if p.name not in (SHIPPED_MANIFEST, *UNHASHED)]
    return found


def test_every_evidence_file_has_a_bound_or_is_exact_by_construction() -> None:
    """A file kind with no bound must be listed with why it is deterministic."""
    document = load_tolerances()
    bounds = load_bounds()
    exact = [(e["study"], e["files"]) for e in document["exact"]]
    loose = [(study, name) for study, name in _evidence_files()
             if bound_for(bounds, study, name) is None
             and not any(s == study and fnmatch.fnmatch(name, p) for s, p in exact)]
    assert loose == []


def test_every_bound_rests_on_its_measurements() -> None:
    """Each measurement that cites a shipped replay record is recomputed from it (the
    largest differences of the files the bound names); every bound covers what it was
    measured from; a bound wider than ten times that says why; one without measurements
    says why not."""
    from kit.claims.replays import load_records

    records, problems = load_records()
    assert problems == []
    by_file = {r["file"]: r for r in records}
    for entry in load_tolerances()["tolerances"]:
        name = f"{entry['study']} {entry['files']}"
        if not entry["measured"]:
            assert "unmeasured" in entry, name
            continue
        for m in entry["measured"]:
            if m["source"].startswith("claims/replays/"):
                record = by_file[m["source"]]
                assert record["study"].split("/")[0] == entry["study"], name
                mine = [v for v in record["verdicts"]
                        if fnmatch.fnmatch(v["file"], entry["files"])
                        and bound_for(load_bounds(), entry["study"], v["file"]) is not None
                        and bound_for(load_bounds(), entry["study"], v["file"]).files
                        == entry["files"]]
                assert m["max_abs"] == max((v["max_abs"] for v in mine), default=0.0), name
                assert m["max_rel"] == max((v["max_rel"] for v in mine), default=0.0), name
            else:
                assert (ROOT / m["source"]).is_file(), name
                text = (ROOT / m["source"]).read_text()
                assert f"{m['max_abs']:.3g}" in text, name
            covered = m["max_abs"] <= entry["atol"] or m["max_rel"] <= entry["rtol"]
            assert covered or "exceeded" in m, name  # a bound past what it covers says so
        covered = [m for m in entry["measured"] if "exceeded" not in m]
        if not covered:
            continue  # measured past the bound only: the entry says where it fails
        widest_abs = max(m["max_abs"] for m in covered)
        widest_rel = max(m["max_rel"] for m in covered)
        if entry["atol"] > 10 * widest_abs and entry["rtol"] > 10 * widest_rel:
            assert "margin_reason" in entry, name


@pytest.fixture
def fresh(tmp_path: Path) -> Path:
    """A fresh corpus run shipped into a folder of its own: the shipped evidence copied."""
    target = tmp_path / "fresh"
    shutil.copytree(ROOT / CORPUS, target / CORPUS)
    return target


def _nudge(path: Path, by: float) -> None:
    arrays = load_npz(path)
    name = sorted(arrays)[0]
    flat = arrays[name].reshape(-1).copy()
    flat[3] += by
    arrays[name] = flat.reshape(arrays[name].shape)
    write_npz(path, arrays)


def test_a_fresh_run_within_tolerance_holds(fresh: Path, tmp_path: Path) -> None:
    """As a rebuild on another CPU gives it: the reference moves within its bound, and the
    case's hash record and the run manifest follow it (hashes of a judged file; the run
    manifest stays outside the comparison)."""
    _nudge(fresh / CORPUS / CASE, 2e-7)
    hashes = fresh / CORPUS / CASE.replace("reference.npz", "outputs/inputs.sha256")
    record = json.loads(hashes.read_text())
    record["reference.npz"] = sha256(fresh / CORPUS / CASE)
    hashes.write_text(json.dumps(record))
    manifest = fresh / CORPUS / "run-manifest.json"
    manifest.write_text(manifest.read_text().replace("0", "1", 1))
    report = fresh_report(fresh)
    corpus = report["studies"]["corpus/kit"]
    assert corpus["files"]["counts"]["within tolerance"] == 2
    assert corpus["files"]["counts"]["differs"] == 0
    assert corpus["status_changes"] == corpus["value_changes"] == []
    assert report["holds"]
    assert verify_fresh(fresh, out=tmp_path / "replay" / "index.html") == 0
    assert "holds" in (tmp_path / "replay" / "index.html").read_text()


def test_a_difference_past_its_bound_differs_and_a_changed_status_fails(
        fresh: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _nudge(fresh / CORPUS / CASE, 1e-2)
    report = fresh_report(fresh)
    first = report["studies"]["corpus/kit"]["files"]["first_difference"]
    assert first["file"] == CASE
    assert first["where"] == "array y element [0, 0, 3]"
    assert not report["holds"]
    # six cases whose fixed releases now deviate from their reference: the rate (under the
    # rule as first committed) falls to 15 of 22, below the paper's 10 of 14, and K3 (C-003)
    # no longer holds
    for case in ("avgpool-asym-pads", "avgpool-ceil-include-pad", "cast-chain-fp16",
                 "qdq-resize-linear", "qdq-split-output-params", "matmul-scale-leading-dims"):
        _nudge(fresh / CORPUS / "cases" / case / "reference.npz", 1e3)
    report = fresh_report(fresh)
    study = report["studies"]["corpus/kit"]
    changed = {d["claim"]: d for d in study["status_changes"]}
    moved = {d["claim"]: d for d in study["value_changes"]}
    assert (changed["C-003"]["shipped_status"], changed["C-003"]["fresh_status"]) == \
        ("consistent", "hypothesis fails")
    # a value that moved without changing its status is listed apart from status changes
    assert all(d["fresh_status"] == d["shipped_status"] for d in moved.values())
    assert all(d["fresh_status"] != d["shipped_status"] for d in changed.values())
    assert not fresh_report(fresh, retrained=["*"])["holds"]  # a status change decides
    assert verify_fresh(fresh, status_only=True, out=tmp_path / "page.html") == 1
    out = capsys.readouterr().out
    assert "replay: corpus/kit: STATUS C-003: shipped consistent" in out
    assert f"replay: corpus/kit: claims: {len(changed)} claims changed status, " \
        f"{len(moved)} changed value only" in out
    record = json.loads((fresh / "replay-record.json").read_text())
    assert record["machine"]["flags"] == cpu_flags()
    assert f"replay: on {record['machine']['cpu']}" in out


def test_a_file_without_a_bound_still_gets_its_figures(fresh: Path) -> None:
    """A file no bound names differs whenever its bytes do, and the record says by how
    much: the figures are measured for every differing file."""
    name = "cases/minmax-nan/inputs.npz"  # seeded inputs: no bound, equal bytes only
    assert bound_for(load_bounds(), "corpus", name) is None
    _nudge(fresh / CORPUS / name, 0.25)
    verdicts = {v.file: v for v in compare_folders(
        fresh / CORPUS, ROOT / CORPUS, "corpus", [name], load_bounds())}
    found = verdicts[name]
    assert found.verdict == "differs"
    assert found.where.startswith("bytes differ and no tolerance is declared")
    assert found.max_abs == pytest.approx(0.25, abs=1e-6)
    assert 0 < found.max_rel <= 2


def test_a_relative_difference_against_a_zero_is_bounded() -> None:
    """A shipped zero gives a relative difference of 1 (the whole value), not 1e+298."""
    assert relative_difference(0.0, 5e-10) == 1.0
    assert relative_difference(5e-10, 0.0) == 1.0
    assert relative_difference(1.0, -1.0) == 2.0
    assert relative_difference(2.0, 2.2) == pytest.approx(0.1 / 1.1)
    bound = Bound("x", "*", 0.0, 0.0, "test")
    found = Verdict("f", "within tolerance")
    _compare_floats("a", np.zeros(3), np.array([0.0, 1e-300, 0.0]), bound, found)
    assert found.max_rel == 1.0
    assert found.max_abs == 1e-300


def test_a_folder_without_a_shipped_study_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(KitError, match="no claims/ folder"):
        fresh_report(tmp_path)
    (tmp_path / "claims").mkdir()
    with pytest.raises(KitError, match="holds no study's evidence"):
        fresh_report(tmp_path)


def test_the_record_names_where_each_studys_models_came_from(fresh: Path,
                                                              tmp_path: Path) -> None:
    """``verify --evidence DIR --models shipped``: the record says so (not "not named"), a
    study named ``--retrained`` says train, and the page goes where ``--page`` says."""
    assert fresh_report(fresh)["studies"]["corpus/kit"]["models"] is None
    both = fresh_report(fresh, models={"*": "shipped", "corpus/kit": "train"})
    assert both["studies"]["corpus/kit"]["models"] == "train"
    page = tmp_path / "replay.html"
    proc = subprocess.run([sys.executable, "-m", "kit", "verify", "--evidence", str(fresh),
                           "--models", "shipped", "--page", str(page)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads((fresh / "replay-record.json").read_text())
    assert record["studies"]["corpus/kit"]["models"] == "shipped"
    assert "holds" in page.read_text()
