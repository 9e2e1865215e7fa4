"""The kill harness (``tests/kill_at.py``) on ``verify --json F --page P`` into a folder of
the user's that holds files named like the kit's own (``.x.tmp``, ``index.html``,
``verify.json.tmp``, a ``notes`` folder of mode 0700). SIGKILLed at its writes (one moment in
the default tests, every one in ``nox -s hardening``), it leaves F and P absent or whole, the
next run writes a report byte-identical to an uninterrupted run's and the same page, and
every user file keeps its bytes and mode. verify names the harness itself (code from a file no
installed distribution records ran inside it) and fails for that alone, every run alike."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kit.paths import ROOT
from tests.kill_at import changed_user_files, seed_user_files

EVERY = int(os.environ.get("KIT_KILL_EVERY", "4"))
VERIFY_PYTHON = ROOT / ".venv-verify" / "bin" / "python"
USER_FILES = {".x.tmp": 0o600, "index.html": 0o644, "verify.json.tmp": 0o640,
              "notes/mine.txt": 0o600}


def verify_killed_at(kill_at: int, folder: Path) -> subprocess.CompletedProcess[str]:
    python = VERIFY_PYTHON if VERIFY_PYTHON.exists() else Path(sys.executable)
    return subprocess.run([str(python), "-m", "tests.kill_at", str(kill_at), "verify",
                           "--json", str(folder / "verify.json"),
                           "--page", str(folder / "claims.html")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_verify_killed_at_its_writes_keeps_the_users_files_and_finishes_next_time(
        tmp_path: Path) -> None:
    done = tmp_path / "done"
    done.mkdir()
    proc = verify_killed_at(0, done)
    assert proc.returncode == 1, proc.stderr[-500:]
    problems = json.loads((done / "verify.json").read_bytes())["problems"]
    assert problems, "verify did not see the harness's code"
    assert all(p.startswith(f"{ROOT / 'tests' / 'kill_at.py'}: the module ") for p in problems)
    writes = int(proc.stderr.rsplit("kill_at: ", 1)[1].split()[0])
    report = (done / "verify.json").read_bytes()
    page = (done / "claims.html").read_bytes()
    moments = range(1, writes + 1) if EVERY == 1 else [writes // 2]
    for kill_at in moments:
        folder = tmp_path / f"k{kill_at}"
        folder.mkdir()
        seed_user_files(folder, USER_FILES)
        killed = verify_killed_at(kill_at, folder)
        assert killed.returncode == -9, (kill_at, killed.stderr[-500:])
        if (folder / "verify.json").exists():  # whole or absent
            assert json.loads((folder / "verify.json").read_bytes())["problems"] == problems
        again = verify_killed_at(0, folder)
        assert again.returncode == 1, (kill_at, again.stderr[-500:])
        assert (folder / "verify.json").read_bytes() == report, kill_at
        assert (folder / "claims.html").read_bytes() == page, kill_at
        assert changed_user_files(folder, USER_FILES) == [], kill_at
        assert (folder / "notes").stat().st_mode & 0o7777 == 0o700
        leftovers = sorted(p.name for p in folder.iterdir())
        assert leftovers == sorted(["claims.html", "verify.json", "notes", *(
            n for n in USER_FILES if "/" not in n)]), (kill_at, leftovers)
