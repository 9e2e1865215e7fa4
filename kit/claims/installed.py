"""The interpreter verify runs in: exactly a lock's distributions, file for file.

The code root hashes the kit; what verify computes with (numpy, scipy, scikit-learn, the
YAML and schema readers, matplotlib for the page's figures) comes from the interpreter's
installed distributions, which no root hashes. Three checks close that, each a failed
check naming the file or distribution (``problems``):

- **the lock**: the installed distributions (the first of each name on ``sys.path``, as
  import finds them) are exactly the pins of one of the kit's reviewer locks
  (``locks/verify.lock``, or ``locks/tools.lock`` for the test environment), name and
  version; the kit itself is the code root's, and an installer the lock does not pin
  (the venv's own ``pip``) is not imported by verify and is left out;
- **the files**: every file of every distribution a module verify loaded came from has
  the sha256 pip recorded for it at install time (its ``RECORD``); a module loaded from a
  file that no installed distribution records, outside the standard library and the kit,
  is named;
- **start-up files**: a ``.pth`` file in a site folder runs its ``import`` lines at every
  start; one that does is accepted only when an installed distribution records it with
  its hash (a line that only names a folder runs nothing, and whatever is imported from
  that folder is checked file by file above).

Not covered: the interpreter and its standard library (no installer records them) and the
compiled caches (``__pycache__``) beside hashed sources, which the interpreter rewrites
whenever a source's time stamp moves, so a recorded hash of one says nothing.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as metadata
import os
import re
import site
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kit.locks import lock_requirements

LOCKS = ("verify.lock", "tools.lock")
OWN = "kit"  # hashed by the code root, never by an installer's record
INSTALLER = "pip"


def normalise(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_pins(path: Path) -> dict[str, str]:
    """Every ``name==version`` a lock pins (``kit.locks``), by normalised name."""
    return {normalise(pin.split("==")[0]): pin.split("==", 1)[1]
            for pin in lock_requirements(path)}


def installed() -> dict[str, metadata.Distribution]:
    """The installed distributions by name, the first on ``sys.path`` of each (the one
    import finds)."""
    found: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(normalise(name), dist)
    return found


def lock_problems(locks: Path, dists: dict[str, metadata.Distribution]) -> list[str]:
    """None when the installed distributions are one lock's pins; otherwise what differs
    from the nearest lock, name by name."""
    have = {name: d.version for name, d in dists.items() if name != OWN}
    best: tuple[int, str, list[str]] | None = None
    for lock in LOCKS:
        pins = lock_pins(locks / lock)
        have_here = {k: v for k, v in have.items() if k != INSTALLER or k in pins}
        diff = [f"{name} {have_here.get(name, 'not installed')} (the lock pins "
                f"{pins.get(name, 'nothing')})" for name in sorted(set(pins) | set(have_here))
                if pins.get(name) != have_here.get(name)]
        if not diff:
            return []
        if best is None or len(diff) < len(best[2]):
            best = (len(diff), lock, diff)
    assert best is not None
    return [f"{locks / best[1]}: the interpreter's installed distributions are not the "
            f"lock's: {'; '.join(best[2])}; run verify in the kit's environment "
            "(python3 -m kit.runtime.venvs verify)"]


def recorded_files(dists: dict[str, metadata.Distribution]
                   ) -> dict[str, tuple[str, metadata.PackagePath]]:
    """Every file an installed distribution records, by normalised absolute path (as
    ``sys.path`` spells its folders), with its distribution."""
    out: dict[str, tuple[str, metadata.PackagePath]] = {}
    for name, dist in dists.items():
        for entry in dist.files or []:
            out.setdefault(os.path.normpath(os.path.abspath(entry.locate())), (name, entry))
    return out


def _lookup(files: dict[str, tuple[str, metadata.PackagePath]], where: str
            ) -> tuple[str, metadata.PackagePath] | None:
    """The record of a file, by its path as given or, failing that, through its links."""
    found = files.get(os.path.normpath(os.path.abspath(where)))
    if found is None and os.path.exists(where):
        real = os.path.realpath(where)
        found = next((v for k, v in files.items() if os.path.realpath(k) == real), None)
    return found


def _standard_folders() -> tuple[Path, ...]:
    paths = sysconfig.get_paths()
    return tuple(Path(paths[key]).resolve() for key in ("stdlib", "platstdlib") if key in paths)


def loaded(files: dict[str, tuple[str, Any]], kit_files: set[Path]
           ) -> tuple[set[str], list[str]]:
    """The distributions the loaded modules came from, and every module loaded from a file
    no distribution records (outside the standard library and the kit)."""
    dists, problems, standard = set(), [], _standard_folders()
    for name, module in sorted(sys.modules.items()):
        where = getattr(module, "__file__", None)
        if not where:
            continue
        path = Path(where).resolve()
        if path in kit_files:
            continue
        if name in ("__main__", "__mp_main__") and not path.is_file():
            continue  # an interactive or piped program: no file to check
        if "site-packages" not in path.parts and any(path.is_relative_to(f) for f in standard):
            continue
        found = _lookup(files, where)
        if found is not None:
            dists.add(found[0])
        else:
            problems.append(f"{path}: the module {name} ran inside verify from a file no "
                            "installed distribution records")
    return dists, problems


def _record_hash(path: Path) -> str:
    digest = hashlib.sha256(path.read_bytes()).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def file_problems(dists: dict[str, metadata.Distribution], names: set[str]) -> list[str]:
    """Every file of the ``names``d distributions whose bytes are not the ones pip
    recorded (or that is gone); the kit's own record too (an editable install's start-up
    file and finder)."""
    entries = [(Path(str(e.locate())), f"{e.hash.mode}={e.hash.value}")
               for name in sorted(names)
               for e in dists[name].files or []
               if e.hash is not None and "__pycache__" not in e.parts]

    def check(item: tuple[Path, str]) -> str | None:
        path, want = item
        try:
            if _record_hash(path) == want:
                return None
            return f"{path}: its bytes are not the ones its installer recorded ({want})"
        except OSError as exc:
            return f"{path}: recorded by its installer but unreadable ({exc.strerror})"

    with ThreadPoolExecutor(4) as pool:
        return [p for p in pool.map(check, entries) if p is not None]


def pth_problems(files: dict[str, tuple[str, metadata.PackagePath]]) -> list[str]:
    """Every ``.pth`` start-up file with an ``import`` line that no installed distribution
    records with its hash."""
    from kit.claims.boot import site_folders

    folders = site_folders()  # the venv's, also where ``site`` never started (``-S``)
    if site.ENABLE_USER_SITE:
        folders.append(site.getusersitepackages())
    problems = []
    for folder in dict.fromkeys(folders):
        for path in sorted(Path(folder).glob("*.pth")):
            lines = path.read_text(errors="replace").splitlines()
            if not any(line.startswith(("import ", "import\t")) for line in lines):
                continue
            entry = _lookup(files, str(path))
            want = entry[1].hash if entry is not None else None
            if want is None or _record_hash(path) != f"{want.mode}={want.value}":
                problems.append(f"{path}: a .pth file that runs code at every start and that "
                                "no installed distribution records; remove it or run verify "
                                "in the kit's environment")
    return problems


def installed_problems(locks: Path, kit_files: set[Path]) -> list[str]:
    """The three checks of the module docstring (``kit_files``: the code root's files)."""
    dists = installed()
    files = recorded_files(dists)
    names, problems = loaded(files, kit_files)
    return [*lock_problems(locks, dists), *problems, *pth_problems(files),
            *file_problems(dists, names)]
