"""The interpreter verify runs in (``kit.claims.installed``): its distributions are a
lock's, name and version; every file of a distribution whose code verify loaded has the
hash its installer recorded; a module from a file no installer recorded, and a ``.pth``
that runs code and that no installer recorded, are named; the command line runs it all."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as metadata
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from kit.claims import boot, installed
from kit.paths import ROOT


def _hash(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def fake_distribution(site: Path, name: str = "toy", version: str = "1.0") -> Path:
    """An installed distribution as pip leaves one: a module and a RECORD of its hash."""
    package = site / name
    package.mkdir(parents=True)
    code = b"VALUE = 1\n"
    (package / "__init__.py").write_bytes(code)
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text(f"{name}/__init__.py,sha256={_hash(code)},{len(code)}\n"
                                 f"{info.name}/METADATA,,\n{info.name}/RECORD,,\n")
    return info


def test_this_environment_is_one_of_the_kits_locks() -> None:
    dists = installed.installed()
    assert installed.lock_problems(ROOT / "locks", dists) == []
    assert {"numpy", "kit"} <= set(dists)


def test_a_version_the_lock_does_not_pin_is_named(tmp_path: Path) -> None:
    dists = dict(installed.installed())
    dists["numpy"] = metadata.PathDistribution(fake_distribution(tmp_path, "numpy", "0.0.1"))
    dists["toy"] = metadata.PathDistribution(fake_distribution(tmp_path / "b", "toy"))
    [problem] = installed.lock_problems(ROOT / "locks", dists)
    assert "the interpreter's installed distributions are not the lock's" in problem
    assert "numpy 0.0.1 (the lock pins " in problem
    assert "toy 1.0 (the lock pins nothing)" in problem


def test_an_edited_file_of_a_distribution_is_named(tmp_path: Path) -> None:
    dist = metadata.PathDistribution(fake_distribution(tmp_path))
    assert installed.file_problems({"toy": dist}, {"toy"}) == []
    (tmp_path / "toy" / "__init__.py").write_text("VALUE = 2\n")
    [problem] = installed.file_problems({"toy": dist}, {"toy"})
    assert problem.startswith(f"{tmp_path / 'toy' / '__init__.py'}: its bytes are not the ones")
    (tmp_path / "toy" / "__init__.py").unlink()
    [problem] = installed.file_problems({"toy": dist}, {"toy"})
    assert "recorded by its installer but unreadable" in problem


def test_a_module_from_a_file_no_installer_recorded_is_named(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    dist = metadata.PathDistribution(fake_distribution(tmp_path / "site"))
    files = installed.recorded_files({"toy": dist})
    recorded = types.ModuleType("toy")
    recorded.__file__ = str(tmp_path / "site" / "toy" / "__init__.py")
    stray = types.ModuleType("planted")
    stray.__file__ = str(tmp_path / "elsewhere" / "planted.py")
    monkeypatch.setattr(sys, "modules", {"toy": recorded, "planted": stray, "json": sys.modules[
        "json"]})
    names, problems = installed.loaded(files, set())
    assert names == {"toy"}  # the standard library's json is the interpreter's
    assert problems == [f"{tmp_path / 'elsewhere' / 'planted.py'}: the module planted ran "
                        "inside verify from a file no installed distribution records"]


def test_a_pth_that_runs_code_is_named_unless_recorded(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    site = tmp_path / "site"
    info = fake_distribution(site)
    monkeypatch.setattr(boot, "site_folders", lambda: [str(site)])
    monkeypatch.setattr(installed.site, "ENABLE_USER_SITE", False)
    (site / "folders.pth").write_text(f"{tmp_path}\n")  # a path runs nothing
    (site / "hook.pth").write_text("import os; os.environ['X'] = '1'\n")
    files = installed.recorded_files({"toy": metadata.PathDistribution(info)})
    [problem] = installed.pth_problems(files)
    assert problem.startswith(f"{site / 'hook.pth'}: a .pth file that runs code")
    data = (site / "hook.pth").read_bytes()
    with (info / "RECORD").open("a") as record:
        record.write(f"hook.pth,sha256={_hash(data)},{len(data)}\n")
    files = installed.recorded_files({"toy": metadata.PathDistribution(info)})
    assert installed.pth_problems(files) == []
    (site / "hook.pth").write_text("import os; os.environ['X'] = '2'\n")
    assert len(installed.pth_problems(files)) == 1


def test_the_command_line_checks_the_interpreter(tmp_path: Path) -> None:
    """A venv on the test environment's interpreter whose distributions are not a lock's
    (its site folder holds the kit's files and one extra distribution): verify names it."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages",
                    str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; "
                                "print(sysconfig.get_paths()['purelib'])"], check=True,
                               capture_output=True, text=True).stdout.strip())
    fake_distribution(site)
    (site / "deps.pth").write_text(f"{ROOT}\n" + "\n".join(
        p for p in sys.path if p.endswith("site-packages")) + "\n")
    shutil.rmtree(site / "toy")  # the record stays: an installed distribution, files gone
    proc = subprocess.run([str(python), "-m", "kit", "verify", "--page",
                           str(tmp_path / "page.html")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "toy 1.0 (the lock pins nothing)" in proc.stderr
    assert "; FAILED because " in proc.stdout.rstrip().splitlines()[-1]
