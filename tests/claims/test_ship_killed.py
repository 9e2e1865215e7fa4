"""The kill harness on ``kit ship`` (``tests/kill_at.py``; the journal,
``kit.claims.journal``): a ship into a checkout that holds evidence, user files named like
the kit's own beside it (with their modes), SIGKILLed at its K-th write for K across every
write it makes (every fourth here; every one in ``nox -s hardening``). After each kill the
manifests either still check out, with the old evidence whole, or verify's checks name what
the kill left; never a mix that passes. The next call (``ship --recover``) finishes or rolls
back: the manifests check out, the evidence old or new and whole; then a ship gives a
checkout and a run folder byte-identical, modes included, to an uninterrupted ship's, and
every user file is as it was. A ship ``--into`` a folder holding a user's
``manifests/evidence.json`` is refused."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kit.__main__ import main
from kit.claims.coverage import check_manifests, write_manifests
from kit.claims.ship import SHIPPED
from kit.owned import claim
from kit.paths import ROOT

EVERY = int(os.environ.get("KIT_KILL_EVERY", "4"))  # nox -s hardening: 1
WEIGHTS = hashlib.sha256(b"m's weights").hexdigest()
USER_FILES = {  # named like the kit's own, each with its mode
    "root/.x.tmp": 0o600, "root/index.html": 0o640, "root/claims/drift/evidence/digits.tmp": 0o644,
    "root/claims/drift/evidence/.digits.tmp": 0o600, "run/.x.tmp": 0o600,
    "run/notes/.chapter1.tex.tmp": 0o600, "run/first-protocol.yaml": 0o444,
}


def seed(base: Path) -> tuple[Path, Path]:
    """A finished-looking digits run and a checkout with earlier evidence and its
    manifests, plus the user's files; returns (run, root)."""
    run, root = base / "run", base / "root"
    claim(root, "ship --into")  # a checkout the kit made (ship --into refuses a user's)
    for name, mode in USER_FILES.items():
        (base / name).parent.mkdir(parents=True, exist_ok=True)
        (base / name).write_text(f"the user's {name}")
        os.chmod(base / name, mode)
    for name in SHIPPED:
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text(json.dumps({"new": name}))
    (run / "fetch" / "fetch.json").write_text(json.dumps(
        {"substrate": "digits", "models": {"m": {"onnx": "fetch/models/m.onnx",
                                                 "weights_sha256": WEIGHTS}}}))
    (run / "training-cache.json").write_text('{"models": {"m": {"from": "shipped evidence"}}}')
    weights = root / "claims" / "drift" / "weights" / "digits"
    weights.mkdir(parents=True)
    (weights / "m.pt").write_text("m's weights")  # shipped before: the ship leaves them
    (run / "fetch" / "models").mkdir()
    (run / "fetch" / "models" / "m.onnx").write_bytes(b"a model")
    (run / "score" / "score.json").write_text('{"tables": {"t": {"path": "score/t.csv"}}}')
    (run / "score" / "t.csv").write_text("a,b\n")
    (run / "manifest.json").write_text('{"files": {}}')
    (run / ".lock").touch()  # a run folder the kit made
    old = root / "claims" / "drift" / "evidence" / "digits"
    for name in ("score/score.json", "old.json"):
        (old / name).parent.mkdir(parents=True, exist_ok=True)
        (old / name).write_text('{"old": true}')
    (root / "claims" / "sciml" / "evidence" / "kit").mkdir(parents=True)
    (root / "claims" / "sciml" / "evidence" / "kit" / "ledger.json").write_text("{}")
    write_manifests(root)  # the user's files under claims/ are listed as evidence, and kept
    return run, root


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every entry under ``folder``: a file's bytes and mode, a folder's mode (the run's
    lock file by mode only: it holds the pid of whoever took the folder last)."""
    found = {}
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        data = path.read_bytes() if path.is_file() and path.name != ".lock" else b""
        found[name] = (data, path.lstat().st_mode)
    return found


def ship_killed_at(kill_at: int, run: Path, root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tests.kill_at", str(kill_at), "ship",
                           "--run", str(run), "--into", str(root)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A clean seed (kept, to copy for each kill), an uninterrupted ship's result and the
    count of its writes."""
    base = tmp_path_factory.mktemp("ship-seed")
    seed(base)
    done = tmp_path_factory.mktemp("ship-done")
    shutil.copytree(base, done, dirs_exist_ok=True, symlinks=True)
    proc = ship_killed_at(0, done / "run", done / "root")
    assert proc.returncode == 0, proc.stderr
    writes = int(proc.stderr.rsplit("kill_at: ", 1)[1].split()[0])
    assert writes > 20  # the staging copy, the swap, the manifests
    return base, writes


def test_an_uninterrupted_ship_checks_out_and_keeps_the_users_files(
        uninterrupted: tuple[Path, int], tmp_path: Path) -> None:
    base, _ = uninterrupted
    shutil.copytree(base, tmp_path, dirs_exist_ok=True, symlinks=True)
    assert ship_killed_at(0, tmp_path / "run", tmp_path / "root").returncode == 0
    root = tmp_path / "root"
    assert check_manifests(root) == []
    evidence = root / "claims" / "drift" / "evidence" / "digits"
    assert json.loads((evidence / "score" / "score.json").read_text()) == {
        "tables": {"t": {"path": "score/t.csv"}}}
    assert not (evidence / "old.json").exists()
    for name, mode in USER_FILES.items():
        assert (tmp_path / name).read_text() == f"the user's {name}"
        assert (tmp_path / name).stat().st_mode & 0o7777 == mode


def points(writes: int) -> list[int]:
    return sorted({*range(1, writes + 1, EVERY), writes})


@pytest.mark.parametrize("share", [0, 1, 2, 3])
def test_a_ship_killed_at_any_write_finishes_or_rolls_back_on_the_next_call(
        uninterrupted: tuple[Path, int], tmp_path: Path, share: int) -> None:
    base, writes = uninterrupted
    done = tmp_path / "done"
    shutil.copytree(base, done, symlinks=True)
    assert ship_killed_at(0, done / "run", done / "root").returncode == 0
    expected = snapshot(done)
    old, new = snapshot(base / "root"), _evidence(expected, "root/")
    for kill_at in points(writes)[share::4]:
        here = tmp_path / f"k{kill_at}"
        shutil.copytree(base, here, symlinks=True)
        killed = ship_killed_at(kill_at, here / "run", here / "root")
        assert killed.returncode == -9, (kill_at, killed.stderr)
        if not check_manifests(here / "root"):  # checks out: the old or the new, whole
            assert _evidence(snapshot(here / "root")) in (_evidence(old), new), kill_at
        recovered = subprocess.run([sys.executable, "-m", "kit", "ship", "--recover", "--into",
                                    str(here / "root")], cwd=ROOT, capture_output=True,
                                   text=True, timeout=120)
        assert recovered.returncode == 0, (kill_at, recovered.stderr)
        assert check_manifests(here / "root") == [], (kill_at, recovered.stdout)
        assert _evidence(snapshot(here / "root")) in (_evidence(old), new), kill_at
        again = ship_killed_at(0, here / "run", here / "root")
        assert again.returncode == 0, (kill_at, again.stderr)
        assert snapshot(here) == expected, kill_at
        shutil.rmtree(here)


def _evidence(found: dict[str, tuple[bytes, int]], prefix: str = "") -> dict[str, bytes]:
    return {name[len(prefix):]: data for name, (data, _) in found.items()
            if name.startswith(f"{prefix}claims/drift/evidence/digits/")}


def test_ship_into_a_folder_of_the_users_is_refused(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    run, _ = seed(tmp_path)
    theirs = tmp_path / "theirs"
    (theirs / "manifests").mkdir(parents=True)
    (theirs / "manifests" / "evidence.json").write_text("the user's")
    assert main(["ship", "--run", str(run), "--into", str(theirs)]) == 2
    assert "holds files the kit did not write (manifests)" in capsys.readouterr().err
    assert (theirs / "manifests" / "evidence.json").read_text() == "the user's"
    assert sorted(p.name for p in theirs.rglob("*")) == ["evidence.json", "manifests"]


@pytest.mark.parametrize("pid", [-1, 0, True, 10**20, "1"])
def test_a_journal_with_a_pid_no_process_can_have_is_refused_by_name(tmp_path: Path,
                                                                    pid: object) -> None:
    import json

    from kit.claims import journal
    from kit.errors import KitError

    (tmp_path / "manifests").mkdir()
    (tmp_path / journal.JOURNAL).write_text(json.dumps({
        "pid": pid, "phase": "staging", "target": "claims/drift/evidence/digits",
        "staging": "claims/drift/evidence/.digits.kit1-abcdefgh.tmp"}))
    with pytest.raises(KitError, match=r"\.ship-journal\.json: it is not a journal the kit "
                                       "wrote"):
        journal.recover(tmp_path, lambda root: None)


def test_a_users_file_in_an_evidence_folder_stops_its_replacement_and_modes_stay(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Ship replaces an evidence folder whole: a file no earlier ship wrote there (the
    evidence manifest does not list it) stops it, named and kept; the folder's own mode
    is kept when it is replaced."""
    run, root = seed(tmp_path)
    evidence = root / "claims" / "drift" / "evidence" / "digits"
    assert main(["ship", "--run", str(run), "--into", str(root)]) == 0
    notes = evidence / "notes.md"
    notes.write_text("mine")
    evidence.chmod(0o700)
    assert main(["ship", "--run", str(run), "--into", str(root)]) == 2
    assert f"{notes}: not a file an earlier ship wrote" in capsys.readouterr().err
    assert notes.read_text() == "mine"
    notes.unlink()
    assert main(["ship", "--run", str(run), "--into", str(root)]) == 0
    assert evidence.stat().st_mode & 0o777 == 0o700
