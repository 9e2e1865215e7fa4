"""The kill harness (``tests/kill_at.py``) on ``python -m kit verify --replay``: the tiny
drift run's last four stages replayed into ``<run>-replay`` (its first writes hard-link the
earlier stages there, under the kit's ``.kit-replay`` mark; its last writes the verdict,
``<run>/replay.json``). Beside the run folder stand the user's files named like the kit's
own (``.x.tmp``, ``run-protocol.yaml``, ``index.html``, a ``notes`` folder of mode 0700),
and a ``.x.tmp`` of the user's inside the run folder. Killed with SIGKILL at a write, no
process is left writing there, every user file keeps its bytes and mode, and the same
command again finishes with the replay folder and the verdict identical to an
uninterrupted replay's (the time records, the page that prints them and the lock apart).
Default tests: a write inside the folder's preparation and the middle write;
``nox -s hardening``: every 40th."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from kit.paths import ROOT
from kit.runfolder import Run
from tests.kill_at import TIMED, changed_user_files, live_writers, seed_user_files

EVERY = int(os.environ.get("KIT_KILL_EVERY", "0"))
USER_FILES = {".x.tmp": 0o600, "run-protocol.yaml": 0o640, "index.html": 0o644,
              "notes/mine.txt": 0o600, "run/.x.tmp": 0o600}
STAGES = ("score", "bootstrap", "sensitivity", "report")
TIMES = {"report/index.html"}  # the run's page prints each stage's wall time


def replayed(kill_at: int, folder: Path, protocol: Path) -> subprocess.CompletedProcess[str]:
    """``verify --replay`` of ``folder/run`` under the tiny protocol, killed at write
    ``kill_at``."""
    return subprocess.run(
        [sys.executable, "-m", "tests.kill_at", str(kill_at), "verify", "--replay", "--run",
         str(folder / "run"), "--protocol", str(protocol), "--stages", *STAGES,
         "--backend", "venv"], cwd=ROOT, capture_output=True, text=True, timeout=600,
        check=False)


def prepared(folder: Path, first: Path) -> None:
    """A copy of the finished first run in ``folder/run``, the user's files around it."""
    shutil.copytree(first, folder / "run", ignore=shutil.ignore_patterns("replay.json"))
    seed_user_files(folder, USER_FILES)


def written(folder: Path) -> dict[str, bytes]:
    """What a replay writes: every file of the replay folder (its time records and lock
    apart) and the verdict in the first run, each with ``folder`` spelled ``FOLDER``."""
    replay = folder / "run-replay"
    found = {p.relative_to(folder).as_posix(): p.read_bytes()
             for p in sorted(replay.rglob("*")) if p.is_file() and p.name not in TIMED
             and p.name != ".lock" and p.relative_to(replay).as_posix() not in TIMES}
    found["run/replay.json"] = (folder / "run" / "replay.json").read_bytes()
    return {name: data.replace(str(folder).encode(), b"FOLDER")
            for name, data in found.items()}


def test_a_replay_killed_at_its_writes_keeps_the_users_files_and_finishes_next_time(
        tiny_run: tuple[Run, Path], tmp_path: Path) -> None:
    first, protocol = tiny_run
    whole = tmp_path / "whole"
    prepared(whole, first.root)
    proc = replayed(0, whole, protocol)
    assert proc.returncode == 0, proc.stderr[-3000:]
    writes = int(proc.stderr.rsplit("kill_at: ", 1)[1].split()[0])
    assert writes >= 100
    expected = written(whole)
    assert "run-replay/.kit-replay" in expected
    moments = range(1, writes + 1, 40) if EVERY == 1 else [5, writes // 2]
    for kill_at in moments:
        folder = tmp_path / f"k{kill_at}"
        prepared(folder, first.root)
        killed = replayed(kill_at, folder, protocol)
        assert killed.returncode == -9, (kill_at, killed.stderr[-1000:])
        assert live_writers(folder, 1.5) == [], kill_at
        assert changed_user_files(folder, USER_FILES) == [], kill_at
        again = replayed(0, folder, protocol)
        assert again.returncode == 0, (kill_at, again.stderr[-3000:])
        assert changed_user_files(folder, USER_FILES) == [], kill_at
        found = written(folder)
        assert sorted(found) == sorted(expected), kill_at
        assert [name for name in expected if found[name] != expected[name]] == [], kill_at
        shutil.rmtree(folder)
