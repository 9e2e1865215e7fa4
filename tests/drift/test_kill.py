"""``kill -9`` and resume: the small protocol through ``python -m kit reproduce``, killed
(SIGKILL to the kit and its workers, as a closed terminal does) at six moments in four
stages, each with work of its stage still to do, two of them aimed at a worker's write of
an output (at least one must land in it), each kill resumed by the next run, the last run
left to finish. The finished
folder must hold byte for byte the run manifest of an uninterrupted run, no temporary
file (the killed writes left some), and a free lock; after each kill the stage it killed
has no record (the fault stage's too when killed the second time, though the run before
had finished it)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from kit.drift.stages.pipeline import finished
from kit.paths import ROOT
from kit.runfolder import Run
from tests.conftest import tiny_protocol
from tests.test_runlock import lock_is_free

# (stage killed, the stderr line after which it is killed, whether then to wait until a
# worker holds a temporary open): one moment per stage, each later in the pipeline than
# the one before, so each run resumes the one killed before.
MOMENTS = (
    ("fetch", r"fetch: training: 1/1 ", False),  # exporting the plain and sketch graphs
    ("fault", r"fault: clean calibration logits", False),  # workers writing probe outputs
    # infer's jobs run in batches of 48 on a LocalCluster; a progress line names its batch
    ("infer", r"worker: progress 30/48 jobs.*\(ref jobs 1-48\)", True),  # mid-write
    ("infer", r"worker: progress 30/48 jobs.*\(cand jobs 49-96\)", True),  # after the resumed ref
    # fault again (the run before finished it), before its probes: its fault.json must not
    # stand for this unfinished one. Not at "fault: models: 1/1", the stage's last line:
    # only two small writes follow it, and a kill raced them (and lost, once).
    ("fault", r"fault: clean calibration logits", False),
    ("score", r"score: tables: 4/", False),  # half the case tables written
)


# How long after its line a mid-write moment waits for a worker to hold a temporary open
# before it kills anyway (the stage still has seconds of jobs to run then); the test's last
# assertion still asks that one of the two infer kills landed in the middle of a write.
MID_WRITE_WAIT_S = 1.0


def descendants(pid: int) -> list[str]:
    """Every process below ``pid`` (Dask worker processes and the workers they start)."""
    found: list[str] = []
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            for child in children.read_text().split():
                found += [child, *descendants(int(child))]
        except OSError:  # the process has just gone
            continue
    return found


def writing_temporary(pid: int) -> bool:
    """Whether a descendant of ``pid`` (a worker) holds a ``*.tmp`` file open (Linux /proc)."""
    for child in descendants(pid):
        fds = Path(f"/proc/{child}/fd")
        try:
            if any(os.readlink(fds / fd).endswith(".tmp") for fd in os.listdir(fds)):
                return True
        except OSError:  # the child or the descriptor has just gone
            continue
    return False


def run_until(args: list[str], pattern: str | None, mid_write: bool = False
              ) -> tuple[int, list[str]]:
    """Run ``args`` in its own process group; SIGKILL the group at the first stderr line
    matching ``pattern`` (None: let it finish), with ``mid_write`` only once a worker then
    holds a temporary open. Returns (exit status, stderr lines)."""
    lines: list[str] = []
    seen = threading.Event()
    with subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, start_new_session=True) as proc:

        def read() -> None:  # drained apart, so that the run never blocks on its stderr
            assert proc.stderr is not None
            for line in proc.stderr:
                lines.append(line)
                if pattern is not None and not seen.is_set() and re.match(pattern, line):
                    if not mid_write:  # at once, not at the next poll: the moment is exact
                        with contextlib.suppress(ProcessLookupError):
                            os.killpg(proc.pid, signal.SIGKILL)
                    seen.set()

        reader = threading.Thread(target=read)
        reader.start()
        deadline = None
        while proc.poll() is None:
            if not seen.wait(0.05):
                continue
            if not mid_write:
                break  # the reader killed it
            deadline = deadline or time.monotonic() + MID_WRITE_WAIT_S
            # a write is a fraction of a millisecond: a scan can miss every one of a stage's
            # remaining writes, so past the deadline the kill lands between two of them
            if writing_temporary(proc.pid) or time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                break
        proc.wait()
        reader.join()
    return proc.returncode, lines


def test_runs_killed_at_six_moments_resume_to_the_uninterrupted_manifest(
        tiny_run: tuple[Run, Path], tmp_path: Path) -> None:
    uninterrupted, _ = tiny_run
    run = Run(tmp_path / "run")
    args = [sys.executable, "-m", "kit", "reproduce", "--run", str(run.root), "--protocol",
            str(tiny_protocol(tmp_path)), "--backend", "venv"]
    left = []
    for stage, pattern, mid_write in MOMENTS:
        code, lines = run_until(args, pattern, mid_write)
        assert code == -signal.SIGKILL, f"not killed at {pattern!r}:\n{''.join(lines[-20:])}"
        left.append(len(list(run.root.rglob("*.tmp"))))
        assert lock_is_free(run.root / ".lock")
        assert not run.record_path(stage).exists(), f"killed {stage} left its record"
        assert not finished(run)
    code, lines = run_until(args, None)
    assert code == 0, "".join(lines[-20:])
    assert (run.root / "manifest.json").read_bytes() == \
        (uninterrupted.root / "manifest.json").read_bytes()
    assert finished(run)
    assert sorted(run.root.rglob("*.tmp")) == []
    assert lock_is_free(run.root / ".lock")
    assert (run.root / ".lock").read_text() == ""
    assert left[2] + left[3] > 0, f"no kill in the middle of a worker's write: {left}"
