"""Everything that runs inside verify is under the root (``kit.claims.isolation`` and
``kit.claims.coverage.code_files``): every kit module verify loads is a file the code root
hashes, so an edit of any of them changes the combined root; a start-up variable or hook
that runs other code is refused by name; a kit module loaded from anywhere else is named;
the second start (``kit.claims.boot``) runs no ``.pth`` file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from kit.claims.coverage import code_files, roots
from kit.claims.isolation import environment, loaded_outside
from kit.paths import ROOT

LOADED = ("import sys, json, kit.__main__ as m; code = m.main(['verify', '--page', sys.argv[1]]);"
          " print(json.dumps({n: getattr(x, '__file__', None) for n, x in sys.modules.items()"
          " if n == 'kit' or n.startswith('kit.')}))")


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    return {**env, **extra}


def test_every_kit_module_verify_loads_is_one_the_code_root_hashes(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", LOADED, str(tmp_path / "page.html")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env=_clean_env(), check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded = json.loads(proc.stdout.splitlines()[-1])
    assert len(loaded) > 40  # the checks, the ledgers, every study's recompute, the page
    hashed = {path.resolve() for path in code_files().values()}
    outside = [name for name, where in loaded.items()
               if where is None or Path(where).resolve() not in hashed]
    assert outside == []


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for name in ("claims", "manifests", "locks", "kit"):
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def test_three_lines_in_a_module_of_the_command_line_change_the_root(copy: Path) -> None:
    """The attack the root missed: a module the command line imports (not the checks)
    rebinds a comparison of the rules; the combined root now moves with it."""
    published = roots(ROOT)["combined"]
    steps = copy / "kit" / "reproduce" / "steps.py"
    steps.write_text(steps.read_text() + "\nimport kit.claims.rules as _r\n"
                     "_r.__dict__.setdefault('_edited', True)\n")
    proc = subprocess.run([sys.executable, "-m", "kit", "verify", "--expect-root", published,
                           "--page", str(copy / "page.html")], cwd=copy, capture_output=True,
                          text=True, timeout=600, env=_clean_env(), check=False)
    assert proc.returncode == 1
    assert f"differs from the expected {published}" in proc.stderr


@pytest.mark.parametrize("config", ["runtime/runtimes.toml", "runtime/releases.toml",
                                    "reproduce/costs.toml"])
def test_an_edit_of_a_configuration_the_code_reads_changes_the_code_root(copy: Path,
                                                                         config: str) -> None:
    """``runtimes.toml`` decides which sweep rows verify recounts against the drift
    evidence: one line there switched that recount off under the published root."""
    from kit.claims.coverage import code_digest

    before = code_digest(copy, copy / "kit")
    assert before == code_digest(ROOT)
    path = copy / "kit" / config
    path.write_text(path.read_text() + "\n# edited\n")
    assert code_digest(copy, copy / "kit") != before


def test_a_sitecustomize_on_pythonpath_is_refused_by_name(tmp_path: Path) -> None:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import numpy\n_p = numpy.percentile\n"
        "numpy.percentile = lambda a, q, *k, **w: _p(a, q, *k, **w) * 1.01\n")
    proc = subprocess.run([sys.executable, "-m", "kit", "verify", "--page",
                           str(tmp_path / "page.html")], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env=_clean_env(PYTHONPATH=str(hook)),
                          check=False)
    assert proc.returncode == 1
    assert f"PYTHONPATH={str(hook)!r} is set" in proc.stderr
    # the isolated second start ignores PYTHONPATH: the hook never ran where verify computed
    assert "a sitecustomize module ran" not in proc.stderr
    assert "; FAILED because " in proc.stdout.rstrip().splitlines()[-1]


def test_verify_runs_itself_again_isolated_so_a_shadow_module_never_runs(
        tmp_path: Path) -> None:
    """A module of the current folder named like the standard library's (``bz2``, which
    reading an .npz imports) that puts the real one back after it ran: the isolated second
    start (``kit.__main__.reexec``) never imports it."""
    (tmp_path / "bz2.py").write_text(
        "import pathlib, sys, sysconfig, importlib.util\n"
        f"pathlib.Path({str(tmp_path / 'ran')!r}).write_text('the shadow ran')\n"
        "spec = importlib.util.spec_from_file_location('bz2', "
        "sysconfig.get_paths()['stdlib'] + '/bz2.py')\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "sys.modules['bz2'] = module\n"
        "spec.loader.exec_module(module)\n")
    proc = subprocess.run([sys.executable, "-m", "kit", "verify", "--claim", "A-052"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env=_clean_env(), check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not (tmp_path / "ran").exists()


def test_the_first_start_imports_no_kit_module_but_the_package() -> None:
    """``-X importtime`` lists every import of the first start (the second is started
    without it): of the kit, only the package, whose ``__init__`` and ``__main__`` run
    (``kit.__main__.reexec`` comes before the command line's imports); it had imported
    ``kit.cli``, ``kit.errors``, ``kit.procs``, ``kit.claims`` and
    ``kit.claims.isolation`` too, each a file whose compiled cache ran unchecked there."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "kit", "verify",
                           "--claim", "A-052"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env=_clean_env(), check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
                if line.startswith("import time:") and "|" in line}
    assert "numpy" not in imported  # the second start computed, silently
    assert {name for name in imported if name.split(".")[0] == "kit"} == {"kit"}


def test_a_compiled_cache_python_runs_unread_is_named(tmp_path: Path) -> None:
    """Only an unchecked hash-based ``.pyc`` is named: Python checks the other two kinds
    against their source."""
    import py_compile

    from kit.claims.isolation import unchecked_caches

    package = tmp_path / "kit"
    package.mkdir()
    for name, mode in (("a", "UNCHECKED_HASH"), ("b", "CHECKED_HASH"), ("c", "TIMESTAMP")):
        (package / f"{name}.py").write_text("x = 1\n")
        py_compile.compile(str(package / f"{name}.py"), doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode[mode])
    [named] = unchecked_caches(package)
    assert named.startswith(f"{package}/__pycache__/a.cpython-")
    assert "an unchecked hash-based .pyc" in named


def test_the_environment_check_names_each_variable_and_hook(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "PYTHONUSERBASE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delitem(sys.modules, "sitecustomize", raising=False)
    monkeypatch.delitem(sys.modules, "usercustomize", raising=False)
    assert environment() == []
    monkeypatch.setenv("PYTHONSTARTUP", "/tmp/x.py")
    hook = types.ModuleType("usercustomize")
    hook.__file__ = str(tmp_path / "usercustomize.py")
    monkeypatch.setitem(sys.modules, "usercustomize", hook)
    found = environment()
    assert found[0].startswith("PYTHONSTARTUP='/tmp/x.py' is set")
    assert found[1].startswith(f"{tmp_path / 'usercustomize.py'}: a usercustomize module")


def test_a_kit_module_loaded_from_elsewhere_is_named(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    assert loaded_outside(code_files()) == []
    stray = types.ModuleType("kit.claims.stray")
    stray.__file__ = str(tmp_path / "stray.py")
    monkeypatch.setitem(sys.modules, "kit.claims.stray", stray)
    [found] = loaded_outside(code_files())
    assert found.startswith(f"{tmp_path / 'stray.py'}: the kit module kit.claims.stray ran")


@pytest.fixture(scope="module")
def kit_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("code")
    shutil.copytree(ROOT / "kit", root / "kit", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


@pytest.mark.parametrize("module", sorted(code_files()))
def test_an_edit_of_any_kit_module_changes_the_code_root(kit_copy: Path, module: str) -> None:
    """One test per module of the kit (a superset of those verify loads, which the first
    test of this file checks): a comment appended to its copy moves the code root, and so
    the combined root the README publishes."""
    from kit.claims.coverage import code_digest

    before = code_digest(kit_copy, kit_copy / "kit")
    path = kit_copy / module
    original = path.read_bytes()
    try:
        path.write_bytes(original + b"\n# edited\n")
        assert code_digest(kit_copy, kit_copy / "kit") != before
    finally:
        path.write_bytes(original)
    assert code_digest(kit_copy, kit_copy / "kit") == before


def test_a_pth_file_that_hides_itself_never_runs_in_the_second_start(tmp_path: Path) -> None:
    """A venv whose site folder holds the test environment's libraries and a ``.pth`` file
    that runs code, records whether its process was the isolated one, and hides itself
    from every later glob: it runs in the first start only (``-S`` in ``FLAGS``: the
    second start, ``kit.claims.boot``, runs no ``.pth`` file), where it cannot hide from
    the check, which names it; verify fails."""
    import site
    import venv

    env = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env)
    [folder] = [Path(p) for p in site.getsitepackages() if Path(p).is_dir()][:1]
    [target] = list(env.glob("lib/python*/site-packages"))
    for entry in folder.iterdir():
        (target / entry.name).symlink_to(entry)
    ran = tmp_path / "ran"
    (target / "zz-hide.pth").write_text(
        "import sys, pathlib; "
        f"open({str(ran)!r}, 'a').write(str(sys.flags.no_site) + repr(sys.argv) + chr(10)); "
        "g = pathlib.Path.glob; "
        "pathlib.Path.glob = lambda self, p: [x for x in g(self, p) if 'zz-hide' not in x.name]\n")
    proc = subprocess.run([str(env / "bin" / "python"), "-m", "kit", "verify", "--claim",
                           "A-052"], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env=_clean_env(), check=False)
    starts = ran.read_text().splitlines()
    assert starts, "the first start never ran it"
    assert all(line.startswith("0['-m', 'verify'") for line in starts), starts
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"{target / 'zz-hide.pth'}: a .pth file that runs code" in proc.stdout


def test_the_second_start_typed_by_hand_answers(tmp_path: Path) -> None:
    """``kit/claims/boot.py`` under ``FLAGS`` is the isolated start itself, as the README
    offers it to a reviewer who leaves nothing to a first start: from any folder, in an
    interpreter whose base holds ``.pth`` files of its own (they are not the venv's and
    are not named), it answers OK."""
    from kit.__main__ import BOOT, FLAGS

    proc = subprocess.run([sys.executable, *FLAGS, str(BOOT), "verify", "--claim", "A-052"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env=_clean_env(), check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.rstrip().splitlines()[-1].endswith("; OK")


SPAWNED = """
import multiprocessing, runpy, sys
from pathlib import Path

def where(name):
    import importlib
    return importlib.import_module(name).__file__

if __name__ == "__main__":
    boot = runpy.run_path(sys.argv[1], run_name="kit_boot")
    boot["set_path"](Path(sys.argv[1]).resolve().parents[1])
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        print(pool.apply(where, ("kit.files",)), pool.apply(where, ("numpy",)))
"""


def test_a_process_the_second_start_spawns_imports_the_same_kit(tmp_path: Path) -> None:
    """Under ``-S`` no editable-install finder runs, so a process the second start spawns
    (a Dask worker of ``verify --replay``, which waited for ever when it could not import
    the kit) finds the kit through the folder ``kit.claims.boot.set_path`` puts last on the
    path, and the libraries through the site folders."""
    from kit.__main__ import BOOT, FLAGS

    script = tmp_path / "spawn.py"
    script.write_text(SPAWNED)
    proc = subprocess.run([sys.executable, *FLAGS, str(script), str(BOOT)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env=_clean_env(),
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    kit_file, numpy_file = proc.stdout.split()
    assert kit_file == str(ROOT / "kit" / "files.py")
    assert "site-packages" in numpy_file
