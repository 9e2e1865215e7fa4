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
    └── InputRefused         ``kit run`` refuses a model, its external data, an input .npz
                             or an output path before any runtime sees them
                             (``kit/runtime/exchange.py``)

The worker itself (``kit/runtime/worker.py``) cannot import this package, since it runs inside
the runtime images with numpy and onnxruntime only; it raises ``kit.runtime.worker.JobError``
and exits 2, and the orchestrator turns that exit into ``WorkerFailed``.
The command line prints ``kit: error: MESSAGE`` and exits 2 for any KitError.
"""

from __future__ import annotations


class KitError(Exception):
    """Base class; the message is meant for a person and names the file involved."""


class ConfigError(KitError):
    """A configuration or lock file is missing or malformed."""


class EnvironmentFailed(KitError):
    """A virtual environment could not be created or installed from its lock."""


class BackendUnavailable(KitError):
    """The requested backend cannot run on this machine."""


class ImageError(KitError):
    """A runtime image is missing, was built from another lock, or failed to build."""


class WorkerFailed(KitError):
    """The worker exited non-zero; ``stderr`` holds what it said."""

    def __init__(self, message: str, stderr: str = "") -> None:
        super().__init__(message)
        self.stderr = stderr


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
