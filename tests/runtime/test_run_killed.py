"""The kill harness (``tests/kill_at.py``) on ``kit run``: one exchange writing its output
into a folder of the user's that holds files named like the kit's own (``.x.tmp``,
``out.npz.tmp``, ``index.html``, a ``notes`` folder of mode 0700). SIGKILLed at each of its
writes in turn (every one in ``nox -s hardening``, a spread in the default tests), it leaves
no output that looks valid (an output is there whole, with its record, or not at all); the
next run gives bytes identical to an uninterrupted run's, and every user file keeps its
bytes and mode."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from kit.files import load_npz
from kit.paths import ROOT
from kit.runtime.worker import meta_path
from tests.kill_at import changed_user_files, seed_user_files

EVERY = int(os.environ.get("KIT_KILL_EVERY", "4"))
USER_FILES = {".x.tmp": 0o600, "out.npz.tmp": 0o640, "index.html": 0o644,
              "notes/mine.txt": 0o600}


def run_killed_at(kill_at: int, workdir: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tests.kill_at", str(kill_at), "run",
                           "--runtime", "ref", "--backend", "venv",
                           "--model", str(workdir / "in" / "convnet.onnx"),
                           "--inputs", str(workdir / "in" / "images.npz"),
                           "--output", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_kit_run_killed_at_its_writes_leaves_the_users_files_and_finishes_next_time(
        workdir: Path, tmp_path: Path) -> None:
    done = tmp_path / "done"
    done.mkdir()
    seed_user_files(done, USER_FILES)
    proc = run_killed_at(0, workdir, done / "out.npz")
    assert proc.returncode == 0, proc.stderr
    writes = int(proc.stderr.rsplit("kill_at: ", 1)[1].split()[0])
    assert writes >= 3
    expected = files(done)
    moments = range(1, writes + 1) if EVERY == 1 else sorted({1, writes // 2, writes})
    for kill_at in moments:
        folder = tmp_path / f"k{kill_at}"
        folder.mkdir()
        seed_user_files(folder, USER_FILES)
        out = folder / "out.npz"
        killed = run_killed_at(kill_at, workdir, out)
        assert killed.returncode == -9, (kill_at, killed.stderr[-500:])
        if out.exists():  # whole, with its record, or absent
            assert sorted(load_npz(out)) == ["logits"], kill_at
            assert meta_path(out).is_file(), kill_at
        assert changed_user_files(folder, USER_FILES) == [], kill_at
        again = run_killed_at(0, workdir, out)
        assert again.returncode == 0, (kill_at, again.stderr[-500:])
        found = {name: data.replace(str(folder).encode(), str(done).encode())
                 for name, data in files(folder).items()}  # the record names its output
        assert found == expected, kill_at
        assert (folder / "notes").stat().st_mode & 0o7777 == 0o700
        shutil.rmtree(folder)



def test_a_changed_mode_a_changed_byte_and_a_missing_file_are_each_named(
        tmp_path: Path) -> None:
    seed_user_files(tmp_path, USER_FILES)
    assert changed_user_files(tmp_path, USER_FILES) == []
    os.chmod(tmp_path / ".x.tmp", 0o644)
    (tmp_path / "index.html").write_text("the kit's page")
    (tmp_path / "notes" / "mine.txt").unlink()
    assert changed_user_files(tmp_path, USER_FILES) == [".x.tmp", "index.html",
                                                         "notes/mine.txt"]
