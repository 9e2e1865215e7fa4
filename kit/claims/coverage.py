"""What verify accounts for, file by file: the sha256 manifests (every file under
``claims/`` and ``manifests/`` listed or refused, symbolic links refused), the asset pins,
and the root digest over everything verify checks.

    write_manifests   rewrite the evidence, lock and asset manifests from what is on disk
    check_manifests   every problem between the manifests and the files (collected)
    hash_problems     one listed file against its sha256
    root_digest       one sha256 over every covered file (``ROOT_SCOPE``)
    code_files        the code that can run inside verify (every module and configuration)
    roots             the evidence root, the code root and the combined root
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kit
from kit.claims.journal import JOURNAL, held
from kit.drift import assets
from kit.errors import KitError
from kit.files import TEMPORARY, canonical_json, plain_files, read_json, sha256, write_atomic
from kit.paths import ROOT
from kit.schema import problems as schema_problems

EVIDENCE_MANIFEST = Path("manifests/evidence.json")
LOCKS_MANIFEST = Path("manifests/locks.json")
ASSETS_MANIFEST = Path("manifests/assets.json")
MANIFESTS = (ASSETS_MANIFEST, EVIDENCE_MANIFEST, LOCKS_MANIFEST)
# The folders whose every file verify accounts for, and the only files exempt there.
COVERED = ("claims", "manifests")
EXEMPT = ("claims/README.md", "manifests/README.md")
RESTORE = "restore it from git"
UNLINK_ANY = "replace the link with the file itself, or restore it from git"
LEFT = ("left by a kit command that runs or was killed: when none runs, `python -m kit ship` "
        "finishes or rolls back a killed ship and removes its temporaries")
UNLINK = (" and ".join(f"{top}/" for top in COVERED) + " must hold the files themselves: "
          f"replace the link with what it points to, or {RESTORE}")

def read_shipped(path: Path) -> Any:
    """A shipped JSON file (KitError naming it, and how to restore it, when it cannot be
    read as JSON)."""
    return read_json(path, RESTORE)


def read_record(path: Path) -> dict[str, Any]:
    """A shipped JSON record that must be an object (a list, a string or a number in its
    place is a KitError naming the file, never an AttributeError)."""
    record = read_shipped(path)
    if not isinstance(record, dict):
        raise KitError(f"{path}: not a JSON object ({type(record).__name__}); {RESTORE}")
    return record


def collect(check: Callable[..., list[str]], *args: Any) -> list[str]:
    """The problems ``check`` returns, or the one it raised: a check that cannot go on
    never stops the others."""
    try:
        return check(*args)
    except KitError as exc:
        return [str(exc)]

def asset_pins() -> dict[str, Any]:
    """The upstream pins of ``kit.drift.assets`` as a manifest."""
    pins = [assets.CIFAR100, *assets.CHECKPOINTS.values()]
    return {"assets": {a.name: {"url": a.url, "sha256": a.sha256,
                                "sha256_prefix": a.sha256_prefix, "size": a.size}
                       for a in pins},
            "members": dict(sorted(assets.CIFAR100_MEMBERS.items()))}


def relative(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def evidence_files(root: Path) -> list[Path]:
    """Every plain file under ``claims/`` (ledgers, shipped evidence, pinned trajectories;
    all but ``claims/README.md``), sorted; symbolic links are not followed."""
    return [p for p in plain_files(root / "claims")[0] if relative(p, root) not in EXEMPT]


def lock_files(root: Path) -> list[Path]:
    """The lock files and their ``.in`` sources, sorted."""
    return sorted(p for p in (root / "locks").glob("*") if p.suffix in (".lock", ".in"))


# Each sha256 manifest and the files it must list, exactly.
LISTED = {EVIDENCE_MANIFEST: evidence_files, LOCKS_MANIFEST: lock_files}


def leftovers(root: Path, besides: Path | None = None) -> list[Path]:
    """Every temporary a kit command left under ``claims/`` or ``manifests/`` (but
    ``besides``, the caller's own): a name only the kit's writers make
    (``kit.files.TEMPORARY``), and a ship's journal unless this process holds it; never
    evidence."""
    found = [root / JOURNAL] if (root / JOURNAL).exists() and not held(root) else []
    for top in COVERED:
        base = root / top
        for folder, dirs, files in os.walk(base) if base.is_dir() else []:
            found += [Path(folder) / name for name in sorted([*dirs, *files])
                      if TEMPORARY.fullmatch(name)]
            dirs[:] = [d for d in dirs if not TEMPORARY.fullmatch(d)]
    return sorted(path for path in found if path != besides)


def unshipped(root: Path, under: Path | None = None) -> list[Path]:
    """What ship did not write under ``root`` (a folder it ships into, such as
    ``reproduce-all``'s ``fresh``): a file under ``claims/`` that the evidence manifest does
    not list or lists with another sha256 (a file a user added or changed), and a file under
    ``manifests/`` that is not one of the kit's. The kit's temporaries and a killed ship's
    journal are not counted: the next ship finishes or rolls them back. ``under``: only
    the files below that folder (one evidence folder a ship replaces)."""
    try:  # a missing or damaged manifest lists nothing: every file is then the user's
        record = read_shipped(root / EVIDENCE_MANIFEST)
    except KitError:
        record = {}
    listed = record.get("files") if isinstance(record, dict) else None
    listed = listed if isinstance(listed, dict) else {}
    known = {root / m for m in (*MANIFESTS, JOURNAL)}
    found = [p for p in plain_files(root / "manifests")[0] if p not in known] \
        if under is None else []
    files = evidence_files(root) if under is None else plain_files(under)[0]
    for path in files:
        name = relative(path, root)
        if any(TEMPORARY.fullmatch(part) for part in Path(name).parts):
            continue
        if name not in listed or sha256(path) != listed[name]:
            found.append(path)
    return sorted(p for p in found if not TEMPORARY.fullmatch(p.name))


def refuse_leftovers(root: Path, besides: Path | None = None) -> None:
    """A KitError naming the first temporary another kit command left under ``root``'s
    covered folders (one that still runs, or a killed one's the next ship did not
    recover): the manifests never list it."""
    left = leftovers(root, besides)
    if left:
        more = f" (and {len(left) - 1} more)" if len(left) > 1 else ""
        raise KitError(f"{left[0]}{more}: {LEFT}; it is not evidence and the manifests will "
                       "not list it")


def write_manifests(root: Path = ROOT) -> None:
    """Rewrite the evidence, lock and asset manifests from what is on disk; a temporary a
    killed kit command left there is refused by name, never hashed in."""
    refuse_leftovers(root)
    for manifest, files in LISTED.items():
        listed = {relative(p, root): sha256(p) for p in files(root)}
        write_atomic(root / manifest, canonical_json({"files": listed}))
    write_atomic(root / ASSETS_MANIFEST, canonical_json(asset_pins()))


def check_manifests(root: Path) -> list[str]:
    """Problems with the manifests and what they cover (empty when every entry checks
    out, every file under ``claims/`` and ``manifests/`` is accounted for and no link is
    there)."""
    problems = coverage_problems(root)
    for manifest, files in LISTED.items():
        problems += collect(listed_problems, root, manifest, files)
    return problems + collect(assets_problems, root)


def coverage_problems(root: Path) -> list[str]:
    """Symbolic links and other entries that are no plain file under ``claims/`` and
    ``manifests/``, and any file under ``manifests/`` that is not one of the kit's."""
    problems = [f"{path}: {LEFT}" for path in leftovers(root)]
    for top in COVERED:
        problems += plain_files(root / top, UNLINK)[1]
        problems += [f"{folder}: an empty folder, which no manifest lists; remove it"
                     for folder in _empty_folders(root / top)]
    problems += scope_links(root)
    known = {m.as_posix() for m in MANIFESTS} | set(EXEMPT) | {JOURNAL.as_posix()}
    names = ", ".join(m.name for m in MANIFESTS)
    found = plain_files(root / "manifests")[0]
    problems += [f"{path}: not one of the kit's manifests ({names}); remove it"
                 for path in found if relative(path, root) not in known]
    return problems


def _empty_folders(base: Path) -> list[Path]:
    """Every folder under ``base`` that holds no file at any depth (links not followed)."""
    found = []
    for folder, _, _ in os.walk(base):
        here = Path(folder)
        if not any(p.is_file() or p.is_symlink() for p in here.rglob("*")):
            found.append(here)
    return [f for f in sorted(found) if f.parent not in found]


def listed_problems(root: Path, manifest: Path, files: Callable[[Path], list[Path]]
                    ) -> list[str]:
    """One sha256 manifest: readable and valid, every entry present with its sha256, and
    every file it must list listed."""
    path = root / manifest
    if not path.is_file():
        return [f"{path}: manifest missing; {RESTORE}, or rewrite it with "
                "kit.claims.coverage.write_manifests"]
    listed = read_shipped(path)
    problems = schema_problems(listed, "manifest.schema.json", path)
    if problems:
        return problems
    present = {relative(p, root): p for p in files(root)}
    for name, digest in sorted(listed["files"].items()):
        if name not in present:
            if not _under_link(root, name):  # a link is refused by coverage_problems
                problems.append(f"{root / name}: listed in {manifest} but missing")
            continue
        problems += hash_problems(present[name], digest, manifest)
    return problems + [f"{root / n}: present but not listed in {manifest}"
                       for n in sorted(set(present) - set(listed["files"]))]


def hash_problems(path: Path, digest: str, listing: Path) -> list[str]:
    """Empty when ``path`` hashes to ``digest`` (as ``listing`` lists it); else what is
    wrong, naming ``path``."""
    try:
        found = sha256(path, RESTORE)
    except KitError as exc:
        return [str(exc)]
    return [] if found == digest else [f"{path}: sha256 differs from {listing}"]


def _under_link(root: Path, name: str) -> bool:
    """Whether ``root/name`` or a folder above it (below root) is a symbolic link."""
    path = root / name
    return any(p.is_symlink() for p in [path, *path.parents] if root in p.parents)


def assets_problems(root: Path) -> list[str]:
    """``manifests/assets.json`` must equal the pins of ``kit/drift/assets.py``."""
    path = root / ASSETS_MANIFEST
    if not path.is_file():
        return [f"{path}: manifest missing; {RESTORE}"]
    if read_shipped(path) != asset_pins():
        return [f"{path}: differs from the pins in kit/drift/assets.py"]
    return []

# What the root digest covers: every input of verify's decisions, as files under root.
ROOT_SCOPE = ("manifests/*.json", "claims/**/*", "kit/schemas/*.json", "kit/sciml/cards/*",
              "kit/protocols/*.yaml", "locks/*.lock", "locks/*.in")


def root_digest(root: Path) -> str:
    """The evidence root: one sha256 over the data verify checks, the canonical JSON of
    every covered file's path (relative to root) and sha256 (``unreadable`` for a file
    that cannot be read, which the checks name). Published out of band (the README), it
    pins the whole chain: a value rewritten with every hash below it updated changes it."""
    files = {relative(p, root): _digest_or_unreadable(p)
             for pattern in ROOT_SCOPE for p in root.glob(pattern)
             if p.is_file() and relative(p, root) not in EXEMPT}
    return _digest(files)


def scope_links(root: Path) -> list[str]:
    """A problem naming every link the roots would read through outside ``claims/`` and
    ``manifests/`` (``coverage_problems`` names those): under ``kit/`` (its code, schemas,
    cards and protocols) and ``locks/``, and ``pyproject.toml``, even a link whose target
    holds the same bytes (the next edit there would move no digest here)."""
    problems = [p for top in ("kit", "locks") if (root / top).exists() or (root / top).is_symlink()
                for p in plain_files(root / top, UNLINK_ANY)[1]]
    if (root / "pyproject.toml").is_symlink():
        problems.append(f"{root / 'pyproject.toml'}: a symbolic link; {UNLINK_ANY}")
    return problems


def code_files(package: Path | None = None) -> dict[str, Path]:
    """The code that can run inside ``python -m kit verify``: every module of the ``kit``
    package (``kit/**/*.py``) and every configuration its code reads beside itself
    (``kit/**/*.toml``: the runtimes, the releases and the plan's costs; the runtimes'
    table decides which sweep rows are recounted against the drift evidence), keyed by
    ``kit/...`` path. All of it, not an import closure
    read from the source: the command line imports every command's modules inside its
    functions and the corpus loads its cases by name, so a closure would miss code that
    runs. ``pyproject.toml`` is added by ``code_digest``; ``kit.claims.isolation`` checks
    at the end of a run that nothing of the kit ran from anywhere else. ``package``: another
    copy of the ``kit`` folder (default: the one running)."""
    package = package or Path(kit.__file__).resolve().parent
    found = [*package.rglob("*.py"), *package.rglob("*.toml")]
    return {relative(path, package.parent): path for path in sorted(found)
            if "__pycache__" not in path.parts}


def code_digest(root: Path, package: Path | None = None) -> str:
    """The code root: one sha256 over ``code_files`` and ``pyproject.toml``."""
    files = {name: _digest_or_unreadable(path) for name, path in code_files(package).items()}
    files["pyproject.toml"] = _digest_or_unreadable(root / "pyproject.toml")
    return _digest(files)


def roots(root: Path) -> dict[str, str]:
    """The evidence root, the code root, and the root over both (``--expect-root``)."""
    evidence, code = root_digest(root), code_digest(root)
    combined = hashlib.sha256(canonical_json({"code": code, "evidence": evidence})).hexdigest()
    return {"evidence": evidence, "code": code, "combined": combined}


def _digest(files: dict[str, str]) -> str:
    return hashlib.sha256(canonical_json({"files": dict(sorted(files.items()))})).hexdigest()


def _digest_or_unreadable(path: Path) -> str:
    try:
        return sha256(path)
    except KitError:
        return "unreadable"

