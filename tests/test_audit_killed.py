"""The kill harness (``tests/kill_at.py``) on ``kit audit --out``: the report folder is made
inside a folder of the user's that holds files named like the kit's own (``.x.tmp``,
``audit.json``, ``index.html``, a ``notes`` folder of mode 0700). SIGKILLed at its writes
(every one in ``nox -s hardening``, three moments in the default tests), it leaves no report
that looks valid: ``audit.json``, the record, moves last (``kit.owned.publish``'s
``commit``), so while it is there, whole, the page and the work folder are too; the next
audit finishes with the same record as an uninterrupted one (its wall time
aside), and every user file keeps its bytes and mode."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest

from kit.corpus.cases import CASES
from kit.paths import ROOT
from tests.kill_at import changed_user_files, live_writers, seed_user_files

EVERY = int(os.environ.get("KIT_KILL_EVERY", "0"))
USER_FILES = {".x.tmp": 0o600, "audit.json": 0o640, "index.html": 0o644,
              "notes/mine.txt": 0o600}


def audit_killed_at(kill_at: int, model: Path, inputs: Path,
                    out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tests.kill_at", str(kill_at), "audit",
                           str(model), "--inputs", str(inputs), "--from", "1.20.1",
                           "--to", "1.29.0", "--out", str(out), "--workers", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def record(out: Path) -> dict[str, object]:
    found = json.loads((out / "audit.json").read_text())
    found.pop("wall_s")
    return found


def test_kit_audit_killed_at_its_writes_keeps_the_users_files(tmp_path: Path) -> None:
    case = next(c for c in CASES if c.id == "pad-avgpool-fusion")
    built = case.build(0)
    model, inputs = tmp_path / "host.onnx", tmp_path / "host.npz"
    onnx.save(built.model, str(model))
    np.savez(inputs, **built.inputs)
    done = tmp_path / "done"
    done.mkdir()
    proc = audit_killed_at(0, model, inputs, done / "report")
    assert proc.returncode == 1, proc.stderr[-2000:]  # the case's defect: beyond
    writes = int(proc.stderr.rsplit("kill_at: ", 1)[1].split()[0])
    assert writes >= 10
    expected = record(done / "report")
    moments = range(1, writes + 1) if EVERY == 1 else sorted({1, writes // 2, writes})
    for kill_at in moments:
        folder = tmp_path / f"k{kill_at}"
        folder.mkdir()
        seed_user_files(folder, USER_FILES)
        out = folder / "report"
        killed = audit_killed_at(kill_at, model, inputs, out)
        assert killed.returncode == -9, (kill_at, killed.stderr[-500:])
        if (out / "audit.json").is_file():  # the record moves last: then the rest is there
            json.loads((out / "audit.json").read_text())  # whole
            assert (out / "index.html").is_file(), kill_at
            assert len(list((out / "work" / "outputs").rglob("*.npz"))) == 10, kill_at
        assert changed_user_files(folder, USER_FILES) == [], kill_at
        assert live_writers(folder, 1.5) == [], kill_at
        again = audit_killed_at(0, model, inputs, out)
        assert again.returncode == 1, (kill_at, again.stderr[-500:])
        assert record(out) == expected, kill_at
        assert sorted(p.name for p in folder.iterdir()) == \
            sorted([".x.tmp", "audit.json", "index.html", "notes", "report"]), kill_at
        assert (folder / "notes").stat().st_mode & 0o7777 == 0o700
        shutil.rmtree(folder)


def test_an_audit_killed_while_both_releases_run_leaves_no_worker(tmp_path: Path) -> None:
    """The two releases' workers run at once, each started from a thread of the audit
    (``kit.runtime.scale``, ``threads``): SIGKILLed while they run, the audit takes both
    down with it (``kit.procs``), and a rerun gives an uninterrupted audit's record. (A
    worker here would also die at its next progress line, into the dead audit's pipe,
    after writing the output of the job it was in; ``tests/test_procs.py`` checks the
    death with the starter itself.)"""
    case = next(c for c in CASES if c.id == "pad-avgpool-fusion")
    built = case.build(0)
    model, inputs = tmp_path / "host.onnx", tmp_path / "host.npz"
    onnx.save(built.model, str(model))
    np.savez(inputs, **built.inputs)
    out = tmp_path / "audit" / "report"
    command = [sys.executable, "-m", "kit", "audit", str(model), "--inputs", str(inputs),
               "--from", "1.20.1", "--to", "1.29.0", "--out", str(out), "--workers", "2"]
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL) as parent:
        deadline = time.monotonic() + 300
        while len([p for p in live_writers(tmp_path / "audit", 0) if p != parent.pid]) < 2:
            assert parent.poll() is None, "the audit ended before both workers ran"
            assert time.monotonic() < deadline
            time.sleep(0.02)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=60)
    assert live_writers(tmp_path / "audit", 1.5) == []
    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300,
                           check=False)
    assert again.returncode == 1, again.stderr[-2000:]  # the case's defect: beyond
    assert json.loads((out / "audit.json").read_text())["verdict"] == "beyond clean drift"


def _long_loop(path: Path) -> None:
    """A model that runs until stopped: a Loop of 10**12 iterations adding 1."""
    from onnx import TensorProto, helper

    body = helper.make_graph(
        [helper.make_node("Add", ["v", "one"], ["v_out"]),
         helper.make_node("Identity", ["cond"], ["cond_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, None)],
        [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "", "x"], ["y"], body=body)], "long",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor("trips", TensorProto.INT64, [], [10**12])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))


def _containers(pid: int) -> list[str]:
    """The containers process ``pid`` started that run (``kit-<pid>-...``; none without a
    Docker daemon)."""
    from kit.runtime.backends import docker_available

    if not docker_available():
        return []
    found = subprocess.run(["docker", "ps", "-q", "--filter", f"name=^kit-{pid}-"],
                           capture_output=True, text=True, check=True, timeout=60)
    return found.stdout.split()


def _ctrl_c_reaches() -> None:
    """In the audit's process, before it starts: SIGINT at its default. A shell without job
    control (CI's) starts a background job with SIGINT ignored, every process under it
    inherits that, and Python then leaves SIGINT ignored, as a command Ctrl-C cannot reach
    should be; the test is of a command it reaches, as at a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_an_audit_stopped_by_ctrl_c_or_sigterm_ends_in_one_line_and_leaves_nothing(
        tmp_path: Path) -> None:
    """Ctrl-C (SIGINT) and ``kill``/``timeout`` (SIGTERM) while the workers run: one line
    naming the stop, the shell's status (130, 143), no traceback, no worker left (with a
    Docker daemon, the default backend's: no container either), and the report folder it
    made removed with its staging folder."""
    model, inputs = tmp_path / "long.onnx", tmp_path / "x.npz"
    _long_loop(model)
    np.savez(inputs, x=np.zeros((4, 4), np.float32))
    for sent, status, word in ((signal.SIGINT, 130, "interrupted"),
                               (signal.SIGTERM, 143, "terminated")):
        out = tmp_path / f"out-{status}"
        with subprocess.Popen([sys.executable, "-m", "kit", "audit", str(model), "--inputs",
                               str(inputs), "--from", "1.20.1", "--to", "1.29.0", "--out",
                               str(out)], cwd=ROOT, stderr=subprocess.PIPE, text=True,
                              preexec_fn=_ctrl_c_reaches) as proc:
            try:
                deadline = time.monotonic() + 240
                while (not list(out.glob(".kit-staging.*/work/*.npz"))
                       and time.monotonic() < deadline):
                    time.sleep(0.2)
                time.sleep(1.0)  # the workers run the loop
                proc.send_signal(sent)
                _, err = proc.communicate(timeout=60)
            finally:
                proc.kill()
        assert proc.returncode == status, err[-2000:]
        assert "Traceback" not in err
        assert err.rstrip().splitlines()[-1] == f"kit: audit {word}"
        assert not out.exists(), status  # the folder it made, with its staging, removed
        assert live_writers(tmp_path, 1.5) == [], status
        assert _containers(proc.pid) == [], status  # the docker backend's, killed by name


@pytest.mark.docker
@pytest.mark.usefixtures("docker_ready")
def test_a_sigkilled_audits_containers_are_killed_by_the_next_docker_worker(
        tmp_path: Path) -> None:
    """SIGKILLed while its containers run a model that never ends, an audit can stop
    nothing and its containers run on; the next docker worker this machine starts (a
    ``kit run``) kills them first (``kit.runtime.backends.reap_orphans``)."""
    model, inputs = tmp_path / "long.onnx", tmp_path / "x.npz"
    _long_loop(model)
    np.savez(inputs, x=np.zeros((4, 4), np.float32))
    with subprocess.Popen([sys.executable, "-m", "kit", "audit", str(model), "--inputs",
                           str(inputs), "--from", "1.20.1", "--to", "1.29.0", "--out",
                           str(tmp_path / "out"), "--backend", "docker"], cwd=ROOT,
                          stderr=subprocess.DEVNULL) as proc:
        try:
            deadline = time.monotonic() + 240
            while len(_containers(proc.pid)) < 2 and time.monotonic() < deadline:
                time.sleep(0.5)
        finally:
            proc.kill()
    assert len(_containers(proc.pid)) == 2  # the killed audit's, running on
    np.savez(tmp_path / "small.npz", x=np.ones((2, 4), np.float32))
    small = tmp_path / "small.onnx"
    onnx.save(onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["x"], ["y"])], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 4])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 4])]),
        opset_imports=[onnx.helper.make_opsetid("", 17)], ir_version=8), str(small))
    run = subprocess.run([sys.executable, "-m", "kit", "run", "--runtime", "ref", "--model",
                          str(small), "--inputs", str(tmp_path / "small.npz"), "--output",
                          str(tmp_path / "y.npz"), "--backend", "docker"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    assert _containers(proc.pid) == []
