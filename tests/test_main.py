"""The command line's one error boundary: a path the user gives that the operating system
refuses (too long, a folder where a file goes, a file where a folder goes) is a
``kit: error`` naming it, exit 2, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kit.paths import ROOT


def kit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kit", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, check=False)


def refused(proc: subprocess.CompletedProcess[str], path: Path | str) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    [line] = [x for x in proc.stderr.splitlines() if x.startswith("kit: error: ")]
    assert str(path) in line
    return line


def test_verify_outputs_under_a_file_onto_a_folder_or_too_long(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("mine\n")
    line = refused(kit("verify", "--json", str(blocker / "out.json")), blocker)
    assert "is a file where a folder is needed" in line
    folder = tmp_path / "a-folder"
    folder.mkdir()
    (folder / "kept.txt").write_text("mine\n")
    refused(kit("verify", "--page", str(folder)), folder)
    assert (folder / "kept.txt").read_text() == "mine\n"
    long = tmp_path / ("x" * 260 + ".json")
    assert "too long" in refused(kit("verify", "--json", str(long)), "x" * 200)
    assert blocker.read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "a-folder"]


def test_a_run_folder_or_model_name_too_long(tmp_path: Path) -> None:
    long = tmp_path / ("r" * 300)
    assert "too long" in refused(kit("stage", "split", "--run", str(long)), long)
    inputs = tmp_path / "in.npz"
    inputs.write_bytes(b"")
    proc = kit("run", "--runtime", "ref", "--model", str(long), "--inputs", str(inputs),
               "--output", str(tmp_path / "out.npz"), "--backend", "venv")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("kit: error: ")
    assert "r" * 250 in proc.stderr
    assert not (tmp_path / "out.npz").exists()
