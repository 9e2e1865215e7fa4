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
from kit.runlock import check_protocol, hold, protocol_digest, remove_temporaries
from tests.conftest import dead_pid, tiny_protocol


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
        run_stage("split", run_dir=run, protocol_file=small)
    assert not run.exists()  # a failed first command leaves nothing behind
    with hold(run) as root:  # the folder starts here
        check_protocol(root, load_protocol(small), small)
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
    """A temporary whose writer is gone goes at the first hold; a live writer's (another
    run's, this process's) stays, and so does every ``.tmp`` of another name."""
    run, dead = tmp_path / "run", dead_pid()
    stale = [run / f"infer/cand/resnet20/clean/.plain-rot10-bilinear.npz.kit{dead}-k2j4x_9a.tmp",
             run / f"fetch/models/.resnet20.onnx.kit{dead}-abcdefgh.tmp",
             run / f".manifest.json.kit{dead}-abc12345.tmp"]
    kept = run / "infer/cand/resnet20/clean/plain-orig.npz"
    users = [run / ".chapter1.tex.tmp", run / "infer/.out.npz.abcd1234.tmp"]
    for path in [*stale, kept, *users]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"partial")
    (run / ".lock").touch()  # a run folder the kit made
    folder = run / f"fetch/.models.kit{dead}-zzzzzzzz.old.tmp"  # a folder moved aside
    (folder / "inner").mkdir(parents=True)
    assert hashed_files(run) == sorted([kept, *users])
    with hold(run):
        assert not any(path.exists() for path in [*stale, folder])
        assert all(path.read_bytes() == b"partial" for path in users)
        live = run / f"infer/.plain-orig.npz.kit{os.getpid()}-livelive.tmp"
        live.write_bytes(b"being written")
        with hold(run):  # a nested hold does not touch this process's own writers
            assert live.exists()
        assert remove_temporaries(run) == []  # its writer (this process) still runs
    assert kept.read_bytes() == b"partial"


def test_a_folder_of_the_users_is_refused_and_left_as_it_was(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``kit stage split`` into a folder the kit did not make, holding ``x/a.tmp`` (and a
    hidden ``.tmp`` file whose name is not the kit's): refused by name before the lock is
    taken, exit 2, and the folder holds what it held, no ``.lock``, no ``run.json``. The
    same folder emptied is taken; a failed take leaves it empty again."""
    from kit.__main__ import main

    run = tmp_path / "mine"
    for name in ("x/a.tmp", "x/.a.tmp/inner.txt", "notes.txt.tmp"):
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text("the user's")
    before = sorted(p.relative_to(run).as_posix() for p in run.rglob("*"))
    protocol = str(tiny_protocol(tmp_path))
    assert main(["stage", "split", "--run", str(run), "--protocol", protocol]) == 2
    assert f"{run}: a folder the kit did not make holds 'notes.txt.tmp' and 1 more" in \
        capsys.readouterr().err
    assert sorted(p.relative_to(run).as_posix() for p in run.rglob("*")) == before
    assert (run / "x" / "a.tmp").read_text() == "the user's"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["stage", "split", "--run", str(empty), "--protocol", protocol]) == 2
    assert "stage 'fetch' has not run" in capsys.readouterr().err
    assert list(empty.iterdir()) == []


@pytest.mark.parametrize("lock", ["user lock data\n", "12 34\n", "link"])
def test_a_users_lock_file_does_not_make_the_folder_the_kits(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], lock: str) -> None:
    """A ``.lock`` the kit did not write (other content than a pid, or a link) leaves the
    folder the user's: refused by name, the lock file and every other file as they were."""
    from kit.__main__ import main

    run = tmp_path / "mine"
    run.mkdir()
    (run / "run.json").write_text('{"mine": 1}')
    if lock == "link":
        (tmp_path / "elsewhere").write_text("12\n")
        os.symlink(tmp_path / "elsewhere", run / ".lock")
    else:
        (run / ".lock").write_text(lock)
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    protocol = str(tiny_protocol(tmp_path))
    assert main(["stage", "split", "--run", str(run), "--protocol", protocol]) == 2
    assert f"{run}: a folder the kit did not make holds '.lock' and 1 more" in \
        capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before


def test_only_the_kits_temporary_names_are_removed_and_links_are_not_followed(
        tmp_path: Path) -> None:
    run, elsewhere, dead = tmp_path / "run", tmp_path / "elsewhere", dead_pid()
    elsewhere.mkdir()
    (elsewhere / f".x.npz.kit{dead}-abcd1234.tmp").write_text("not in the run")
    run.mkdir()
    (run / "linked").symlink_to(elsewhere)
    (run / f".out.npz.kit{dead}-abcd1234.tmp").symlink_to(
        elsewhere / f".x.npz.kit{dead}-abcd1234.tmp")
    ours = run / "infer" / f".out.npz.kit{dead}-k2j4x_9a.tmp"
    ours.parent.mkdir()
    ours.write_text("partial")
    (run / "infer" / "a.tmp").write_text("the user's")
    (run / "infer" / ".out.npz.k2j4x_9a.tmp").write_text("the user's: no writer's pid")
    assert remove_temporaries(run) == [ours]
    assert (elsewhere / f".x.npz.kit{dead}-abcd1234.tmp").exists()
    assert (run / f".out.npz.kit{dead}-abcd1234.tmp").is_symlink()
    assert (run / "infer" / "a.tmp").exists()
    assert (run / "infer" / ".out.npz.k2j4x_9a.tmp").exists()


def test_a_failed_command_that_wrote_a_result_keeps_the_take(tmp_path: Path) -> None:
    """Once a result is written under the protocol, ``run.json`` and the lock stay."""
    run = tmp_path / "run"

    def stage_fails_after_writing() -> None:
        with hold(run) as root:
            check_protocol(root, {"a": 1}, tmp_path / "p.yaml")
            (root / "fetch").mkdir()
            raise RuntimeError("killed mid-stage")

    with pytest.raises(RuntimeError):
        stage_fails_after_writing()
    assert sorted(p.name for p in run.iterdir()) == [".lock", "fetch", "run.json"]


@pytest.mark.parametrize(("record", "what"), [
    ("{}", "(top): 'substrate' is a required property"),
    ('{"substrate": "digits", "mean": [0.5, 0.5, 0.5], "std": [0.2, 0.2, 0.2]}',
     "'models' is a required property"),
    ('{"substrate": "digits", "std": [0.2, 0.2, 0.2], "models": {}}',
     "'mean' is a required property"),
])
def test_a_fetch_record_without_what_later_stages_read_is_refused(
        tmp_path: Path, record: str, what: str) -> None:
    """``{}`` as fetch/fetch.json, or one without its mean or models: a FileFormatError
    naming the file, the field and the fix, never a KeyError in a later stage."""
    from kit.errors import FileFormatError
    from kit.runfolder import Run

    path = tmp_path / "fetch" / "fetch.json"
    path.parent.mkdir()
    path.write_text(record)
    with pytest.raises(FileFormatError) as caught:
        Run(tmp_path).record("fetch")
    assert str(caught.value).startswith(f"{path} (delete the stage folder")
    assert what in str(caught.value)
