"""Private scratch folders that a killed process cannot leak for good.

A folder is named ``<prefix><pid>-<random>``: the pid of the process that made it. A
``kill -9`` skips every ``finally``, so the folder survives its process; the next process
that makes a folder with the same prefix in the same place removes every such folder
whose process is gone (a live process's folder, or another user's, is left alone).
Used for the ``kit run`` staging folders (``.kit-exchange-`` beside the output) and the
worker's job folders (``kit-jobs-`` in the system's temporary folder).

A scratch folder inside a folder the kit writes (a docker worker's output folder inside a
run folder: ``temporary``) carries the kit's temporary name instead,
``.NAME.kit<pid>-<random>.tmp`` (``kit.runtime.worker.TEMPORARY``), so that the run lock's
sweep of a killed run's temporaries (``kit.runlock``) removes it with the rest, whatever
the rerun runs.

What a container reads is readable to every user whatever the umask (``SHARED_FILE``,
``SHARED_FOLDER``): on a root host the docker worker runs as the image's own user
(``CONTAINER_UID``), not as the one who wrote it. Everything else the kit makes gets the
mode the umask gives.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kit.runtime.worker import alive, stale, temporary_prefix

# The modes of a file the host writes for a container to read, and of a folder holding one.
SHARED_FILE, SHARED_FOLDER = 0o644, 0o755


def owner(path: Path, prefix: str) -> int | None:
    """The pid in a scratch folder's name, or None when the name has none."""
    pid = path.name[len(prefix):].split("-", 1)[0]
    return int(pid) if path.name.startswith(prefix) and pid.isdigit() and int(pid) > 0 \
        else None


def remove_stale(folder: Path, prefix: str) -> list[Path]:
    """Remove the scratch folders in ``folder`` whose process is gone; returns them."""
    removed = []
    for path in sorted(folder.glob(prefix + "*")):
        pid = owner(path, prefix)
        if pid is not None and path.is_dir() and not path.is_symlink() and not alive(pid):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def make(folder: Path, prefix: str) -> Path:
    """A new private ``<prefix><pid>-<random>`` folder (``SHARED_FOLDER``) in ``folder``, after
    removing the folders of dead processes there. OSError propagates, for the caller to
    name its own file."""
    folder.mkdir(parents=True, exist_ok=True)
    remove_stale(folder, prefix)
    tmp = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=folder))
    os.chmod(tmp, SHARED_FOLDER)  # a container reads the jobs, or writes its outputs, here
    return tmp


@contextmanager
def scratch(folder: Path, prefix: str) -> Iterator[Path]:
    """``make``'s folder, removed on exit."""
    tmp = make(folder, prefix)
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def temporary(folder: Path, name: str) -> Iterator[Path]:
    """A new private folder of the kit's temporary name for ``name`` in ``folder``
    (``SHARED_FOLDER``), after removing those of the same name whose process is gone;
    removed on exit."""
    for path in sorted(folder.glob(f".{name}.kit*")):
        if stale(path.name) and path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=temporary_prefix(name), suffix=".tmp", dir=folder))
    try:
        os.chmod(tmp, SHARED_FOLDER)  # the container writes its outputs here
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
