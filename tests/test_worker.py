"""The worker: determinism, batching, the .npz format, its imports, and bad input."""

from __future__ import annotations

import ast
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from kit import worker
from kit.backends import run_jobs
from kit.errors import WorkerFailed
from kit.runtimes import get_runtime
from kit.worker import meta_path, npz_bytes, read_npz, write_npz
from tests.conftest import job

STDLIB = set(sys.stdlib_module_names)


def test_worker_imports_only_numpy_onnxruntime_and_stdlib() -> None:
    tree = ast.parse(Path(worker.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported - STDLIB == {"numpy", "onnxruntime"}


def test_npz_bytes_depend_only_on_arrays(tmp_path: Path) -> None:
    arrays = {"b": np.arange(6, dtype=np.float32).reshape(2, 3), "a/x": np.ones(2)}
    first = npz_bytes(arrays)
    assert first == npz_bytes(dict(reversed(list(arrays.items()))))
    write_npz(tmp_path / "x.npz", arrays)
    assert (tmp_path / "x.npz").read_bytes() == first
    back = read_npz(tmp_path / "x.npz")
    assert sorted(back) == ["a/x", "b"]
    np.testing.assert_array_equal(back["b"], arrays["b"])
    changed = npz_bytes({**arrays, "b": arrays["b"] + np.float32(1e-7)})
    assert changed != first


def test_write_atomic_leaves_nothing_when_interrupted(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*_: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(worker.os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        worker.write_atomic(tmp_path / "x.npz", b"abc")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("runtime", ["ref", "cand"])
def test_same_job_twice_gives_identical_bytes(workdir: Path, runtime: str) -> None:
    rt = get_runtime(runtime)
    (first,) = run_jobs(rt, [job()], workdir / "in", workdir / "a", "venv")
    (second,) = run_jobs(rt, [job()], workdir / "in", workdir / "b", "venv")
    assert first.read_bytes() == second.read_bytes()
    assert meta_path(first).read_bytes() == meta_path(second).read_bytes()
    logits = read_npz(first)["logits"]
    assert logits.shape == (40, 10)
    assert logits.dtype == np.float32
    assert np.isfinite(logits).all()


@pytest.mark.parametrize("runtime", ["ref", "cand"])
def test_batching_does_not_change_a_bit(workdir: Path, runtime: str) -> None:
    jobs = [job(id=f"b{size}", output=f"b{size}.npz", batch_size=size) for size in (1, 7, 64)]
    outputs = run_jobs(get_runtime(runtime), jobs, workdir / "in", workdir / "out", "venv")
    digests = {hashlib.sha256(path.read_bytes()).hexdigest() for path in outputs}
    assert len(digests) == 1


def test_all_jobs_of_a_list_run_in_one_call_and_record_metadata(workdir: Path) -> None:
    jobs = [job(id="one", output="one.npz"), job(id="two", output="sub/two.npz")]
    outputs = run_jobs(get_runtime("cand"), jobs, workdir / "in", workdir / "out", "venv")
    assert [p.relative_to(workdir / "out").as_posix() for p in outputs] == \
        ["one.npz", "sub/two.npz"]
    record = json.loads(meta_path(outputs[1]).read_text())
    assert record["onnxruntime"] == "1.29.0"
    assert record["providers"] == ["CPUExecutionProvider"]
    assert record["session_options"] == {"graph_optimization": "enable_all",
                                         "intra_op_threads": 1, "inter_op_threads": 1,
                                         "execution_mode": "sequential"}
    assert record["model_sha256"] == hashlib.sha256(
        (workdir / "in" / "convnet.onnx").read_bytes()).hexdigest()
    assert record["inputs_sha256"] == hashlib.sha256(
        (workdir / "in" / "images.npz").read_bytes()).hexdigest()
    assert record["output_sha256"] == hashlib.sha256(outputs[1].read_bytes()).hexdigest()


def _expect_refusal(workdir: Path, jobs: list[dict[str, object]], names: str) -> None:
    out = workdir / "out"
    with pytest.raises(WorkerFailed) as info:
        run_jobs(get_runtime("ref"), jobs, workdir / "in", out, "venv")
    assert names in str(info.value)
    assert "worker: error:" in info.value.stderr
    left = [p for p in out.rglob("*") if p.is_file()] if out.exists() else []
    assert left == []


def test_missing_model_is_refused(workdir: Path) -> None:
    _expect_refusal(workdir, [job(model="absent.onnx")], "absent.onnx: model not found")


def test_model_outside_the_mounted_folder_is_refused(workdir: Path) -> None:
    (workdir / "outside.onnx").write_bytes((workdir / "in" / "convnet.onnx").read_bytes())
    _expect_refusal(workdir, [job(model="../outside.onnx")],
                    "../outside.onnx: model path is outside the mounted folder")


def test_missing_input_name_is_refused(workdir: Path) -> None:
    write_npz(workdir / "in" / "renamed.npz",
              {"pixels": np.zeros((2, 3, 32, 32), np.float32)})
    _expect_refusal(workdir, [job(inputs="renamed.npz")],
                    "renamed.npz: missing graph input(s) ['input']")


def test_wrong_dtype_is_refused(workdir: Path) -> None:
    write_npz(workdir / "in" / "f64.npz", {"input": np.zeros((2, 3, 32, 32), np.float64)})
    _expect_refusal(workdir, [job(inputs="f64.npz")],
                    "f64.npz: input 'input' has dtype float64, the graph wants float32")


def test_wrong_shape_is_refused(workdir: Path) -> None:
    write_npz(workdir / "in" / "small.npz", {"input": np.zeros((2, 3, 16, 16), np.float32)})
    _expect_refusal(workdir, [job(inputs="small.npz")], "small.npz: input 'input' has shape")


def test_truncated_npz_is_refused(workdir: Path) -> None:
    whole = (workdir / "in" / "images.npz").read_bytes()
    (workdir / "in" / "cut.npz").write_bytes(whole[: len(whole) // 2])
    _expect_refusal(workdir, [job(inputs="cut.npz")], "cut.npz: not a readable .npz archive")


def test_one_bad_job_stops_the_whole_list_before_anything_is_written(workdir: Path) -> None:
    jobs = [job(id="good", output="good.npz"), job(id="bad", model="absent.onnx",
                                                   output="bad.npz")]
    _expect_refusal(workdir, jobs, "absent.onnx")


def test_malformed_job_fields_are_refused(workdir: Path) -> None:
    _expect_refusal(workdir, [job(intra_op_threads=0)], "intra_op_threads must be a positive")
    _expect_refusal(workdir, [job(graph_optimization="fast")], "graph_optimization must be")
