"""One rule for the folders the kit writes its outputs into (``--out``): a folder is the
kit's when the kit wrote it and marked it with what it wrote; there the kit replaces only
what it wrote. A folder the kit did not mark is used only while empty, otherwise refused
by name. Files a user added beside the kit's are never removed or overwritten, a file the
kit wrote and a user changed since is refused rather than replaced, and the folder's own
mode is left as it is.

``publish(staging, out, command)`` moves a complete set of files, rendered under
``staging`` (a temporary folder inside ``out``: ``temporary``, or ``staged`` for a block
that removes it afterwards), into ``out``: every check
comes first, then each file is renamed into place (each rename is atomic), the files the
previous mark listed and the new set lacks are removed, and the mark (``MARK``: the
command and the sha256 of every file it wrote) is written last. Before the first file
moves, an intent mark lists every file of both sets with the sha256 each may hold (the old
or the new), so a publish killed at any moment leaves a folder whose every file the mark
accounts for: the next run takes it as the kit's and finishes the change.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kit.errors import KitError
from kit.files import (
    TEMPORARY,
    canonical_json,
    parse_json,
    read_json,
    sha256,
    stale,
    temporary_prefix,
    write_atomic,
)

MARK = ".kit-written.json"
STAGING = "kit-staging"  # the staging folder's temporary name: .kit-staging.kit<pid>-....tmp


def written(out: Path) -> dict[str, str]:
    """What the kit wrote into ``out`` (relative path -> sha256), from its mark; an empty
    mapping for a new or empty folder; a KitError naming a folder the kit did not write."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise KitError(f"{out}: not a folder; name another folder")
    if not out.exists():
        return {}
    mark = out / MARK
    if not mark.is_file():
        foreign = sorted(p.name for p in out.iterdir() if not TEMPORARY.fullmatch(p.name))
        if foreign:
            raise KitError(f"{out}: holds files the kit did not write ({foreign[0]}"
                           f"{' and more' if len(foreign) > 1 else ''}); name an empty or new "
                           "folder")
        return {}
    record = read_json(mark, "delete the folder or name another one")
    files = record.get("files") if isinstance(record, dict) else None
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        raise KitError(f"{mark}: not a record of what the kit wrote; name another folder")
    outside = [name for name in files if not _relative(name)]
    if outside:
        raise KitError(f"{mark}: names {outside[0]!r}, which is not a file inside the folder; "
                       "not a record the kit wrote: name another folder")
    return files


def _relative(name: str) -> bool:
    """A name a mark may hold: a relative POSIX path below the folder (no ``..``, ``.`` or
    empty part, not absolute, no backslash)."""
    parts = name.split("/")
    return bool(name) and "\\" not in name and not name.startswith("/") and \
        all(part not in ("", ".", "..") for part in parts)


def _intended(out: Path) -> dict[str, str]:
    """What an interrupted publish's intent mark says a file may also hold (name ->
    sha256 of its previous content); empty after a finished publish."""
    try:
        record = read_json(out / MARK)
    except KitError:
        return {}
    previous = record.get("previous") if isinstance(record, dict) else None
    if not isinstance(previous, dict):
        return {}
    return {name: sha for name, sha in previous.items() if _relative(name)}


def claim(out: Path, command: str) -> Path:
    """``out`` as a folder of the kit's for a command that keeps its own structure there
    (``ship --into``): made and marked when new or empty, taken when the kit marked it,
    refused by name otherwise (``written``'s rule)."""
    if not written(out) and not (out / MARK).is_file():
        out.mkdir(parents=True, exist_ok=True)
        write_atomic(out / MARK, canonical_json({"command": command, "files": {}}))
    return out


def json_with(fields: set[str]) -> Callable[[bytes], bool]:
    """For ``write_named_file``: whether a file's bytes are a JSON object holding every one
    of ``fields`` (a record the kit's command wrote; anything else is the user's)."""
    def ours(data: bytes) -> bool:
        try:
            found = parse_json(data, Path("the file"), "")
        except KitError:
            return False
        return isinstance(found, dict) and fields <= set(found)

    return ours


def write_named_file(path: Path, data: bytes, ours: Callable[[bytes], bool], option: str
                     ) -> None:
    """Write ``data`` to a file the user named with ``option`` (``verify --json``,
    ``--page``): a new file, or one the kit wrote before (``ours`` of its bytes says so);
    anything else there is refused by name and left as it is. A replaced file keeps its
    mode. The temporaries of this name that a killed earlier write left beside it (their
    writer gone, ``stale``) are removed first; nothing else in the folder is touched."""
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise KitError(f"{path}: not a plain file; name another file with {option}")
    if path.parent.is_dir():
        for left in path.parent.iterdir():
            found = TEMPORARY.fullmatch(left.name)
            if found and found["name"] == path.name and stale(left.name) \
                    and left.is_file() and not left.is_symlink():
                left.unlink()
    check_named_file(path, ours, option)
    write_atomic(path, data)


def check_named_file(path: Path, ours: Callable[[bytes], bool], option: str) -> None:
    """Refuse, by name, a file at ``path`` that ``write_named_file`` would refuse to
    replace (a command checks it before its work, not only when it writes)."""
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise KitError(f"{path}: not a plain file; name another file with {option}")
    if path.exists():
        try:
            mine = ours(path.read_bytes())
        except OSError as exc:
            raise KitError(f"{path}: cannot be read ({exc.strerror}); name another file "
                           f"with {option}") from exc
        if not mine:
            raise KitError(f"{path}: a file the kit did not write; move it, or name another "
                           f"file with {option}")


def temporary(out: Path) -> Path:
    """A fresh staging folder inside ``out`` (made, as the kit's, when ``out`` is new), for
    ``publish``; checks ``out`` first, so a foreign folder is refused before any work."""
    written(out)
    out.mkdir(parents=True, exist_ok=True)
    for path in out.iterdir():  # what a killed command left, its writer gone: its staging
        if not stale(path.name) or path.is_symlink():  # folder, or the mark it was writing
            continue
        if path.is_dir():
            shutil.rmtree(path)
        elif path.is_file():
            path.unlink()
    return Path(tempfile.mkdtemp(prefix=temporary_prefix(STAGING), suffix=".tmp", dir=out))


@contextmanager
def staged(out: Path) -> Iterator[Path]:
    """``temporary(out)`` for the block, removed afterwards whatever happens, and ``out``
    too when this call made it and it is left empty (a failure leaves no new folder)."""
    made = not out.exists()
    staging = temporary(out)
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if made and out.is_dir() and not any(out.iterdir()):
            out.rmdir()


def publish(staging: Path, out: Path, command: str, commit: str | None = None
            ) -> dict[str, str]:
    """Move every file under ``staging`` into ``out`` by the module's rule and mark what
    was written; ``staging`` is removed. Returns the new mark's files. ``commit`` names the
    file that says the set is whole (an audit's ``audit.json``): its earlier copy is
    removed before any file moves and the new one moves last, so while it is there every
    file of its set is too."""
    try:
        before = written(out)
        new = {p.relative_to(staging).as_posix(): p for p in sorted(staging.rglob("*"))
               if p.is_file()}
        _refuse_foreign(out, before, new, _intended(out))
        intent = {name: sha256(path) for name, path in new.items()}
        held = {name: sha256(out / name) for name in sorted(set(before) | set(new))
                if (out / name).is_file()}  # what each file holds now (the kit's, checked)
        write_atomic(out / MARK, canonical_json({  # every file may be old or new from here
            "command": command, "files": {**before, **intent},
            "previous": {name: sha for name, sha in held.items() if intent.get(name) != sha}}))
        if commit in new:
            (out / commit).unlink(missing_ok=True)
        for name, path in sorted(new.items(), key=lambda item: item[0] == commit):
            target = out / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_file():
                os.chmod(path, target.stat().st_mode & 0o7777)  # keep a replaced file's mode
            os.replace(path, target)
        for name in sorted(set(before) - set(new)):
            (out / name).unlink(missing_ok=True)
        files = {name: sha256(out / name) for name in new}
        record: dict[str, Any] = {"command": command, "files": files}
        write_atomic(out / MARK, canonical_json(record))
        return files
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _refuse_foreign(out: Path, before: dict[str, str], new: dict[str, Path],
                    previous: dict[str, str]) -> None:
    """Before anything moves: a user's file where the kit would write, and a file the kit
    wrote that was changed since, are refused by name (a file an interrupted publish left
    with its ``previous`` content is the kit's)."""
    for name in sorted(set(new) | set(before)):
        target = out / name
        for folder in list(Path(name).parents)[:-1]:  # nothing written through a link
            inside = out / folder
            if inside.is_symlink() or (inside.exists() and not inside.is_dir()):
                raise KitError(f"{inside}: a link or a file where the kit keeps a folder of "
                               "its output; move it, or name another folder")
        if not target.exists() and not target.is_symlink():
            continue
        if name not in before:
            raise KitError(f"{target}: a file the kit did not write stands where it would "
                           "write; move it, or name another folder")
        if target.is_symlink() or not target.is_file() or \
                sha256(target) not in (before[name], previous.get(name)):
            raise KitError(f"{target}: changed since the kit wrote it; move it, or name "
                           "another folder")
