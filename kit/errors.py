"""Every error the kit raises on purpose, in one place.

    KitError                 base: a message that names the file and the fix
    ├── ConfigError          a declarative file (runtimes.toml, a lock) is wrong
    ├── EnvironmentFailed    a virtual environment could not be built from its lock
    ├── BackendUnavailable   the requested backend cannot run here (no daemon, no image)
    ├── ImageError           an image is missing, stale, or failed to build
    ├── WorkerFailed         the worker refused or failed a job; carries its stderr
    ├── FileFormatError      a file the kit reads (a ledger, a manifest, a protocol, an MR
    │                        card, a shipped record or table) cannot be read as what it
    │                        should be: unreadable, not UTF-8, malformed JSON or YAML, a
    │                        YAML alias bomb, a damaged or pickled .npz (``kit/files.py``)
    ├── RunFolderError       a run folder (``--run``) is a file, cannot be made, or was
    │   │                    started under another protocol (``kit/runlock.py``)
    │   └── RunLocked        another kit command holds the run folder's lock (its pid)
    ├── InputRefused         ``kit run`` refuses a model, its external data, an input .npz
    │                        or an output path before any runtime sees them
    │                        (``kit/runtime/exchange.py``)
    └── RecountError         a shipped record's summary disagrees with the per-case values
                             it summarises (``kit/sciml/recount.py``, the sweep's and the
                             fetch record's recounts): never an undecidable value, always a
                             failed check

The worker itself (``kit/runtime/worker.py``) cannot import this package, since it runs inside
the runtime images with numpy and onnxruntime only; it raises ``kit.runtime.worker.JobError``
and exits 2, and the orchestrator turns that exit into ``WorkerFailed``.
The command line prints ``kit: error: MESSAGE`` and exits 2 for any KitError, and maps
the two lower-level errors a user's setting causes at the same boundary: an operating-system
error on a path (``path_problem``) and a module missing from the Python that runs the
command (``missing_module``). Of onnxruntime's own message, ``onnxruntime_said`` keeps
what it said, for a ``kit audit`` and a ``kit run`` refusal alike.
"""

from __future__ import annotations

import errno
import re
import sys
from pathlib import Path


class KitError(Exception):
    """Base class; the message is meant for a person and names the file involved."""


class RecountError(KitError):
    """A summary in a shipped record contradicts what it summarises (named file, field)."""


class Undefined(KitError):
    """A value the evidence leaves undefined: a share of nothing (a precision where nothing
    was flagged) or any other quotient by zero, so the rule has no number to judge (named
    file, field, or the recompute function and its arguments)."""


class ConfigError(KitError):
    """A configuration or lock file is missing or malformed."""


class EnvironmentFailed(KitError):
    """A virtual environment could not be created or installed from its lock."""


class BackendUnavailable(KitError):
    """The requested backend cannot run on this machine."""


class ImageError(KitError):
    """A runtime image is missing, was built from another lock, or failed to build."""


class WorkerFailed(KitError):
    """The worker exited non-zero or refused a job; ``stderr`` holds what it said,
    ``reason`` its own one line ``FILE: WHAT`` (the file as the job named it) where it gave
    one, ``release`` the onnxruntime release it ran. A command that staged the files the
    job names (``kit run``, ``kit audit``) names the user's files from these."""

    def __init__(self, message: str, stderr: str = "", reason: str | None = None,
                 release: str | None = None) -> None:
        super().__init__(message)
        self.stderr, self.reason, self.release = stderr, reason, release


class FileFormatError(KitError):
    """A user-facing file cannot be read as what it should be; raised by ``kit.files``,
    the one boundary where such files are read. The message is ``FILE: WHAT`` (and the fix
    where there is one)."""


class RunFolderError(KitError):
    """A run folder cannot be used: a file stands at its path, it cannot be made or
    locked, or it was started under another protocol."""


class RunLocked(RunFolderError):
    """Another kit command (its pid in the message) holds the run folder's lock."""


class InputRefused(KitError):
    """A file handed to ``kit run`` is refused at the boundary: unreadable, a model whose
    external data leaves its folder, or an output path that is a folder, lies under a
    file, or would overwrite the model or the inputs."""


STATUS = re.compile(r"\[ONNXRuntimeError\] : \d+ : \w+ : ")
LOADING = re.compile(r"Load model from .+? failed:")
SOURCE = re.compile(r"\S+\.(?:h|hpp|cc|cpp|cu):\d+ ")  # /onnxruntime_src/.../x.h:46


def onnxruntime_said(text: str) -> str:
    """onnxruntime's message as one line, without its status prefix (``[ONNXRuntimeError]
    : 1 : FAIL :``), the path it loaded, and each C++ source location with the function
    signature after it (``model_load_utils.h:46 void onnxruntime::F(args) const``)."""
    text = LOADING.sub("", STATUS.sub("", text))
    while (found := SOURCE.search(text)) is not None:
        text = text[:found.start()] + _past_signature(text, found.end())
    return " ".join(text.split())


def _past_signature(text: str, start: int) -> str:
    """``text`` from ``start`` past the C++ function signature there (to the parenthesis
    closing its arguments, then a lambda's ``::<lambda()>`` and ``const``); from ``start``
    where the words before the first parenthesis are a sentence, not a signature."""
    opening = text.find("(", start)
    if opening < 0 or ". " in text[start:opening] or ": " in text[start:opening]:
        return text[start:]
    depth = 0
    for at in range(opening, len(text)):
        depth += {"(": 1, ")": -1}.get(text[at], 0)
        if depth == 0:
            rest = text[at + 1:]
            return rest[re.match(r"(::\S*)?( const)?\s*", rest).end():]  # type: ignore[union-attr]
    return text[start:]


def first_line(text: str) -> str:
    """The first line of a lower-level error's message that says something, its runs of
    white space as one space (a ``kit: error`` is one line)."""
    return next((" ".join(line.split()) for line in text.splitlines() if line.strip()), "")


def missing_module(exc: ModuleNotFoundError, command: str) -> str:
    """Which environment has what a command (``python -m kit verify``) needs, and how to
    build it."""
    if command.endswith((" verify", " reports")):
        build, python = "python3 -m kit.runtime.venvs verify", ".venv-verify/bin/python"
    else:
        build, python = "python3 -m kit.runtime.venvs tools", ".venv/bin/python"
    return (f"{command} needs the module {exc.name!r}, which this Python "
            f"({sys.executable}) does not have; build its environment with `{build}` and "
            f"run `{python} {command.removeprefix('python ')}`")


def path_problem(exc: OSError) -> str:
    """An operating-system error on a path, in words naming the path (no traceback)."""
    names = [str(n) for n in (exc.filename, exc.filename2) if n is not None]
    where = " -> ".join(names) if names else "a file the command reads or writes"
    what = exc.strerror or str(exc)
    if exc.errno in (errno.EEXIST, errno.ENOTDIR) and names and Path(names[0]).is_file():
        what = "is a file where a folder is needed"
    return f"{where}: {what}; check the path and its folder's permissions"
