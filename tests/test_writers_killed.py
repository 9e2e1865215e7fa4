"""The kill harness (``tests/kill_at.py``) on three writing commands it had not reached:
``sciml-report --out D`` (``kit.owned``'s publish), ``polygraphy --out FILE``
(``kit.owned.write_named_file``, as ``verify --json``, whose harness is
``tests/claims/test_verify_killed.py``) and ``verify --evidence DIR --page FILE`` (the
replay record in DIR and the page). Each runs into a folder of the
user's that holds files named like the kit's own (``.x.tmp``, ``index.html``,
``audit.json``, a ``notes`` folder of mode 0700; for ``verify --evidence`` its evidence
folder holds them too), is SIGKILLed at its K-th write, then run
again: every user file keeps its bytes and mode, the rerun succeeds, and the folder then
holds what an uninterrupted run writes. Default tests: the middle write of each;
``nox -s hardening``: every write of ``polygraphy --out`` and ``verify --evidence`` and
every fourth of ``sciml-report`` (131 writes, most of them its figures and pages)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kit.owned import MARK
from kit.paths import ROOT
from kit.runfolder import Run
from tests.kill_at import changed_user_files, live_writers, seed_user_files

EVERY = int(os.environ.get("KIT_KILL_EVERY", "4"))
USER_FILES = {".x.tmp": 0o600, "index.html": 0o644, "audit.json": 0o640,
              "notes/mine.txt": 0o600}
SCIML = ROOT / "claims" / "sciml" / "evidence" / "kit"
CORPUS = ROOT / "claims" / "corpus" / "evidence" / "kit"
STRIDE = {"sciml-report": 4, "polygraphy --out": 1, "verify --evidence": 1}  # hardening's


def killed_at(kill_at: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tests.kill_at", str(kill_at), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


def files(folder: Path) -> dict[str, bytes]:
    """Every file but the user's and the mark (which records the folder's own path)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.relative_to(folder).as_posix().removeprefix("fresh/")
            not in USER_FILES and p.name != MARK}


def commands(folder: Path, run: Path) -> dict[str, list[str]]:
    return {"sciml-report": ["sciml-report", "--evidence", str(SCIML), "--out",
                             str(folder / "report")],
            "polygraphy --out": ["polygraphy", "--run", str(run), "--out",
                                 str(folder / "p.json")],
            "verify --evidence": ["verify", "--evidence", str(folder / "fresh"), "--page",
                                  str(folder / "replay" / "index.html")]}


def changed(command: str, folder: Path) -> list[str]:
    """The user's files ``prepare`` seeded whose bytes or mode changed, or that are gone."""
    fresh = changed_user_files(folder / "fresh", USER_FILES) \
        if command == "verify --evidence" else []
    return changed_user_files(folder, USER_FILES) + [f"fresh/{name}" for name in fresh]


def prepare(command: str, folder: Path) -> None:
    """The user's files in ``folder`` (and, for ``verify --evidence``, in the fresh folder
    beside the corpus evidence shipped into it)."""
    seed_user_files(folder, USER_FILES)
    if command == "verify --evidence":
        shutil.copytree(CORPUS, folder / "fresh" / "claims" / "corpus" / "evidence"
                        / "kit")
        seed_user_files(folder / "fresh", USER_FILES)


def same(found: dict[str, bytes], folder: Path, expected: dict[str, bytes], done: Path
         ) -> bool:
    """The rerun's files against the uninterrupted run's (a record may name its own path)."""
    return {k: v.replace(str(folder).encode(), str(done).encode())
            for k, v in found.items()} == expected


@pytest.mark.parametrize("command", ["sciml-report", "polygraphy --out", "verify --evidence"])
def test_a_writer_killed_at_its_writes_keeps_the_users_files_and_finishes_next_time(
        command: str, tiny_run: tuple[Run, Path], tmp_path: Path) -> None:
    run = tiny_run[0].root
    done = tmp_path / "done"
    done.mkdir()
    prepare(command, done)
    proc = killed_at(0, *commands(done, run)[command])
    assert proc.returncode == 0, proc.stderr[-2000:]
    writes = int(proc.stderr.rsplit("kill_at: ", 1)[1].split()[0])
    assert writes >= 2
    expected = files(done)
    moments = range(1, writes + 1, STRIDE[command]) if EVERY == 1 else [max(1, writes // 2)]
    for kill_at in moments:
        folder = tmp_path / f"k{kill_at}"
        folder.mkdir()
        prepare(command, folder)
        killed = killed_at(kill_at, *commands(folder, run)[command])
        assert killed.returncode == -9, (kill_at, killed.stderr[-500:])
        assert changed(command, folder) == [], kill_at
        assert live_writers(folder, 1.5) == [], kill_at
        again = killed_at(0, *commands(folder, run)[command])
        assert again.returncode == 0, (kill_at, again.stderr[-800:])
        assert changed(command, folder) == [], kill_at
        assert (folder / "notes").stat().st_mode & 0o7777 == 0o700
        assert same(files(folder), folder, expected, done), kill_at
        shutil.rmtree(folder)
