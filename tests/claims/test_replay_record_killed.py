"""The kill harness (``tests/kill_at.py``) on ``kit ship --replay-record``: a replay record
shipped into a checkout whose machine folder already holds records (the shipped ones of this
CPU; on a CPU no shipped record names, another CPU's, copied in), beside user files named like
the kit's own. SIGKILLed at its writes (all of them in ``nox -s hardening``, three moments in
the default tests), the checkout either checks out with the machine's records all old or all
new, or verify's checks name what the kill left; never a mix that passes. ``ship --recover``
then finishes or rolls back, and a ship gives records and manifests byte-identical to an
uninterrupted one's, every user file as it was (``kit.claims.replays.ship_record`` under
``kit.claims.journal``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from kit.claims.coverage import check_manifests, write_manifests
from kit.claims.fresh import RECORD, verify_fresh
from kit.claims.replays import REPLAYS, machine_id
from kit.machine import fingerprint
from kit.owned import claim
from kit.paths import ROOT
from tests.kill_at import changed_user_files, seed_user_files

EVERY = int(os.environ.get("KIT_KILL_EVERY", "0"))
CORPUS = "claims/corpus/evidence/kit"
USER_FILES = {".x.tmp": 0o600, "index.html": 0o644, "notes/mine.txt": 0o600}


def ship_killed_at(kill_at: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tests.kill_at", str(kill_at), "ship", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def state(root: Path) -> dict[str, bytes]:
    """The machine folders' records and the manifests, by name."""
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for top in (root / REPLAYS, root / "manifests")
            for p in sorted(top.rglob("*")) if p.is_file()}


def records(root: Path) -> dict[str, bytes]:
    return {k: v for k, v in state(root).items() if k.startswith(REPLAYS.as_posix())}


def test_ship_replay_record_killed_at_its_writes_finishes_or_rolls_back(
        tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    shutil.copytree(ROOT / CORPUS, fresh / CORPUS)
    assert verify_fresh(fresh, out=tmp_path / "page.html", models={}) == 0
    record = fresh / RECORD
    base = tmp_path / "base"
    claim(base, "ship --into")  # a checkout the kit made (ship --into refuses a user's)
    for name in ("claims", "manifests"):
        shutil.copytree(ROOT / name, base / name)
    mine = base / REPLAYS / machine_id(fingerprint())
    if not mine.is_dir():  # a CPU no shipped record names: another CPU's records stand in
        shutil.copytree(min(p for p in (base / REPLAYS).iterdir() if p.is_dir()), mine)
    seed_user_files(base, USER_FILES)
    write_manifests(base)  # this checkout's manifests: claims/ alone, the user's files beside
    assert check_manifests(base) == []
    done = tmp_path / "done"
    shutil.copytree(base, done)
    proc = ship_killed_at(0, "--replay-record", str(record), "--into", str(done))
    assert proc.returncode == 0, proc.stderr[-2000:]
    writes = int(proc.stderr.rsplit("kill_at: ", 1)[1].split()[0])
    assert writes >= 5  # the journal, the staged records, the swap, the manifests
    assert check_manifests(done) == []
    expected, old = state(done), records(base)
    new = records(done)
    assert len(new) == len(old) >= 2  # the other studies' records kept beside the new one
    moments = range(1, writes + 1) if EVERY == 1 else sorted({1, writes // 2, writes})
    for kill_at in moments:
        here = tmp_path / f"k{kill_at}"
        shutil.copytree(base, here)
        killed = ship_killed_at(kill_at, "--replay-record", str(record), "--into", str(here))
        assert killed.returncode == -9, (kill_at, killed.stderr[-500:])
        if not check_manifests(here):  # checks out: every record old, or every one new
            assert records(here) in (old, new), kill_at
        recovered = ship_killed_at(0, "--recover", "--into", str(here))
        assert recovered.returncode == 0, (kill_at, recovered.stderr[-500:])
        assert check_manifests(here) == [], kill_at
        assert records(here) in (old, new), kill_at
        again = ship_killed_at(0, "--replay-record", str(record), "--into", str(here))
        assert again.returncode == 0, (kill_at, again.stderr[-500:])
        assert state(here) == expected, kill_at
        assert changed_user_files(here, USER_FILES) == [], kill_at
        shutil.rmtree(here)
