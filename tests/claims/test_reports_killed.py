"""The kill harness (``tests/kill_at.py``) on ``kit reports --out D`` (``kit.owned``'s
publish): SIGKILLed at its K-th write into a new folder and into one an earlier run wrote
that also holds the user's files (named like the kit's own: ``.x.tmp``, ``audit.json``,
a ``notes`` folder of mode 0700). The next run always succeeds (a first publish killed
half way leaves files its intent mark accounts for, never a folder it then refuses), the
folder's files are byte-identical to an uninterrupted run's, and every user file keeps
its bytes and mode; while a killed first publish shows ``index.html`` (it moves last),
every report is there. Default tests: one moment of a first publish into a new folder;
``nox -s hardening``: both starts, every eighth write of the publish and a spread before
it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kit.owned import MARK
from kit.paths import ROOT

EVERY = int(os.environ.get("KIT_KILL_EVERY", "4"))
VERIFY_PYTHON = ROOT / ".venv-verify" / "bin" / "python"
USER_FILES = {".x.tmp": 0o600, "audit.json": 0o640, "notes/mine.txt": 0o600}


def reports_killed_at(kill_at: int, out: Path) -> subprocess.CompletedProcess[str]:
    python = VERIFY_PYTHON if VERIFY_PYTHON.exists() else Path(sys.executable)
    return subprocess.run([str(python), "-m", "tests.kill_at", str(kill_at), "reports",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    out = tmp_path_factory.mktemp("reports") / "out"
    proc = reports_killed_at(0, out)
    assert proc.returncode == 0, proc.stderr
    return out, int(proc.stderr.rsplit("kill_at: ", 1)[1].split()[0])


def points(writes: int) -> list[int]:
    if EVERY == 1:  # the publish at every eighth write, and a spread before it
        return sorted({*range(writes - 150, writes + 1, 8), *range(1, writes, 40)})
    return [writes - 30]


# The default tests kill a first publish (where a mark is missing); nox -s hardening both.
STARTS = ["new", "written before"] if EVERY == 1 else ["new"]


@pytest.mark.parametrize("start", STARTS)
def test_reports_killed_at_any_write_finish_on_the_next_run(
        reference: tuple[Path, int], tmp_path: Path, start: str) -> None:
    done, writes = reference
    for kill_at in points(writes):
        out = tmp_path / f"k{kill_at}" / "out"
        if start == "written before":
            shutil.copytree(done, out)
            for name, mode in USER_FILES.items():
                (out / name).parent.mkdir(parents=True, exist_ok=True)
                (out / name).write_text(f"the user's {name}")
                os.chmod(out / name, mode)
            os.chmod(out / "notes", 0o700)
        killed = reports_killed_at(kill_at, out)
        assert killed.returncode == -9, (kill_at, killed.stderr[-500:])
        if (out / "index.html").exists() and start == "new":  # the index moves last
            assert {k: v for k, v in files(out).items() if k != MARK} == \
                {k: v for k, v in files(done).items() if k != MARK}, kill_at
        again = reports_killed_at(0, out)
        assert again.returncode == 0, (kill_at, again.stderr[-500:])
        found = files(out)
        for name, mode in (USER_FILES.items() if start == "written before" else ()):
            assert found.pop(name) == f"the user's {name}".encode(), (kill_at, name)
            assert (out / name).stat().st_mode & 0o7777 == mode
        if start == "written before":
            assert (out / "notes").stat().st_mode & 0o7777 == 0o700
        assert found == files(done), kill_at
        shutil.rmtree(out.parent)
