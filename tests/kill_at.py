"""The kill harness's driver: run one kit command and SIGKILL it at its K-th write.

    python tests/kill_at.py K COMMAND ARGS...   (K = 0: never; prints the count at exit)

Every primitive that changes the file system (``open`` or ``os.open`` for writing, ``os.replace``,
``os.rename``, ``os.link``, ``os.unlink``, ``os.rmdir``, ``os.mkdir``, ``os.chmod``) counts
one; at the K-th the process sends itself SIGKILL before the call runs, so no ``finally``
and no handler runs, as when a user or the OOM killer stops it. K swept from 1 to the
count of an uninterrupted run kills the command at every moment it writes.
"""

from __future__ import annotations

import builtins
import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def arm(kill_at: int) -> list[int]:
    """Wrap the primitives; returns the counter (one element)."""
    count = [0]

    def counted(name: str, writes: Callable[..., bool]) -> None:
        real = getattr(os, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if writes(*args, **kwargs):
                count[0] += 1
                if count[0] == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)

        setattr(os, name, wrapper)

    always: Callable[..., bool] = lambda *args, **kwargs: True  # noqa: E731
    counted("open", lambda path, flags, *args, **kwargs: bool(flags & WRITES))
    for name in ("replace", "rename", "link", "unlink", "rmdir", "mkdir", "chmod"):
        counted(name, always)
    real_open = io.open

    def opened(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if any(c in mode for c in "wax+"):
            count[0] += 1
            if count[0] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
        return real_open(file, mode, *args, **kwargs)

    io.open = builtins.open = opened  # type: ignore[assignment]
    return count


def seed_user_files(folder: Path, user_files: dict[str, int]) -> None:
    """Write the user's files the harness must find intact (name -> mode), each holding
    "the user's NAME"; their folders get mode 0700."""
    for name, mode in user_files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(f"the user's {name}")
        os.chmod(folder / name, mode)
    for name in user_files:
        if "/" in name:
            os.chmod((folder / name).parent, 0o700)


def changed_user_files(folder: Path, user_files: dict[str, int]) -> list[str]:
    """The user's files (as ``seed_user_files`` wrote them) whose bytes or mode changed,
    or that are gone."""
    return [name for name, mode in user_files.items()
            if not (folder / name).is_file()
            or (folder / name).read_text() != f"the user's {name}"
            or (folder / name).stat().st_mode & 0o7777 != mode]


def running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def live_writers(folder: Path, seconds: float) -> list[int]:
    """The pids of the running processes whose command line names ``folder``, once none
    is left or ``seconds`` have passed: a killed command's children must not go on
    writing there."""
    deadline = time.monotonic() + seconds
    while True:
        found = []
        for entry in Path("/proc").iterdir():
            try:
                line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if entry.name.isdigit() and str(folder) in line and running(int(entry.name)):
                found.append(int(entry.name))
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.1)


USER_FILES = {".x.tmp": 0o600, "state.json": 0o640, "notes/mine.txt": 0o600}
TIMED = {"cpu.json", "timings.json"}  # how long a run took: never the same twice


def run_at(kill_at: int, args: list[str], runs: Path) -> subprocess.CompletedProcess[str]:
    """``python -m kit ARGS --run RUNS`` under the harness, killed at write ``kill_at``."""
    from kit.paths import ROOT

    return subprocess.run([sys.executable, "-m", "tests.kill_at", str(kill_at), *args,
                           "--run", str(runs)], cwd=ROOT, capture_output=True, text=True,
                          timeout=900, check=False)


def run_files(runs: Path) -> dict[str, bytes]:
    """Every file of a run folder and its bytes, the time records and the lock apart."""
    return {p.relative_to(runs).as_posix(): p.read_bytes() for p in sorted(runs.rglob("*"))
            if p.is_file() and p.name not in TIMED and p.name != ".lock"}


def kill_and_rerun(args: list[str], tmp: Path, step: int) -> list[int]:
    """An uninterrupted run of ``python -m kit ARGS --run``, then, at every ``step``-th of
    its writes (``step`` 0: the middle one only), a run killed there beside the user's
    files, and a rerun into the same folder: no process is left writing there, the user's
    files keep their bytes and mode, and the rerun gives every file of the uninterrupted
    run byte for byte. Returns the moments killed at."""
    whole = run_at(0, args, tmp / "whole")
    assert whole.returncode == 0, whole.stderr[-3000:]
    writes = int(whole.stderr.rsplit("kill_at: ", 1)[1].split()[0])
    assert writes >= 50
    expected = run_files(tmp / "whole")
    moments = list(range(1, writes + 1, step)) if step else [writes // 2]
    for kill_at in moments:
        folder = tmp / f"k{kill_at}"
        folder.mkdir()
        seed_user_files(folder, USER_FILES)
        proc = run_at(kill_at, args, folder / "runs")
        assert proc.returncode == -signal.SIGKILL, (kill_at, proc.stderr[-2000:])
        assert live_writers(folder / "runs", 1.5) == [], kill_at
        assert changed_user_files(folder, USER_FILES) == [], kill_at
        rerun = run_at(0, args, folder / "runs")
        assert rerun.returncode == 0, (kill_at, rerun.stderr[-3000:])
        found = run_files(folder / "runs")
        assert sorted(found) == sorted(expected), (
            kill_at, "only the rerun:", sorted(set(found) - set(expected)),
            "only the uninterrupted run:", sorted(set(expected) - set(found)), rerun.stderr[-1500:])
        assert [name for name in expected if found[name] != expected[name]] == [], kill_at
        assert changed_user_files(folder, USER_FILES) == [], kill_at
    return moments


def main() -> int:
    kill_at = int(sys.argv[1])
    count = arm(kill_at)
    from kit.__main__ import main as kit_main

    try:
        return kit_main(sys.argv[2:])
    finally:
        print(f"kill_at: {count[0]} writes", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
