"""A progress line at least every 30 s while something long runs (``kit.heartbeat``): the
lines come while the block runs, with the time left of an expected duration, honest once
it runs late."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading

from kit.heartbeat import heartbeat, minutes, remaining
from kit.paths import ROOT


def test_a_heartbeat_prints_while_a_long_step_runs() -> None:
    lines: list[str] = []
    three = threading.Event()

    def emit(line: str) -> None:
        lines.append(line)
        if len(lines) >= 3:
            three.set()

    with heartbeat("building x", expected=0.01, every=0.02, emit=emit):
        assert three.wait(30)  # the block runs until the third line came
    assert lines[0].startswith("building x: still running, 0 s so far, over the expected")
    assert remaining(10, 70) == ", about 60 s left"
    assert remaining(10, 300) == ", about 4.8 min left"
    assert remaining(0, 3600) == ", about 60 min left"
    assert remaining(200, 60) == ", over the expected 60 s by 2.3 min"
    assert remaining(10, None) == ""


def test_times_print_in_seconds_tenths_of_a_minute_or_minutes() -> None:
    assert minutes(89) == "89 s"
    assert minutes(90) == "1.5 min"
    assert minutes(120) == "2.0 min"
    assert minutes(1500) == "25 min"


WRITER = """
import sys
from kit.heartbeat import stderr_line
for i in range(4000):
    stderr_line(f"worker: progress {i}/4000 jobs (batch {sys.argv[1]})")
"""


def test_processes_sharing_stderr_unbuffered_never_run_two_lines_into_one() -> None:
    # a run's Dask workers share the kit's stderr; with PYTHONUNBUFFERED print() writes a
    # line's text and its newline apart, and two workers' lines ran together (CI, once)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    read, write = os.pipe()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, name], cwd=ROOT, env=env,
                              stderr=write) for name in ("a", "b", "c")]
    os.close(write)
    with os.fdopen(read) as stream:
        lines = stream.read().splitlines()
    assert [proc.wait() for proc in procs] == [0, 0, 0]
    whole = re.compile(r"worker: progress \d+/4000 jobs \(batch [abc]\)")
    assert len(lines) == 12000
    assert [text for text in lines if not whole.fullmatch(text)] == []
