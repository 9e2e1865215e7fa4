"""A process the kit starts dies with the kit process that started it.

A SIGKILL (a user's ``kill -9``, the OOM killer, a CI timeout) reaches only the process it
names: a study that ``reproduce-all`` runs, or a runtime worker an audit runs, would go on
writing into a run folder after its parent is gone, beside the parent's rerun. So every
child the kit starts learns who started it (``child_env`` puts the parent's pid in
``KIT_PARENT_PID``), and its first act (``die_with_parent``: ``python -m kit`` and the
runtime worker, ``kit/runtime/worker.py``, which carries its own copy of these lines)
asks Linux to SIGKILL it when that parent ends (``prctl(PR_SET_PDEATHSIG)``), then exits
at once if the parent has already gone (the moment before the request). The variable is
taken out of the child's own environment, so a grandchild knows only the parent its own
start names.

A SIGTERM (``kill``, ``timeout``) or a Ctrl-C stops a command as an exception instead
(``stop_on_sigterm``, ``Stopped``): it unwinds, so every staging folder it made is removed
and every worker it started is closed on the way out, and ``python -m kit`` ends with one
line and the shell's status (130 or 143), never a traceback. A child kit command
(``reproduce-all``'s steps) is sent SIGTERM on the way, to unwind the same (``run_child``).

Linux delivers the signal when the *thread* that started the child ends; every spawn site
waits for its child on the thread that started it. Elsewhere than Linux no request is
made, and only the check at start runs. A Docker worker is a ``docker run`` client whose
container does not end with it: a stop (Ctrl-C, SIGTERM) kills the container by name
(``stop_children``), a SIGKILL of the kit leaves it to run to its end;
the ``venv`` backend is covered either way. Every child a thread waits on (a worker, an
environment's pip, an image's ``docker build``) is registered while it runs
(``stoppable``), so a stop kills it before the threads are waited for (``stop_children``);
a build is killed with every process below it (``run_stoppable``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

PARENT = "KIT_PARENT_PID"
PR_SET_PDEATHSIG = 1
# The exit status of a child whose parent was gone before it could ask to follow it.
ORPHANED = 3
# Seconds a stopped kit command's child kit command has to unwind before it is killed.
CHILD_GRACE_S = 30.0


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's environment) naming this process as the parent."""
    return {**(os.environ if env is None else env), PARENT: str(os.getpid())}


def die_with_parent() -> None:
    """Follow the parent ``KIT_PARENT_PID`` names (module docstring); nothing when unset."""
    named = os.environ.pop(PARENT, None)
    if not named:
        return
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if str(os.getppid()) != named:
        print(f"kit: error: the process that started this one ({named}) is gone",
              file=sys.stderr)
        os._exit(ORPHANED)


class Stopped(KeyboardInterrupt):
    """A SIGTERM, raised where the command is, as Ctrl-C raises ``KeyboardInterrupt``."""

    status = 128 + signal.SIGTERM


def stop_on_sigterm() -> None:
    """Turn SIGTERM into ``Stopped`` in this process (``python -m kit`` only: a library
    user's handlers stay theirs). A SIGTERM the starter ignored stays ignored, as Python
    leaves an ignored SIGINT (a shell's background job) ignored."""
    if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
        return

    def stop(signum: int, frame: object) -> None:
        raise Stopped

    signal.signal(signal.SIGTERM, stop)


def run_child(argv: list[str], **options: object) -> int:
    """Run a child kit command (``argv``, naming this process as its parent) to its end and
    return its exit status. Stopped while it runs (Ctrl-C, SIGTERM), the child is sent
    SIGTERM, so that it unwinds too (its workers and containers killed, its staging
    removed), and is killed if it has not ended within ``CHILD_GRACE_S``; the stop then
    goes on up."""
    with subprocess.Popen(argv, env=child_env(), **options) as proc:  # type: ignore[call-overload]
        try:
            return int(proc.wait())
        except KeyboardInterrupt:
            proc.terminate()
            try:
                proc.wait(timeout=CHILD_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
            raise


# The children this process's threads wait on now (a worker, an environment's pip, an
# image's docker build), each with what else a stop must kill (a worker's container).
_TRACKED: dict[int, tuple[subprocess.Popen[Any], Callable[[], None] | None]] = {}
_TRACKED_LOCK = threading.Lock()
_STOPPING = threading.Event()  # set by ``stop_children``: a child started later is killed


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children...), from ``/proc``; none
    where there is no ``/proc`` to read."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):  # a process that ended while it was read
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        below = parents.get(todo.pop(), [])
        found += below
        todo += below
    return found


def _kill(proc: subprocess.Popen[Any], also: Callable[[], None] | None) -> None:
    try:
        if also is not None:
            also()
    finally:
        if proc.poll() is None:
            below = descendants(proc.pid)
            proc.kill()  # first, so that it starts no more
            for pid in below:  # its own children (a compiler pip started) too
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def stoppable(proc: subprocess.Popen[Any], also: Callable[[], None] | None = None
              ) -> Iterator[None]:
    """While the block runs, ``proc`` is a child a stop kills (``stop_children``), with
    ``also`` (a container's kill) first; it is killed at once if the command is stopping
    already (started by a thread as it stopped), and whenever an error or a stop leaves
    the block. It is killed with every process below it (a compiler pip started, a
    command a shell runs), which could hold its pipes open."""
    try:
        with _TRACKED_LOCK:
            _TRACKED[proc.pid] = (proc, also)
            stopping = _STOPPING.is_set()
        if stopping:
            _kill(proc, also)
        yield
    except BaseException:
        _kill(proc, also)
        raise
    finally:
        with _TRACKED_LOCK:
            _TRACKED.pop(proc.pid, None)


def stop_children() -> None:
    """Kill every child this process's threads wait on now (``stoppable``), and any a
    thread starts later: the threads then end with a failed child. For a command that
    stops (the process ends)."""
    with _TRACKED_LOCK:
        _STOPPING.set()
        running = list(_TRACKED.values())
    for proc, also in running:
        _kill(proc, also)


def run_stoppable(cmd: list[str], env: dict[str, str] | None = None,
                  timeout: float | None = None, also: Callable[[], None] | None = None
                  ) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(cmd, capture_output=True, text=True)`` as a child a stop kills
    with every process below it (a build: pip and the compilers it starts, ``docker
    build``), so that a stop while a thread builds does not wait for the build to end. It
    stays in the kit's process group, so that a terminal's Ctrl-C or hang-up reaches it
    as it reaches the kit (a Dask worker process's build included). ``also``: what a stop
    kills first (a container, ``stoppable``)."""
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env) as proc, stoppable(proc, also):
        out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
