"""One kit command at a time in a run folder, under one protocol.

    run_folder        the ``--run`` path checked (a folder, or creatable as one) at the boundary
    hold              an exclusive, non-blocking ``flock`` on ``<run>/.lock`` for a whole
                      command; the holder writes its pid there, a second command is refused
                      at once naming it; once held, the kit's stale temporaries are removed;
                      a command that fails before writing a result leaves the folder as it
                      was (the lock file, ``run.json`` and the folder removed if it made them)
    check_protocol    the folder's protocol sha256 (``<run>/run.json``), recorded at first
                      start; a run under another protocol is refused

Both files are run metadata, outside the run manifest (``common.UNHASHED``), so a replay
still compares results only. ``hold`` is re-entrant within a process (``reproduce`` holds
the folder and runs each stage, which holds it again).

Temporaries (the kit's one name, ``.NAME.kit<pid>-<random>.tmp``: ``kit.files.TEMPORARY``)
are what a killed writer leaves; at the first hold those whose writer is gone are removed
(a live process's, another run's included, stay). A ``*.tmp`` of any other name
(``x/a.tmp``, a nested project's ``.chapter1.tex.tmp``) is not the kit's and stays; links
are not followed.
A worker orphaned by a kill of the orchestrator alone (not of its process group) dies at
its next progress line (its stderr pipe is closed); a temporary it still writes then fails
to rename, and nothing complete is lost.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kit.errors import RunFolderError, RunLocked
from kit.files import canonical_json, read_json, remove_stale, write_atomic
from kit.runfolder import LOCK, REPLAY_MARK, RUN_STATE, say

# folders this process holds: resolved root -> [lock file descriptor, depth]
_HELD: dict[Path, list[int]] = {}
PID_WAIT_S = 0.5  # how long a refused command waits for a new holder to write its pid
LOCK_TRIES = 5  # a lock file removed under a waiting opener: open it again this often


def run_folder(root: Path, create: bool = True) -> Path:
    """``root`` resolved, once it is a folder (made when missing and ``create``);
    RunFolderError naming the path when it is a file or under one, or missing."""
    for path in (root, *root.parents):
        if path.exists() or path.is_symlink():
            if not path.is_dir():
                what = "a file" if path.is_file() else "not a folder"
                where = f"is {what}" if path == root else f"lies under {path}, {what}"
                raise RunFolderError(f"{root}: {where}, not a run folder; pass --run a folder "
                                     "(it is made when missing)")
            break
    if not root.is_dir():
        if not create:
            raise RunFolderError(f"{root}: no such run folder; run `python -m kit reproduce "
                                 f"--run {root}` first")
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RunFolderError(f"{root}: cannot make the run folder ({exc.strerror or exc})"
                                 "; pass --run a folder you can write") from exc
    return root.resolve()


@contextmanager
def hold(root: Path, create: bool = True) -> Iterator[Path]:
    """Hold ``root``'s lock for the block (re-entrant); yields the resolved folder. When
    the outermost block fails before any result is written (the folder's entries are
    those it found), what the take made goes again: the lock file, ``run.json`` and the
    folders it created."""
    missing = [path for path in (root, *root.parents)
               if not (path.exists() or path.is_symlink())]
    key = run_folder(root, create)
    if key in _HELD:
        _HELD[key][1] += 1
        try:
            yield key
        finally:
            _HELD[key][1] -= 1
        return
    refuse_foreign(key)
    made = [name for name in (LOCK, RUN_STATE) if not (key / name).exists()]
    fd = _acquire(key / LOCK)
    _HELD[key] = [fd, 1]
    found: set[str] | None = None
    undone = False
    try:
        remove_temporaries(key)
        found = _entries(key)
        yield key
    except BaseException:
        if found is not None and _entries(key) == found:  # nothing written: undo the take
            for name in made:
                (key / name).unlink(missing_ok=True)  # the lock still held: see _acquire
            undone = LOCK in made
        raise
    finally:
        del _HELD[key]
        _release(fd)
        for folder in missing if undone else []:  # the folders the take made, if empty
            try:
                folder.rmdir()
            except OSError:
                break


def _entries(root: Path) -> set[str]:
    """Every path under ``root`` but the lock and the protocol record (links not
    followed): what a failed command compares to tell whether it wrote anything."""
    found: set[str] = set()
    for folder, dirs, names in os.walk(root):
        here = Path(folder).relative_to(root)
        found.update((here / name).as_posix() for name in (*dirs, *names))
    return found - {LOCK, RUN_STATE}


def _acquire(path: Path) -> int:
    """The locked descriptor of ``path`` with this pid written in; RunLocked at once when
    another process holds it."""
    for _ in range(LOCK_TRIES):
        fd = _lock(path)
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # a failed holder removed the file it had made: open the new one
    else:
        raise RunFolderError(f"{path}: the lock file keeps being replaced; wait until the "
                             "other kit command ends")
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _lock(path: Path) -> int:
    """``path`` opened (made when missing) and ``flock``ed, without waiting."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)  # a new one: the umask's mode
    except OSError as exc:
        raise RunFolderError(f"{path}: cannot open the run folder's lock file "
                             f"({exc.strerror or exc}); pass --run a folder you can write"
                             ) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise RunLocked(f"{path}: another kit command ({holder}) is running in "
                        f"{path.parent}; wait until it ends, or use another --run folder"
                        ) from None
    except OSError as exc:
        os.close(fd)
        raise RunFolderError(f"{path}: cannot lock the run folder ({exc.strerror or exc}); "
                             "use a --run folder on a local file system") from exc
    return fd


def _holder(fd: int) -> str:
    """``pid N`` as the holder wrote it (it writes just after it locks, so wait briefly)."""
    deadline = time.monotonic() + PID_WAIT_S
    while True:
        written = os.pread(fd, 32, 0).decode(errors="replace").strip()
        if written or time.monotonic() > deadline:
            return f"pid {written}" if written.isdigit() else "pid unknown"
        time.sleep(0.02)


def refuse_foreign(key: Path) -> None:
    """A RunFolderError naming a folder the kit did not make (no ``.lock`` from an
    earlier take, ``_kits_lock``; no replay mark) that holds anything: such a folder is
    used only while empty (the one rule of ``kit.owned``)."""
    if _kits_lock(key / LOCK) or (key / REPLAY_MARK).exists():
        return
    found = sorted(p.name for p in key.iterdir())
    if found:
        more = f" and {len(found) - 1} more" if len(found) > 1 else ""
        raise RunFolderError(f"{key}: a folder the kit did not make holds {found[0]!r}{more}; "
                             "pass --run a new or empty folder (or one the kit made)")


def _kits_lock(path: Path) -> bool:
    """Whether ``path`` is a lock file the kit left: a plain file, empty (released) or
    holding its holder's pid and a newline. A ``.lock`` of anything else is the user's."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        with open(path, "rb") as handle:
            held = handle.read(32)
    except OSError:
        return False
    return re.fullmatch(rb"([1-9][0-9]{0,9}\n)?", held) is not None


def _release(fd: int) -> None:
    """Clear the pid, unlock and close (the kernel unlocks too when a holder is killed)."""
    try:
        os.ftruncate(fd, 0)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def remove_temporaries(root: Path) -> list[Path]:
    """Remove every temporary of the kit's naming whose writer is gone (``kit.files.stale``)
    under ``root``, files and folders, links not followed; returns them."""
    found = remove_stale(root)
    if found:
        say(f"run: removed {len(found)} stale temporaries of a killed run in {root}")
    return found


def protocol_digest(protocol: dict[str, Any]) -> str:
    """sha256 of the protocol's canonical JSON (its content, not its layout or comments)."""
    return hashlib.sha256(canonical_json(protocol)).hexdigest()


def check_protocol(root: Path, protocol: dict[str, Any], source: Path) -> str:
    """Record the protocol's digest in ``<root>/run.json`` at first start, or refuse a
    protocol other than the recorded one; returns the digest. Call it while holding root."""
    path = root / RUN_STATE
    digest = protocol_digest(protocol)
    fix = f"delete {root} and run again"
    state = read_json(path, fix) if path.is_file() else {}
    if not isinstance(state, dict):
        raise RunFolderError(f"{path}: not a JSON object; {fix}")
    recorded = state.get("protocol_sha256")
    if recorded is None:
        write_atomic(path, canonical_json({**state, "protocol_sha256": digest}))
    elif recorded != digest:
        raise RunFolderError(
            f"{path}: this run folder was started with the protocol of sha256 {recorded}, "
            f"not {source} (sha256 {digest}); use another --run folder for this protocol, "
            f"or delete {root} to start it again under this one")
    return digest
