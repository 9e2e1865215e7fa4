"""A child the kit starts dies with its starter (``kit.procs``): SIGKILL the starter and the
child is gone within seconds; without the starter's pid in its environment the same child
lives on (so the check can fail); a child whose starter is already gone exits at once,
the runtime worker's copy of the lines too; and the pid is not handed down to a
grandchild."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kit.paths import ROOT
from kit.procs import ORPHANED, PARENT
from tests.kill_at import running

# A starter that starts one child (with or without its pid in the child's environment),
# prints the child's pid, and waits.
STARTER = """
import os, subprocess, sys, time
from kit.procs import child_env
child = ("import sys, time; from kit.procs import die_with_parent; die_with_parent(); "
         "print('ready', flush=True); time.sleep(120)")
env = child_env() if sys.argv[1] == "yes" else dict(os.environ)
proc = subprocess.Popen([sys.executable, "-c", child], env=env, stdout=subprocess.PIPE,
                        text=True)
assert proc.stdout.readline() == "ready\\n"
print(proc.pid, flush=True)
proc.wait()
"""


def _child_after_killing_its_starter(follows: bool) -> tuple[int, bool]:
    with subprocess.Popen([sys.executable, "-c", STARTER, "yes" if follows else "no"],
                          cwd=ROOT, stdout=subprocess.PIPE, text=True) as starter:
        assert starter.stdout is not None
        child = int(starter.stdout.readline())
        assert running(child)
        os.kill(starter.pid, signal.SIGKILL)
        starter.wait(timeout=30)
    deadline = time.monotonic() + 10
    while running(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    return child, running(child)


def test_a_child_dies_with_its_starter_and_lives_on_without_the_pid() -> None:
    _, alive = _child_after_killing_its_starter(follows=True)
    assert not alive
    child, alive = _child_after_killing_its_starter(follows=False)
    try:
        assert alive  # the check above can fail: an orphan lives on
    finally:
        os.kill(child, signal.SIGKILL)


def test_a_child_whose_starter_is_gone_exits_at_once_the_workers_copy_too() -> None:
    gone = {**os.environ, PARENT: "1" if os.getpid() != 1 else "2"}  # not the starter
    kit = subprocess.run([sys.executable, "-m", "kit", "verify", "--claim", "A-052"],
                         cwd=ROOT, env=gone, capture_output=True, text=True, timeout=120,
                         check=False)
    assert kit.returncode == ORPHANED
    assert "the process that started this one" in kit.stderr
    worker = subprocess.run([sys.executable, "-I", str(ROOT / "kit/runtime/worker.py"),
                             "--describe"], env=gone, capture_output=True, text=True,
                            timeout=120, check=False)
    assert worker.returncode == ORPHANED
    assert "the process that started this one" in worker.stderr


def test_the_pid_is_not_handed_down_to_a_grandchild() -> None:
    program = ("import os; from kit.procs import die_with_parent; die_with_parent(); "
               f"print(os.environ.get({PARENT!r}, 'unset'))")
    proc = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False,
                          env={**os.environ, PARENT: str(os.getpid())})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "unset"


def _ignore_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def test_sigterm_becomes_stopped_unless_the_starter_ignored_it() -> None:
    """``stop_on_sigterm`` turns SIGTERM into ``Stopped``; a SIGTERM the starter ignored
    (as a shell ignores SIGINT for a background job) stays ignored."""
    program = ("import signal; from kit.procs import stop_on_sigterm; stop_on_sigterm(); "
               "print(signal.getsignal(signal.SIGTERM) == signal.SIG_IGN)")
    found = []
    for starter in (None, _ignore_sigterm):
        proc = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True,
                              text=True, timeout=120, check=False, preexec_fn=starter)
        assert proc.returncode == 0, proc.stderr
        found.append(proc.stdout.strip())
    assert found == ["False", "True"]


# A parent that turns SIGTERM into Stopped and runs a child (``run_child``) that says when
# it is ready and writes a file when it is sent SIGTERM.
PARENT_OF_CHILD = """
import sys
from kit.procs import Stopped, run_child, stop_on_sigterm
stop_on_sigterm()
child = ("import pathlib, signal, sys, time\\n"
         "def term(*_):\\n"
         "    pathlib.Path(sys.argv[1]).write_text('unwound'); sys.exit(0)\\n"
         "signal.signal(signal.SIGTERM, term)\\n"
         "print('ready', flush=True); time.sleep(120)")
try:
    run_child([sys.executable, "-c", child, sys.argv[1]])
except Stopped:
    sys.exit(143)
"""


def test_a_stopped_parent_sends_its_child_kit_command_sigterm(tmp_path: Path) -> None:
    """``reproduce-all`` stopped by SIGTERM while a step runs: the step's own kit command is
    sent SIGTERM too (``run_child``), so that it unwinds (kills its workers and containers)
    instead of being killed unwarned, and the stop goes on up."""
    mark = tmp_path / "unwound"
    with subprocess.Popen([sys.executable, "-c", PARENT_OF_CHILD, str(mark)], cwd=ROOT,
                          stdout=subprocess.PIPE, text=True) as parent:
        assert parent.stdout is not None
        assert parent.stdout.readline() == "ready\n"
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(timeout=60) == 143
    assert mark.read_text() == "unwound"
