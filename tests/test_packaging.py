"""A non-editable build of the kit holds every package and the data files it reads."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from kit.paths import ROOT


def test_the_wheel_holds_every_module_and_data_file_of_the_kit(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copyfile(ROOT / name, source / name)
    shutil.copytree(ROOT / "kit", source / "kit",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "--no-build-isolation", "--quiet", str(source), "-w",
                           str(tmp_path / "wheel")], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = (tmp_path / "wheel").glob("kit-*.whl")
    held = {name for name in zipfile.ZipFile(wheel).namelist() if name.startswith("kit/")}
    wanted = {p.relative_to(source).as_posix() for p in (source / "kit").rglob("*")
              if p.is_file()}
    assert wanted - held == set()
    assert {"kit/drift/stages/fetch.py", "kit/sciml/gate.py", "kit/runtime/runtimes.toml",
            "kit/protocols/drift.yaml", "kit/sciml/cards/fno-periodic-translation.yaml"} <= held
