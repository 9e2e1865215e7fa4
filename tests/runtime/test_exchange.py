"""The one-exchange command, through the real command line.

Also covers ``kit.runtime.scratch`` (no test file of its own)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from kit.errors import InputRefused
from kit.files import load_npz, write_npz
from kit.runtime.exchange import external_data, remove_stale
from kit.runtime.worker import meta_path, model_sha256
from tests.runtime.test_worker import WEIGHTS, add_inputs, add_model


def kit_run(*args: str | Path, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kit", "run", *map(str, args)],
                          capture_output=True, text=True, env=env)


def _exchange(workdir: Path, runtime: str, backend: str, name: str) -> Path:
    out = workdir / name
    proc = kit_run("--runtime", runtime, "--model", workdir / "in" / "convnet.onnx",
                   "--inputs", workdir / "in" / "images.npz", "--output", out,
                   "--backend", backend)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.parametrize("runtime", ["ref", "cand"])
def test_exchange_writes_graph_outputs_by_name_and_metadata(workdir: Path,
                                                            runtime: str) -> None:
    out = _exchange(workdir, runtime, "venv", f"{runtime}.npz")
    assert sorted(load_npz(out)) == ["logits"]
    record = json.loads(meta_path(out).read_text())
    assert record["runtime"] == runtime
    assert record["backend"] == "venv"
    assert record["onnxruntime"] == {"ref": "1.20.1", "cand": "1.29.0"}[runtime]
    assert record["model_sha256"] == hashlib.sha256(
        (workdir / "in" / "convnet.onnx").read_bytes()).hexdigest()
    assert record["output_sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert [p.name for p in workdir.iterdir() if p.name.startswith(".kit-exchange")] == []


@pytest.mark.docker
@pytest.mark.usefixtures("docker_ready")
def test_exchange_with_docker_matches_venv(workdir: Path) -> None:
    in_docker = _exchange(workdir, "cand", "docker", "d.npz")
    in_venv = _exchange(workdir, "cand", "venv", "v.npz")
    assert in_docker.read_bytes() == in_venv.read_bytes()
    assert json.loads(meta_path(in_docker).read_text())["backend"] == "docker"


def test_missing_model_exits_non_zero_naming_it(workdir: Path) -> None:
    out = workdir / "o.npz"
    proc = kit_run("--runtime", "ref", "--model", workdir / "nope.onnx", "--inputs",
                   workdir / "in" / "images.npz", "--output", out, "--backend", "venv")
    assert proc.returncode == 2
    assert f"kit: error: {workdir / 'nope.onnx'}: model file not found" in proc.stderr
    assert not out.exists()


def test_worker_refusal_names_the_callers_file(workdir: Path) -> None:
    bad = workdir / "bad.npz"
    write_npz(bad, {"input": np.zeros((2, 3, 32, 32), np.int64)})
    out = workdir / "o.npz"
    proc = kit_run("--runtime", "cand", "--model", workdir / "in" / "convnet.onnx",
                   "--inputs", bad, "--output", out, "--backend", "venv")
    assert proc.returncode == 2
    assert f"{bad}: input 'input' has dtype int64" in proc.stderr
    assert not out.exists()
    assert not meta_path(out).exists()


def test_onnxruntimes_refusal_is_one_line_of_what_it_said(tmp_path: Path) -> None:
    """A model onnxruntime cannot run (a Conv whose weights have 5 channels for an input of
    3): one line naming the caller's model and the release, onnxruntime's words without
    its status prefix (``[ONNXRuntimeError] : 1 : FAIL :``)."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h

    graph = h.make_graph([h.make_node("Conv", ["x", "w"], ["y"])], "g",
                         [h.make_tensor_value_info("x", T.FLOAT, ["N", 3, 4, 4])],
                         [h.make_tensor_value_info("y", T.FLOAT, None)],
                         [h.make_tensor("w", T.FLOAT, [2, 5, 1, 1], [1.0] * 10)])
    model = tmp_path / "c.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8),
              str(model))
    write_npz(tmp_path / "c.npz", {"x": np.ones((2, 3, 4, 4), np.float32)})
    proc = kit_run("--runtime", "ref", "--model", model, "--inputs", tmp_path / "c.npz",
                   "--output", tmp_path / "o.npz", "--backend", "venv")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"kit: error: {model}: the model does not run under onnxruntime 1.20.1 (rows 0 to 1): "
        "Non-zero status code returned while running Conv node. Name:'' Status Message: "
        "Input channels C is not equal to kernel channels * group. C: 3 kernel channels: 5 "
        "group: 1 (ref worker, venv backend)"]


@pytest.mark.parametrize("size", [str(10 ** 30), str(2 ** 63), str(2 ** 20 + 1), "0", "-1"])
def test_a_batch_size_outside_1_to_2_20_is_refused_before_anything_runs(
        workdir: Path, size: str) -> None:
    """``--batch-size`` as the kit bounds it (``MAX_BATCH_SIZE``, which the help gives);
    10**30 and 2**63 were handed to the worker."""
    from kit.runtime.exchange import MAX_BATCH_SIZE

    out = workdir / "o.npz"
    proc = kit_run("--runtime", "cand", "--model", workdir / "in" / "convnet.onnx",
                   "--inputs", workdir / "in" / "images.npz", "--output", out,
                   "--backend", "venv", "--batch-size", size)
    assert proc.returncode == 2, proc.stderr
    assert f"kit: error: --batch-size {size if len(size) < 30 else 'of 31 digits'}: must " \
           f"be an integer from 1 to {MAX_BATCH_SIZE}" in proc.stderr
    assert not out.exists()
    assert not [p for p in workdir.iterdir() if p.name.startswith(".kit-exchange")]


def test_the_help_gives_the_batch_sizes_bound() -> None:
    from kit.runtime.exchange import MAX_BATCH_SIZE

    assert f"1 to {MAX_BATCH_SIZE} (2**20" in " ".join(kit_run("--help").stdout.split())


# ---------------------------------------------------------------- the boundary
def _run_add(tmp_path: Path, model: Path, inputs: Path, out: Path,
             runtime: str = "cand") -> subprocess.CompletedProcess[str]:
    return kit_run("--runtime", runtime, "--backend", "venv", "--model", model,
                   "--inputs", inputs, "--output", out)


def _refused(proc: subprocess.CompletedProcess[str], message: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert f"kit: error: {message}" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_staging_never_touches_the_callers_files(tmp_path: Path) -> None:
    model = add_model(tmp_path / "m.onnx")
    inputs = add_inputs(tmp_path / "x.npz")
    os.chmod(model, 0o600)
    os.chmod(inputs, 0o400)
    before = {p: (p.stat().st_mode, p.stat().st_ino, p.read_bytes()) for p in (model, inputs)}
    proc = _run_add(tmp_path, model, inputs, tmp_path / "y.npz")
    assert proc.returncode == 0, proc.stderr
    assert {p: (p.stat().st_mode, p.stat().st_ino, p.read_bytes()) for p in before} == before
    assert stat.S_IMODE(model.stat().st_mode) == 0o600
    assert stat.S_IMODE(inputs.stat().st_mode) == 0o400
    np.testing.assert_array_equal(load_npz(tmp_path / "y.npz")["y"],
                                  load_npz(inputs)["x"] + WEIGHTS)
    os.chmod(tmp_path / "y.npz", 0o600)  # an output replaced keeps the user's mode
    proc = _run_add(tmp_path, model, inputs, tmp_path / "y.npz")
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE((tmp_path / "y.npz").stat().st_mode) == 0o600


def test_an_output_the_kit_did_not_write_is_refused_and_kept(tmp_path: Path) -> None:
    """``--output y.npz`` over a user's ``y.npz`` (no record beside it), a user's
    ``y.meta.json`` alone, or a kit output whose bytes the user replaced: refused by name,
    each file as it was; a kit output is replaced."""
    model, inputs = add_model(tmp_path / "m.onnx"), add_inputs(tmp_path / "x.npz")
    out = tmp_path / "y.npz"
    for theirs, refused in ((out, out), (meta_path(out), meta_path(out))):
        theirs.write_bytes(b"the user's")
        proc = _run_add(tmp_path, model, inputs, out)
        _refused(proc, f"{refused}: a file the kit did not write")
        assert theirs.read_bytes() == b"the user's"
        theirs.unlink()
    assert _run_add(tmp_path, model, inputs, out).returncode == 0
    ours = out.read_bytes()
    assert _run_add(tmp_path, model, inputs, out).returncode == 0  # the kit's: replaced
    assert out.read_bytes() == ours
    write_npz(out, {"y": np.zeros((2, 2), np.float32)})  # the user's bytes now
    changed = out.read_bytes()
    proc = _run_add(tmp_path, model, inputs, out)
    _refused(proc, f"{out}: a file the kit did not write (its bytes are not those "
                   "y.meta.json records)")
    assert out.read_bytes() == changed


def test_a_run_killed_between_its_two_renames_is_finished_by_the_next(tmp_path: Path) -> None:
    """Killed after the record moved in and before the output did: the record names the
    output the dead run's staging folder still holds, so the next run takes both as the
    kit's and replaces them."""
    model, inputs = add_model(tmp_path / "m.onnx"), add_inputs(tmp_path / "x.npz")
    out = tmp_path / "y.npz"
    assert _run_add(tmp_path, model, inputs, out).returncode == 0
    expected = out.read_bytes()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    pending = tmp_path / f".kit-exchange-{dead.pid}-abcdefgh" / "out" / "output.npz"
    pending.parent.mkdir(parents=True)
    write_npz(pending, {"y": np.ones((2, 2), np.float32)})
    record = json.loads(meta_path(out).read_text())
    record["output_sha256"] = hashlib.sha256(pending.read_bytes()).hexdigest()
    meta_path(out).write_text(json.dumps(record))  # the new record, the old output
    proc = _run_add(tmp_path, model, inputs, out)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == expected
    assert not pending.parents[1].exists()


def _output_cases(tmp_path: Path) -> dict[str, tuple[Path, Path, Path, str]]:
    """name -> (model, inputs, output, what the refusal says)."""
    model = add_model(tmp_path / "m.onnx")
    inputs = add_inputs(tmp_path / "x.npz")
    npz_model = add_model(tmp_path / "model.npz")
    meta_model = add_model(tmp_path / "o.meta.json")
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.npz").symlink_to(inputs)
    os.link(inputs, tmp_path / "hard.npz")
    (tmp_path / "folder.npz").mkdir()
    (tmp_path / "plain").write_text("a file")
    overwrite = "would overwrite the inputs"
    return {
        "inputs": (model, inputs, inputs, overwrite),
        "dotdot": (model, inputs, tmp_path / "sub" / ".." / "x.npz", overwrite),
        "symlink": (model, inputs, tmp_path / "link.npz", overwrite),
        "hard link": (model, inputs, tmp_path / "hard.npz", overwrite),
        "model": (npz_model, inputs, npz_model, "would overwrite the model"),
        "meta is the model": (meta_model, inputs, tmp_path / "o.npz",
                              "writing o.meta.json would overwrite the model"),
        "folder": (model, inputs, tmp_path / "folder.npz", "is a folder"),
        "under a file": (model, inputs, tmp_path / "plain" / "o.npz",
                         f"{tmp_path / 'plain'} is a file, not a folder"),
        "staging": (model, inputs, tmp_path / ".kit-exchange-1-x" / "out" / "output.npz",
                    "lies inside the staging folder .kit-exchange-1-x"),
    }


@pytest.mark.parametrize("case", ["inputs", "dotdot", "symlink", "hard link", "model",
                                  "meta is the model", "folder", "under a file", "staging"])
def test_an_output_that_would_overwrite_or_cannot_be_written_is_refused(
        tmp_path: Path, case: str) -> None:
    model, inputs, out, what = _output_cases(tmp_path)[case]
    kept = {p: p.read_bytes() for p in (model, inputs)}
    proc = _run_add(tmp_path, model, inputs, out)
    _refused(proc, f"{out}: ")
    assert what in proc.stderr
    assert {p: p.read_bytes() for p in kept} == kept
    assert not list(tmp_path.glob(".kit-exchange-*/in"))


# ---------------------------------------------------------------- staging folders
def test_a_killed_run_leaves_its_folders_and_the_next_run_removes_them(
        workdir: Path) -> None:
    """A SIGKILL while the worker runs leaves the staging folder beside the output and the
    job folder in the temporary folder; the next run removes both (kit.runtime.scratch)."""
    out = workdir / "o" / "killed.npz"
    out.parent.mkdir()
    tmp = workdir / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    args = ["--runtime", "cand", "--backend", "venv", "--model", workdir / "in" / "convnet.onnx",
            "--inputs", workdir / "in" / "images.npz", "--output", out]
    proc = subprocess.Popen([sys.executable, "-m", "kit", "run", *map(str, args)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, env=env)
    deadline = time.monotonic() + 60
    while not (list(out.parent.glob(".kit-exchange-*/in/inputs.npz"))
               and list(tmp.glob("kit-jobs-*/jobs.json"))):
        assert proc.poll() is None, "the run ended before it was killed"
        assert time.monotonic() < deadline, "the run never staged its files and jobs"
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)  # the kit and its worker, as a closed terminal does
    proc.wait()
    (left,) = out.parent.glob(".kit-exchange-*")
    (jobs,) = tmp.glob("kit-jobs-*")
    assert left.name.startswith(f".kit-exchange-{proc.pid}-")
    assert jobs.name.startswith(f"kit-jobs-{proc.pid}-")
    assert not out.exists()
    assert kit_run(*args, env=env).returncode == 0
    assert not left.exists()
    assert not jobs.exists()
    assert list(tmp.iterdir()) == []
    assert sorted(p.name for p in out.parent.iterdir()) == ["killed.meta.json",
                                                            "killed.npz"]


def test_only_staging_folders_of_dead_processes_are_removed(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".kit-exchange-{dead.pid}-abcdefgh"
    live = tmp_path / f".kit-exchange-{os.getpid()}-abcdefgh"
    other = tmp_path / ".kit-exchange-notapid"
    for folder in (stale, live, other):
        (folder / "in").mkdir(parents=True)
        (folder / "in" / "inputs.npz").write_bytes(b"x")
    assert remove_stale(tmp_path) == [stale]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name])


# ---------------------------------------------------------------- external data
@pytest.mark.parametrize(("location", "says"), [
    ("../" * 40 + "etc/passwd", "climbs out of the model's folder with '..'"),
    ("/etc/passwd", "is an absolute path"),
    ("escape.bin", "resolves through a symbolic link to /etc/passwd"),
])
def test_external_data_leaving_the_models_folder_is_refused_naming_the_callers_model(
        tmp_path: Path, location: str, says: str) -> None:
    model = add_model(tmp_path / "m" / "add.onnx", location)
    (tmp_path / "m" / "escape.bin").symlink_to("/etc/passwd")
    out = tmp_path / "y.npz"
    proc = _run_add(tmp_path, model, add_inputs(tmp_path / "x.npz"), out, runtime="ref")
    _refused(proc, f"{model}: tensor 'w': external data location {location!r} {says}")
    assert not out.exists()
    assert not meta_path(out).exists()
    with pytest.raises(InputRefused, match=re.escape(f"{model}: tensor 'w'")):
        external_data(model)  # at the kit's boundary, before any worker is started


def test_external_data_beside_the_model_is_staged_with_it_and_hashed(tmp_path: Path) -> None:
    model = add_model(tmp_path / "m" / "add.onnx", "data/w.bin")
    (tmp_path / "m" / "data").mkdir()
    (tmp_path / "m" / "data" / "w.bin").write_bytes(WEIGHTS.tobytes())
    inputs = add_inputs(tmp_path / "x.npz")
    out = tmp_path / "y.npz"
    proc = _run_add(tmp_path, model, inputs, out, runtime="ref")
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(load_npz(out)["y"], load_npz(inputs)["x"] + WEIGHTS)
    record = json.loads(meta_path(out).read_text())
    files = {"data/w.bin": tmp_path / "m" / "data" / "w.bin"}
    assert record["model_sha256"] == model_sha256(model, files)
    assert record["model_sha256"] != hashlib.sha256(model.read_bytes()).hexdigest()
    assert record["model_external_data"] == {
        "data/w.bin": hashlib.sha256(WEIGHTS.tobytes()).hexdigest()}
