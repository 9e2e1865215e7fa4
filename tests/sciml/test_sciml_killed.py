"""The kill harness (``tests/kill_at.py``) on ``python -m kit sciml --small --run R``: R is
made inside a folder of the user's that holds files named like the kit's own. SIGKILLed at
its middle write (at every eighth in ``nox -s hardening``), it leaves no process writing
into R, every user file keeps its bytes and mode, and the next run finishes with the
records of an uninterrupted one (their wall times aside)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from kit.paths import ROOT
from tests.kill_at import changed_user_files, live_writers, seed_user_files

EVERY = int(os.environ.get("KIT_KILL_EVERY", "0"))
USER_FILES = {".x.tmp": 0o600, "ledger.json": 0o640, "notes/mine.txt": 0o600}
RECORDS = ("ledger.json", "fno.json", "pinn.json")


def sciml_killed_at(kill_at: int, run: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tests.kill_at", str(kill_at), "sciml",
                           "--small", "--run", str(run)], cwd=ROOT, capture_output=True,
                          text=True, timeout=1800, check=False)


def records(run: Path) -> dict[str, Any]:
    """The run's records without what a clock or a path writes into them."""
    found = {}
    for name in RECORDS:
        record = json.loads((run / name).read_text())
        found[name] = _without_times(record)
    return found


def _without_times(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items()
                if not (k.endswith(("_s", "seconds")) or k in ("wall", "started", "finished"))}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def test_sciml_killed_at_its_writes_keeps_the_users_files(tmp_path: Path) -> None:
    done = tmp_path / "done"
    whole = sciml_killed_at(0, done / "run")
    assert whole.returncode == 0, whole.stderr[-3000:]
    writes = int(whole.stderr.rsplit("kill_at: ", 1)[1].split()[0])
    assert writes >= 20
    expected = records(done / "run")
    moments = range(1, writes + 1, 8) if EVERY == 1 else [writes // 2]
    for kill_at in moments:
        folder = tmp_path / f"k{kill_at}"
        folder.mkdir()
        seed_user_files(folder, USER_FILES)
        killed = sciml_killed_at(kill_at, folder / "run")
        assert killed.returncode == -signal.SIGKILL, (kill_at, killed.stderr[-2000:])
        assert live_writers(folder, 1.5) == [], kill_at
        assert changed_user_files(folder, USER_FILES) == [], kill_at
        again = sciml_killed_at(0, folder / "run")
        assert again.returncode == 0, (kill_at, again.stderr[-3000:])
        assert records(folder / "run") == expected, kill_at
        assert changed_user_files(folder, USER_FILES) == [], kill_at
