"""A non-editable build of the kit holds every package and the data files it reads, and,
installed into a fresh virtual environment, verifies the checkout it is pointed at
(``KIT_ROOT``; kit.paths)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from kit.paths import ROOT


def build_wheel(tmp_path: Path) -> Path:
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
    return wheel


def test_the_wheel_holds_every_module_and_data_file_of_the_kit(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    source = tmp_path / "src"
    held = {name for name in zipfile.ZipFile(wheel).namelist() if name.startswith("kit/")}
    wanted = {p.relative_to(source).as_posix() for p in (source / "kit").rglob("*")
              if p.is_file()}
    assert wanted - held == set()
    assert {"kit/drift/stages/fetch.py", "kit/sciml/gate.py", "kit/runtime/runtimes.toml",
            "kit/protocols/drift.yaml", "kit/sciml/cards/fno-periodic-translation.yaml"} <= held


def test_the_installed_wheel_verifies_the_checkout(tmp_path: Path) -> None:
    """The wheel installed (not editable) into a new venv, run from outside the checkout:
    its kit is the installed one and ``kit verify`` passes on the checkout's claims. The
    venv reaches the locked dependencies through a path entry to the test environment's
    site-packages (whose editable kit finder a path entry does not run)."""
    import sysconfig

    wheel = build_wheel(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; "
                                "print(sysconfig.get_paths()['purelib'])"], check=True,
                               capture_output=True, text=True).stdout.strip())
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet",
                    "--target", str(site), str(wheel)], check=True, timeout=300)
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {"PATH": "/usr/bin:/bin", "KIT_ROOT": str(ROOT), "HOME": str(tmp_path)}
    where = subprocess.run([str(python), "-c", "import kit; print(kit.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert where.stdout.startswith(str(site))
    proc = subprocess.run([str(python), "-m", "kit", "verify"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.rstrip().endswith("OK")
