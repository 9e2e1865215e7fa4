"""A progress line at least every ``EVERY`` seconds while something long runs.

An environment build, a study's training or a whole ``reproduce-all`` step can run for
tens of minutes in one child process that prints nothing; a person watching must still
see that it runs, for how long it has, and (where an expected time is known) how long it
should still take, updated from the time it has actually taken so far::

    with heartbeat("venvs: building .venv: installing 141 packages"):
        subprocess.run(...)

prints ``... still running, 30 s so far`` every 30 s on stderr, and with ``expected`` the
time left (``about 4 min left``, or ``over the expected 12 min by 3 min`` once it runs
late, so the line never claims a remaining time the run has already used up).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator

EVERY = 30.0  # seconds between two lines


def stderr_line(text: str) -> None:
    """Write ``text`` and its newline to stderr in one write. ``print`` writes them apart,
    and under ``PYTHONUNBUFFERED`` (CI sets it) each goes out at once: processes that share
    stderr (a run's Dask workers and the kit itself) then run two lines into one."""
    sys.stderr.write(f"{text}\n")
    sys.stderr.flush()


def minutes(seconds: float) -> str:
    """``75 s`` below 90 s, ``2.5 min`` below 10 min, ``25 min`` above: how every progress
    line prints a time (two lines 30 s apart never print the same figure)."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 600 else f"{seconds / 60:.0f} min"


def remaining(elapsed: float, expected: float | None) -> str:
    """The time left of an ``expected`` duration after ``elapsed``, said honestly once it
    runs late; empty when nothing is expected."""
    if expected is None:
        return ""
    if elapsed <= expected:
        return f", about {minutes(expected - elapsed)} left"
    return f", over the expected {minutes(expected)} by {minutes(elapsed - expected)}"


@contextlib.contextmanager
def heartbeat(what: str, expected: float | None = None, every: float = EVERY,
              emit: Callable[[str], None] | None = None) -> Iterator[None]:
    """Print ``what: still running, N so far[, time left]`` every ``every`` seconds until
    the block ends (a daemon thread; nothing is printed for a block shorter than
    ``every``)."""
    out = emit or stderr_line
    started, stop = time.monotonic(), threading.Event()

    def beat() -> None:
        while not stop.wait(every):
            elapsed = time.monotonic() - started
            out(f"{what}: still running, {minutes(elapsed)} so far"
                f"{remaining(elapsed, expected)}")

    thread = threading.Thread(target=beat, name="kit-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
