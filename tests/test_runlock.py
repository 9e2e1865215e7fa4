"""The run folder's lock, its protocol record and the removal of stale temporaries:
two real ``python -m kit reproduce`` processes into one folder, and in-process holds."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kit.drift.protocol import PROTOCOL, load_protocol
from kit.drift.stages.pipeline import run_stage
from kit.errors import KitError, RunFolderError, RunLocked
from kit.paths import ROOT
from kit.runfolder import hashed_files
from kit.runlock import hold, protocol_digest, remove_temporaries
from tests.conftest import tiny_protocol


def kit_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "kit", *args]


def lock_is_free(path: Path) -> bool:
    """Whether nobody holds the ``flock`` of ``path`` (tried without waiting)."""
    with open(path, "rb") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(handle, fcntl.LOCK_UN)
        return True


def wait_for_holder(path: Path, process: subprocess.Popen[bytes], limit: float = 120) -> None:
    """Until ``process`` has written its pid into the lock file ``path``."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and process.poll() is None:
        if path.is_file() and path.read_text().strip() == str(process.pid):
            return
        time.sleep(0.05)
    raise AssertionError(f"{process.args} never held {path} (exit {process.poll()})")


def test_a_second_reproduce_into_a_held_folder_is_refused_naming_the_holder(
        tmp_path: Path) -> None:
    """Two runs started together into one folder: the second exits 2 at once with the
    first's pid, the first runs on; once the first is killed the lock is free."""
    run, protocol = tmp_path / "run", tiny_protocol(tmp_path)
    args = kit_command("reproduce", "--run", str(run), "--protocol", str(protocol),
                       "--backend", "venv")
    first = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for_holder(run / ".lock", first)
        second = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert first.poll() is None, "the first run ended before the second was refused"
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    assert second.returncode == 2
    assert second.stderr == (f"kit: error: {run / '.lock'}: another kit command (pid "
                             f"{first.pid}) is running in {run}; wait until it ends, or use "
                             "another --run folder\n")
    assert lock_is_free(run / ".lock")


def test_a_run_under_another_protocol_is_refused_naming_both_digests(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kit.__main__ import main

    run, small = tmp_path / "run", tiny_protocol(tmp_path)
    with pytest.raises(KitError, match="stage 'fetch' has not run"):
        run_stage("split", run_dir=run, protocol_file=small)  # the folder starts here
    first = protocol_digest(load_protocol(small))
    frozen = protocol_digest(load_protocol(PROTOCOL))
    assert first != frozen
    with pytest.raises(RunFolderError, match=f"started with the protocol of sha256 {first}, "
                                             f"not .* [(]sha256 {frozen}[)]"):
        run_stage("fetch", run_dir=run, protocol_file=PROTOCOL)
    assert main(["reproduce", "--run", str(run), "--protocol", str(PROTOCOL)]) == 2
    assert capsys.readouterr().err == (
        f"kit: error: {run / 'run.json'}: this run folder was started with the protocol of "
        f"sha256 {first}, not {PROTOCOL} (sha256 {frozen}); use another --run folder for "
        f"this protocol, or delete {run} to start it again under this one\n")
    assert sorted(p.name for p in run.iterdir()) == [".lock", "run.json"]  # nothing ran


def test_a_held_folder_is_refused_in_process_too_and_released_after(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with subprocess.Popen([sys.executable, "-c", (
            "import sys, time; from pathlib import Path\n"
            "from kit.runlock import hold\n"
            "with hold(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(60)"),
            str(run)], cwd=ROOT, stdout=subprocess.PIPE) as holder:
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline() == b"held\n"
            with pytest.raises(RunLocked, match=f"[(]pid {holder.pid}[)]"), hold(run):
                pass
        finally:
            holder.kill()
    with hold(run) as root:  # the kernel released a killed holder's lock
        assert (root / ".lock").read_text() == f"{os.getpid()}\n"
        with hold(run):  # re-entrant within one process
            pass
        assert not lock_is_free(root / ".lock")
    assert lock_is_free(run / ".lock")
    assert (run / ".lock").read_text() == ""


def test_stale_temporaries_go_when_the_folder_is_taken_and_results_stay(
        tmp_path: Path) -> None:
    run = tmp_path / "run"
    stale = [run / "infer/cand/resnet20/clean/.plain-rot10-bilinear.npz.k2j4x_9a.tmp",
             run / "fetch/models/.resnet20.onnx.tmp", run / ".manifest.json.abc123.tmp"]
    kept = run / "infer/cand/resnet20/clean/plain-orig.npz"
    for path in [*stale, kept]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"partial")
    assert hashed_files(run) == [kept]
    with hold(run):
        assert not any(path.exists() for path in stale)
        live = run / "infer/.plain-orig.npz.live.tmp"
        live.write_bytes(b"being written")
        with hold(run):  # a nested hold does not touch this process's own writers
            assert live.exists()
        assert remove_temporaries(run) == [live]
    assert kept.read_bytes() == b"partial"
