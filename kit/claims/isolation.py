"""What runs inside verify, beyond the files the roots hash.

The code root (``kit.claims.coverage.code_files``) hashes every module of the ``kit``
package: where ``python -m kit verify`` starts and everything it can import. Two ways
remain to change which code runs without changing a hashed file, and verify refuses both
by name:

- **the start-up environment**: ``PYTHONPATH``, ``PYTHONSTARTUP``, ``PYTHONHOME`` and
  ``PYTHONUSERBASE`` put other code ahead of the kit's or run it before; a
  ``sitecustomize`` or ``usercustomize`` module runs at every start (``environment``);
- **a kit module loaded from elsewhere**: at the end of every run, every ``kit`` module in
  ``sys.modules`` must come from a file the code root hashed (``loaded_outside``, called
  by ``root_checks``, which also computes the roots and reads the shipped replay records).

Each is a failed check naming the variable, module or file: verify fails closed. The
command line also checks the interpreter's own distributions against the lock, file for
file (``kit.claims.installed``).

Checks made inside a process cannot see through code that ran before them and hid itself
(a ``sitecustomize`` that removes itself from ``sys.modules``, a module of the current
folder that shadows the standard library and puts the real one back, a ``.pth`` start-up
file that runs code and hides itself from a listing). So ``python -m kit verify`` runs
itself again, at once, as ``python -I -S --check-hash-based-pycs always kit/claims/boot.py``
(``kit.__main__.reexec``, before it reads any kit module but ``kit`` and ``kit.__main__``):
isolated (no ``PYTHON*`` variable, no user site folder, not the current folder on
``sys.path``), with no ``.pth`` file run (``-S``; ``kit.claims.boot`` puts the
site folders on the path itself and loads the ``kit`` package from the very folder the
first process found it in; a ``.pth`` file that would run code is then named by
``kit.claims.installed``) and reading no compiled cache it has not checked against its
source (an "unchecked" hash-based ``.pyc``, which Python otherwise runs without reading
the source). A ``.pyc`` of that kind under ``kit/`` is also a failed check
(``unchecked_caches``): the first process read it before it could run again.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

# Variables that change which code a Python process runs, and what each does.
VARIABLES = {"PYTHONPATH": "puts its folders ahead of the installed kit and libraries",
             "PYTHONSTARTUP": "names a file an interactive start runs first",
             "PYTHONHOME": "replaces the interpreter's standard library",
             "PYTHONUSERBASE": "adds a user site folder whose .pth files run at start"}
HOOKS = ("sitecustomize", "usercustomize")


def unchecked_caches(package: Path) -> list[str]:
    """Every compiled cache under the ``kit`` package that Python would run without
    reading its source (a hash-based ``.pyc`` marked unchecked), named."""
    found = []
    for path in sorted(package.rglob("__pycache__/*.pyc")):
        try:
            with open(path, "rb") as handle:
                flags = int.from_bytes(handle.read(8)[4:8], "little")
        except OSError:
            continue
        if flags & 1 and not flags & 2:
            found.append(f"{path}: a compiled cache Python runs without reading its source "
                         "(an unchecked hash-based .pyc): code no root hashes; remove it")
    return found


def environment() -> list[str]:
    """Every start-up variable or hook module of this process that could run code the
    roots do not hash, named with what it does."""
    problems = [f"{name}={os.environ[name]!r} is set: it {what}, outside every root; run "
                "verify without it" for name, what in VARIABLES.items()
                if os.environ.get(name)]
    for name in HOOKS:
        module = sys.modules.get(name)
        where = getattr(module, "__file__", None) if module is not None else None
        if where:
            problems.append(f"{where}: a {name} module ran when Python started, outside "
                            "every root; remove it or run verify in the kit's environment "
                            "(python3 -m kit.runtime.venvs verify)")
    return problems


def loaded_outside(hashed: dict[str, Path]) -> list[str]:
    """Every ``kit`` module this process loaded from a file the code root did not hash
    (``hashed``: the code root's files, ``kit/...`` -> path)."""
    known = {path.resolve() for path in hashed.values()}
    problems = []
    for name, module in sorted(sys.modules.items()):
        if name != "kit" and not name.startswith("kit."):
            continue
        where = getattr(module, "__file__", None)
        if where is None or Path(where).resolve() not in known:
            problems.append(f"{where or name}: the kit module {name} ran inside verify but "
                            "is not one the code root hashed; restore the checkout")
    return problems


def root_checks(root: Path, expect_root: str | None, with_page: bool,
                problems: list[str], interpreter: bool = False
                ) -> tuple[dict[str, str], dict[str, Any]]:
    """The roots (checked against ``expect_root``), the matrix of the shipped replay
    records, and, last, that no kit module ran from outside the code root and (with
    ``interpreter``, as the command line asks) that the interpreter's distributions are a
    lock's, file for file (``kit.claims.installed``); every problem is added to
    ``problems``."""
    from kit.claims.coverage import code_files, roots
    from kit.claims.replays import load_records, matrix

    records, replay_problems = load_records(root)
    problems += replay_problems
    header, rows = matrix(records, root)
    found = roots(root)
    if expect_root is not None and expect_root.lower() != found["combined"]:
        problems.append(f"root digest {found['combined']} differs from the expected "
                        f"{expect_root} (evidence root {found['evidence']}, code root "
                        f"{found['code']})")
    if with_page:
        import kit.claims.page  # noqa: F401  (loaded before the check below)
    hashed = code_files()
    problems += loaded_outside(hashed)
    problems += unchecked_caches(Path(__file__).resolve().parents[1])
    if interpreter:
        from kit.claims.installed import installed_problems

        problems += installed_problems(root / "locks", {p.resolve() for p in hashed.values()})
    return found, {"header": header, "rows": rows}
