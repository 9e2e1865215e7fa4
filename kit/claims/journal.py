"""A ship that survives being killed: every ship finishes or rolls back on the next call.

A ship (``kit.claims.ship``) replaces one evidence folder and then the manifests. Before it
writes anything it claims the journal ``manifests/.ship-journal.json`` (made with a hard
link, so two ships into one checkout cannot both hold it) naming its pid, the target, the
staging folder beside it and the phase:

    staging   the new evidence is being copied into the staging folder; the old evidence
              and the manifests are untouched. A kill here rolls back: the staging folder
              is removed, nothing else.
    staged    the copy is complete (every file synced). A kill from here on rolls forward:
              the old target moves aside (``<staging>.old.tmp``'s name), the staging folder
              takes its place, the old folder is removed, the manifests are written.

Each step of the roll forward can be taken again, so a kill during recovery is recovered
by the next call too. Recovery also removes every temporary of the kit's naming under
``claims/`` and ``manifests/`` whose writer is gone (``kit.files.stale``: a killed
``write_atomic`` of a manifest or a replay record), and nothing else: a journal whose ship
still runs is refused by pid. verify never recovers; it names the journal and any
temporary as failed checks (``kit.claims.coverage``), so nothing a killed ship left is
ever hashed into the manifests or passes as evidence.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kit.errors import KitError
from kit.files import (
    PID_MAX,
    TEMPORARY,
    alive,
    canonical_json,
    read_json,
    remove_stale,
    temporary_prefix,
    umask,
    write_atomic,
)

JOURNAL = Path("manifests") / ".ship-journal.json"
PHASES = ("staging", "staged")
COVERED = ("claims", "manifests")


Manifests = Callable[[Path], None]  # kit.claims.coverage.write_manifests


def begin(root: Path, target: Path, write_manifests: Manifests) -> Path:
    """Recover what a killed ship left, claim the journal and make the staging folder
    beside ``target`` (phase ``staging``); returns the staging folder."""
    recover(root, write_manifests)
    staging = Path(tempfile.mkdtemp(prefix=temporary_prefix(target.name), suffix=".tmp",
                                    dir=target.parent))
    record = {"pid": os.getpid(), "phase": "staging",
              "staging": staging.relative_to(root).as_posix(),
              "target": target.relative_to(root).as_posix()}
    journal = root / JOURNAL
    journal.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=temporary_prefix(journal.name), suffix=".tmp",
                                dir=journal.parent)
    with os.fdopen(fd, "wb") as handle:
        handle.write(canonical_json(record))
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.link(name, journal)  # fails when another ship holds the journal
    except FileExistsError:
        shutil.rmtree(staging)
        raise KitError(f"{journal}: another ship holds this checkout ({_holder(journal)}); "
                       "wait for it, then run again") from None
    finally:
        os.unlink(name)
    return staging


def replace(root: Path, target: Path, write_manifests: Manifests,
            fill: Callable[[Path], None]) -> None:
    """A whole ship of ``target``: ``begin``, ``fill(staging)`` (a failure rolls back),
    ``staged``, ``finish``."""
    staging = begin(root, target, write_manifests)  # a killed ship's remains first
    # a user's mode kept, a new folder's as mkdir gives it (mkdtemp's is 0700)
    mode = target.stat().st_mode & 0o7777 if target.is_dir() else 0o777 & ~umask()
    try:
        fill(staging)
        os.chmod(staging, mode)
    except BaseException:
        abandon(root)
        raise
    staged(root, staging)
    finish(root, write_manifests)


def staged(root: Path, staging: Path) -> None:
    """The copy into ``staging`` is complete: sync it, then mark the journal ``staged``."""
    for path in sorted(staging.rglob("*")):
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
    _write(root, {**_read(root), "phase": "staged"})


def finish(root: Path, write_manifests: Manifests) -> None:
    """Roll the journal's ship forward: swap the folders, remove the old one, write the
    manifests, release the journal."""
    _forward(root, _read(root), write_manifests)


def abandon(root: Path) -> None:
    """Roll back this process's ship (a failed copy): remove its staging folder, release
    the journal."""
    record = _read(root)
    shutil.rmtree(root / record["staging"], ignore_errors=True)
    (root / JOURNAL).unlink()


def recover(root: Path, write_manifests: Manifests) -> str | None:
    """Finish or roll back the ship a killed process left under ``root`` and remove the
    stale temporaries there; returns what was done (None when nothing was left). A KitError
    when the journal's ship still runs."""
    journal = root / JOURNAL
    done = None
    if journal.exists() or journal.is_symlink():
        record = _read(root)
        if alive(record["pid"]) and record["pid"] != os.getpid():
            raise KitError(f"{journal}: another ship holds this checkout ({_holder(journal)}); "
                           "wait for it, then run again")
        if record["phase"] == "staged":
            _forward(root, record, write_manifests)
            done = f"finished the ship a killed process left ({record['target']})"
        else:
            shutil.rmtree(root / record["staging"], ignore_errors=True)
            journal.unlink()
            done = f"rolled back the ship a killed process left ({record['target']})"
    removed = _remove_stale(root)
    if removed and done is None:
        done = f"removed {len(removed)} temporaries of a killed kit command"
    return done


def _forward(root: Path, record: dict[str, Any], write_manifests: Manifests) -> None:
    """Every step of the swap that is not yet taken, in order; each can be taken again."""
    if record["pid"] != os.getpid():  # take over a killed ship's journal
        record = {**record, "pid": os.getpid()}
        _write(root, record)
    staging, target = root / record["staging"], root / record["target"]
    old = staging.with_name(staging.name[:-len(".tmp")] + ".old.tmp")
    if staging.is_dir():
        if target.exists():
            target.rename(old)
        staging.rename(target)
    if old.exists():
        shutil.rmtree(old)
    _remove_stale(root)
    write_manifests(root)
    (root / JOURNAL).unlink()


def _remove_stale(root: Path) -> list[Path]:
    """Remove the kit's temporaries whose writer is gone under the covered folders."""
    return [path for top in COVERED for path in remove_stale(root / top)]


def held(root: Path) -> bool:
    """Whether this process holds the journal under ``root`` (its ship is under way)."""
    try:
        return bool(read_json(root / JOURNAL).get("pid") == os.getpid())
    except (KitError, AttributeError):
        return False


def _holder(journal: Path) -> str:
    try:
        return f"pid {read_json(journal)['pid']}"
    except (KitError, KeyError, TypeError):
        return "a ship that is starting"


def _read(root: Path) -> dict[str, Any]:
    """The journal, checked: a record that is not the kit's is named, never acted on."""
    journal = root / JOURNAL
    fix = "it is not a journal the kit wrote: move it away, then restore claims/ from git"
    if journal.is_symlink():
        raise KitError(f"{journal}: a link; {fix}")
    record = read_json(journal, fix)
    ok = (isinstance(record, dict) and type(record.get("pid")) is int
          and 0 < record["pid"] <= PID_MAX and record.get("phase") in PHASES
          and all(_inside(record.get(key)) for key in ("staging", "target"))
          and Path(record["staging"]).parent == Path(record["target"]).parent
          and TEMPORARY.fullmatch(Path(record["staging"]).name) is not None)
    if not ok:
        raise KitError(f"{journal}: {fix}")
    return dict(record)


def _inside(name: Any) -> bool:
    """A journal's path: a relative path under ``claims/`` with no ``..``."""
    parts = name.split("/") if isinstance(name, str) else []
    return len(parts) > 2 and parts[0] == "claims" and all(
        part not in ("", ".", "..") for part in parts)


def _write(root: Path, record: dict[str, Any]) -> None:
    write_atomic(root / JOURNAL, canonical_json(record))
