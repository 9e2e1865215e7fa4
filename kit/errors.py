"""Every error the kit raises on purpose, in one place.

    KitError                 base: a message that names the file and the fix
    ├── ConfigError          a declarative file (runtimes.toml, a lock) is wrong
    ├── EnvironmentFailed    a virtual environment could not be built from its lock
    ├── BackendUnavailable   the requested backend cannot run here (no daemon, no image)
    ├── ImageError           an image is missing, stale, or failed to build
    └── WorkerFailed         the worker refused or failed a job; carries its stderr

The worker itself (``kit/worker.py``) cannot import this package, since it runs inside
the runtime images with numpy and onnxruntime only; it raises ``kit.worker.JobError``
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
