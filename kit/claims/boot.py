"""The isolated start of ``python -m kit verify`` (``kit.__main__.reexec``).

Run as a script under ``python -I -S --check-hash-based-pycs always``, it loads the kit
from the folder it sits in and the libraries from the interpreter's site folders (its
venv's, read from ``pyvenv.cfg`` as a normal start reads it) and the folders their ``.pth``
files name, without running any ``.pth`` file's code (``-S``: the ``site`` module never
starts), then runs ``python -m kit`` with the rest of the command line. Typed by hand it
leaves nothing to a first start::

    .venv-verify/bin/python -I -S --check-hash-based-pycs always \
        kit/claims/boot.py verify ...
"""

import importlib.util
import runpy
import site
import sys
from pathlib import Path


def site_folders() -> list[str]:
    """The site folders a normal start puts on the path: its venv's (the folder of the
    ``pyvenv.cfg`` beside or above the interpreter, and the base interpreter's where that
    file includes the system's) or the interpreter's own; computed, never ``site.venv``
    or ``site.addsitedir``, which run the ``.pth`` files they find."""
    executable = Path(sys.executable)
    for prefix in (executable.parent, executable.parent.parent):
        config = prefix / "pyvenv.cfg"
        if config.is_file():
            keys = dict(line.split("=", 1) for line in config.read_text().splitlines()
                        if "=" in line)
            system = {k.strip().lower(): v.strip().lower() for k, v in keys.items()}.get(
                "include-system-site-packages") == "true"
            return site.getsitepackages([str(prefix), *([sys.base_prefix] if system else [])])
    return site.getsitepackages()


def add_site_folders() -> None:
    """Put the site folders on the path, and the folders their ``.pth`` files name (as
    ``site.addpackage`` does, in the same order), but never run a ``.pth`` file's
    ``import`` line: ``kit.claims.installed`` names any such file no installer recorded."""
    for folder in site_folders():
        if folder not in sys.path:
            sys.path.append(folder)
        for pth in sorted(Path(folder).glob("*.pth")):
            for line in pth.read_text(errors="replace").splitlines():
                named = Path(folder, line.rstrip())
                if line.strip() and not line.startswith(("#", "import ", "import\t")) \
                        and named.is_dir() and str(named) not in sys.path:
                    sys.path.append(str(named))


def set_path(package: Path) -> None:
    """The site folders (``add_site_folders``), then the folder holding ``package`` last,
    behind the standard library and the site folders: the processes this one spawns
    (Dask's workers, multiprocessing's) import the same kit from it, where no ``.pth``
    finder of an editable install runs."""
    add_site_folders()
    sys.path.append(str(package.parent))


def main() -> None:
    package = Path(__file__).resolve().parents[1]
    set_path(package)
    spec = importlib.util.spec_from_file_location(
        "kit", package / "__init__.py", submodule_search_locations=[str(package)])
    if spec is None or spec.loader is None:
        raise SystemExit(f"kit: error: {package}: no kit package to start")
    kit = importlib.util.module_from_spec(spec)
    sys.modules["kit"] = kit
    spec.loader.exec_module(kit)
    sys.argv = [str(package / "__main__.py"), *sys.argv[1:]]
    runpy.run_module("kit", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
