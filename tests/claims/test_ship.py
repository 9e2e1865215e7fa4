"""``kit ship`` writes only under ``claims/<study>/evidence/<substrate>``: crafted run
records (a substrate that climbs out, a table path that leaves the run, a link out of the
run) are refused naming the file and the field, exit 2, nothing written or removed; a
good run replaces its target and nothing beside it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import kit.claims.ship as shipping
from kit.__main__ import main
from kit.claims import coverage
from kit.claims.ship import SHIPPED, ship
from kit.errors import KitError

WEIGHTS = hashlib.sha256(b"m's weights").hexdigest()


def listing(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


def crafted(tmp_path: Path, substrate: str, table: str, model: str = "fetch/models/m.onnx"
            ) -> tuple[Path, Path]:
    """(a finished-looking run folder naming ``substrate``, one table ``table`` and one
    digits model ``model``, a checkout holding ``claims/`` and a victim folder beside it)."""
    run, root = tmp_path / "run", tmp_path / "repo"
    for name in SHIPPED:
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text("{}")
    (run / "fetch" / "fetch.json").write_text(json.dumps(
        {"substrate": substrate, "models": {"m": {"onnx": model, "weights_sha256": WEIGHTS}}}))
    (run / "training-cache.json").write_text('{"models": {"m": {"from": "shipped evidence"}}}')
    (root / "claims" / "drift" / "weights" / "digits").mkdir(parents=True)
    (root / "claims" / "drift" / "weights" / "digits" / "m.pt").write_text("m's weights")
    (run / "fetch" / "models").mkdir()
    (run / "fetch" / "models" / "m.onnx").write_text("a model")
    (run / "score" / "score.json").write_text(f'{{"tables": {{"primary": {{"path": "{table}"}}}}}}')
    (run / "score" / "t.csv").write_text("a,b\n")
    (run / "manifest.json").write_text('{"files": {}}')
    (run / ".lock").touch()  # a run folder the kit made
    (root / "claims" / "drift" / "evidence").mkdir(parents=True)
    (root / "victim").mkdir()
    (root / "victim" / "keep.txt").write_text("the user's")
    (tmp_path / "outside.txt").write_text("not the run's")
    return run, root


@pytest.mark.parametrize(("substrate", "table", "field"), [
    ("../../../victim", "score/t.csv", "substrate '../../../victim' is not one plain name"),
    ("digits/../../../../victim", "score/t.csv", "substrate 'digits/../../../../victim'"),
    ("digits", "../outside.txt", "tables.primary.path '../outside.txt' is not a relative"),
    ("digits", "/etc/passwd", "tables.primary.path '/etc/passwd' is not a relative"),
    ("digits", "score\\\\t.csv", "tables.primary.path 'score\\\\t.csv' is not"),  # one backslash
    ("digits", "score//t.csv", "tables.primary.path 'score//t.csv' is not"),
    ("digits", "score/" + "t" * 300, "is not a relative path of plain names"),
    ("digits", "score/t.csv", "models.m.onnx '../outside.txt' is not a relative"),
])
def test_a_crafted_record_is_refused_naming_the_file_and_field(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        substrate: str, table: str, field: str) -> None:
    model = "../outside.txt" if "models" in field else "fetch/models/m.onnx"
    run, root = crafted(tmp_path, substrate, table, model)
    monkeypatch.setattr(shipping, "ROOT", root)
    before, run_before = listing(tmp_path), listing(run)
    assert main(["ship", "--run", str(run)]) == 2
    err = capsys.readouterr().err
    record = "fetch/fetch.json" if "substrate" in field or "models" in field \
        else "score/score.json"
    assert err.startswith(f"kit: error: {run.resolve() / record}: ") or \
        err.startswith(f"kit: error: {run / record}: ")
    assert field in err
    assert listing(tmp_path) == before  # nothing written or removed, the lock file too
    assert listing(run) == run_before
    assert (root / "victim" / "keep.txt").read_text() == "the user's"


def test_a_link_out_of_the_run_is_refused(tmp_path: Path) -> None:
    run, root = crafted(tmp_path, "digits", "score/link.csv")
    (run / "score" / "link.csv").symlink_to(tmp_path / "outside.txt")
    with pytest.raises(KitError, match=r"score\.json: a listed file 'score/link\.csv' leads "
                                       r"out of .*outside\.txt"):
        ship(run, root=root)
    assert listing(root / "claims") == ["drift", "drift/evidence", "drift/weights",
                                        "drift/weights/digits", "drift/weights/digits/m.pt"]


@pytest.mark.parametrize("record", ["manifest.json", "machine.json", "replay.json"])
def test_a_run_record_linked_out_of_the_run_is_refused(tmp_path: Path, record: str) -> None:
    """Every file ship copies is checked, not only those the records list."""
    run, root = crafted(tmp_path, "digits", "score/t.csv")
    (run / record).unlink(missing_ok=True)
    (run / record).symlink_to(tmp_path / "outside.txt")
    with pytest.raises(KitError, match=rf"a run record|the run manifest '{record}' leads out"):
        ship(run, root=root)
    assert listing(root / "claims") == ["drift", "drift/evidence", "drift/weights",
                                        "drift/weights/digits", "drift/weights/digits/m.pt"]


def test_a_good_ship_replaces_its_target_and_nothing_beside_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run, root = crafted(tmp_path, "digits", "score/t.csv")
    monkeypatch.setattr(shipping, "write_manifests", lambda root: None)
    evidence = root / "claims" / "drift" / "evidence"
    (evidence / "digits" / "old").mkdir(parents=True)
    (evidence / "digits" / "old" / "stale.json").write_text("{}")
    for beside in ("digits.tmp", ".digits.tmp", "cifar100"):  # the user's, or another's
        (evidence / beside).mkdir()
        (evidence / beside / "keep.txt").write_text("kept")
    coverage.write_manifests(root)  # old/stale.json: a file an earlier ship wrote
    assert ship(run, root=root) == evidence / "digits"
    assert "score/t.csv" in listing(evidence / "digits")
    assert "run-manifest.json" in listing(evidence / "digits")
    assert not (evidence / "digits" / "old").exists()
    assert sorted(p.name for p in evidence.iterdir()) == [".digits.tmp", "cifar100", "digits",
                                                        "digits.tmp"]
    assert all((evidence / b / "keep.txt").read_text() == "kept"
               for b in ("digits.tmp", ".digits.tmp", "cifar100"))


def test_a_run_that_trained_ships_its_training_weights_from_the_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The weights fetch trained (the training cache, by the key the run names) go to
    ``claims/drift/weights/digits`` when the shipped file is not those bytes; weights of
    other bytes than the fetch record names are refused by name before any write."""
    run, root = crafted(tmp_path, "digits", "score/t.csv")
    monkeypatch.setattr(shipping, "write_manifests", lambda root: None)
    monkeypatch.setenv("KIT_CACHE", str(tmp_path / "cache"))
    key = "ab" * 32
    cached = tmp_path / "cache" / "digits-models" / key[:16] / "m.pt"
    cached.parent.mkdir(parents=True)
    cached.write_text("retrained")
    (run / "training-cache.json").write_text(json.dumps({"models": {"m": {"cache_key": key}}}))
    shipped = root / "claims" / "drift" / "weights" / "digits" / "m.pt"
    record = json.loads((run / "fetch" / "fetch.json").read_text())
    record["models"]["m"]["weights_sha256"] = hashlib.sha256(b"other").hexdigest()
    (run / "fetch" / "fetch.json").write_text(json.dumps(record))
    with pytest.raises(KitError, match="no training weights of m with the sha256"):
        ship(run, root=root)
    assert shipped.read_text() == "m's weights"
    record["models"]["m"]["weights_sha256"] = hashlib.sha256(b"retrained").hexdigest()
    (run / "fetch" / "fetch.json").write_text(json.dumps(record))
    ship(run, root=root)
    assert shipped.read_text() == "retrained"


def test_a_missing_file_writes_nothing(tmp_path: Path) -> None:
    run, root = crafted(tmp_path, "digits", "score/absent.csv")
    with pytest.raises(KitError, match=r"score/absent\.csv: missing"):
        ship(run, root=root)
    assert listing(root / "claims") == ["drift", "drift/evidence", "drift/weights",
                                        "drift/weights/digits", "drift/weights/digits/m.pt"]


def test_a_damaged_evidence_manifest_leaves_every_file_the_users(tmp_path: Path) -> None:
    """``unshipped``: with the manifest's ``files`` not a mapping, nothing counts as
    written by a ship, so nothing there may be replaced."""
    evidence = tmp_path / "claims" / "drift" / "evidence" / "digits"
    evidence.mkdir(parents=True)
    (evidence / "a.json").write_text("{}")
    coverage.write_manifests(tmp_path)
    assert coverage.unshipped(tmp_path, evidence) == []
    (tmp_path / "manifests" / "evidence.json").write_text('{"files": ["a.json"]}')
    assert coverage.unshipped(tmp_path, evidence) == [evidence / "a.json"]
