"""The kill harness on ``python -m kit reproduce-all`` (``--small --only corpus``): its
studies run as child processes, so a SIGKILL of reproduce-all alone must take them down too
(``kit.procs``: each child, and each runtime worker under it, dies with its starter);
killed while a study runs, or at its own writes (one moment in the default tests, every
fourth write in ``nox -s hardening``), it leaves no process writing into the runs folder,
every user file beside the folder keeps its bytes and mode, and the next reproduce-all
finishes with the verdict of an uninterrupted one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kit.paths import ROOT
from tests.kill_at import changed_user_files, live_writers, seed_user_files

EVERY = int(os.environ.get("KIT_KILL_EVERY", "0"))
USER_FILES = {".x.tmp": 0o600, "state.json": 0o640, "notes/mine.txt": 0o600}
ARGS = ("reproduce-all", "--small", "--only", "corpus")
DONE = ("reproduce-all --small: every study ran, shipped and was evaluated; the small "
        "configuration's numbers are not the shipped configuration's")


def _command(kill_at: int, runs: Path) -> list[str]:
    return [sys.executable, "-m", "tests.kill_at", str(kill_at), *ARGS, "--runs", str(runs)]


def _finish(runs: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_command(0, runs), cwd=ROOT, capture_output=True, text=True,
                          timeout=900, check=False)


def test_killed_while_a_study_runs_its_children_die_and_a_rerun_finishes(
        tmp_path: Path) -> None:
    seed_user_files(tmp_path, USER_FILES)
    runs = tmp_path / "runs"
    with subprocess.Popen(_command(0, runs), cwd=ROOT, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL) as parent:
        deadline = time.monotonic() + 300
        while not [p for p in live_writers(runs, 0) if p != parent.pid]:
            assert parent.poll() is None, "reproduce-all ended before its study started"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=60)
    assert live_writers(runs, 1.5) == []  # at once, not when the study ends
    assert changed_user_files(tmp_path, USER_FILES) == []
    rerun = _finish(runs)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert DONE in rerun.stdout
    assert changed_user_files(tmp_path, USER_FILES) == []


def test_killed_at_its_own_writes_it_leaves_no_writer_and_a_rerun_finishes(
        tmp_path: Path) -> None:
    done = tmp_path / "done"
    whole = _finish(done / "runs")
    assert whole.returncode == 0, whole.stderr[-3000:]
    writes = int(whole.stderr.rsplit("kill_at: ", 1)[1].split()[0])
    assert writes >= 20
    moments = range(1, writes + 1, 4) if EVERY == 1 else [writes // 2]
    for kill_at in moments:
        folder = tmp_path / f"k{kill_at}"
        folder.mkdir()
        seed_user_files(folder, USER_FILES)
        proc = subprocess.run(_command(kill_at, folder / "runs"), cwd=ROOT,
                              capture_output=True, text=True, timeout=900, check=False)
        assert proc.returncode == -signal.SIGKILL, (kill_at, proc.stderr[-2000:])
        assert live_writers(folder / "runs", 1.5) == [], kill_at
        assert changed_user_files(folder, USER_FILES) == [], kill_at
        rerun = _finish(folder / "runs")
        assert rerun.returncode == 0, (kill_at, rerun.stderr[-3000:])
        assert DONE in rerun.stdout, kill_at
        assert changed_user_files(folder, USER_FILES) == [], kill_at
