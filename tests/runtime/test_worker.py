"""The worker: determinism, batching, the .npz format, its imports, and bad input."""

from __future__ import annotations

import ast
import hashlib
import io
import json
import pickle
import shutil
import subprocess
import sys
import tracemalloc
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kit.errors import WorkerFailed
from kit.runtime import worker
from kit.runtime.backends import run_jobs
from kit.runtime.runtimes import get_runtime
from kit.runtime.worker import meta_path, npz_bytes, read_npz, write_npz
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


def test_a_scalar_stays_a_scalar_and_text_is_stored_without_a_pickle(tmp_path: Path) -> None:
    """A rank-0 output or input keeps its shape through the .npz (``np.ascontiguousarray``
    would give it one axis); a string tensor, which onnxruntime gives as Python ``str``
    objects, is stored as fixed-width text; a map is refused by name, never pickled, and so
    is an empty optional, as what it is."""
    write_npz(tmp_path / "s.npz", {"s": np.float32(2.0) * np.ones((), np.float32)})
    assert read_npz(tmp_path / "s.npz")["s"].shape == ()
    text = worker.storable(np.array([["a", "bc"]], dtype=object), "label", "job")
    assert text.dtype.kind == "U"
    assert text.tolist() == [["a", "bc"]]
    write_npz(tmp_path / "t.npz", {"label": text})
    assert read_npz(tmp_path / "t.npz")["label"].tolist() == [["a", "bc"]]
    with pytest.raises(worker.JobError, match=r"graph output 'probs' holds Python objects "
                                              r"\(\['dict'\]: a map"):
        worker.storable([{0: 0.5}, {0: 0.25}], "probs", "job")
    with pytest.raises(worker.JobError, match="'seq' is a sequence of tensors of other shapes"):
        worker.storable([np.zeros(2), np.zeros(3)], "seq", "job")
    # onnxruntime gives an optional output that holds nothing as None (1.20.1 and 1.29.0)
    with pytest.raises(worker.JobError, match=r"^job: graph output 'o' is an empty optional "
                                              r"\(it holds no value on this run\)"):
        worker.storable(None, "o", "job")


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


# ---------------------------------------------------------------- tiny models by hand
WEIGHTS = np.array([1.0, 2.0, 3.0, 4.0], np.float32)


def external(tensor: Any, location: str) -> Any:
    """``tensor`` with its data moved to external data at ``location`` (not written)."""
    from onnx import TensorProto

    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"),
                       ("length", str(WEIGHTS.nbytes))):
        tensor.external_data.add(key=key, value=value)
    return tensor


def add_model(path: Path, location: str | None = None, channels: int | None = 4) -> Path:
    """``y = x + w`` over ``x`` of shape (N, channels) float32, ``w`` = WEIGHTS; with
    ``location``, ``w`` is external data at that location (the bytes are not written)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = numpy_helper.from_array(WEIGHTS, "w")
    if location is not None:
        external(weights, location)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, channels])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "add", [x], [y],
                              [weights])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def add_inputs(path: Path, n: int = 3) -> Path:
    """``n`` rows of the add model's input ``x``."""
    write_npz(path, {"x": np.arange(4 * n, dtype=np.float32).reshape(n, 4)})
    return path


def model_with_external_data_everywhere(path: Path) -> list[str]:
    """A model (not meant to load) with an external tensor in each place onnxruntime
    reads one: an initializer, a sparse initializer, a Constant's attribute, the If
    branches' initializers, a function's Constant, a training graph; returns the names."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def tensor(name: str) -> Any:
        return external(numpy_helper.from_array(WEIGHTS, name), f"{name}.bin")

    sparse = helper.make_sparse_tensor(tensor("sparse_values"),
                                       numpy_helper.from_array(np.arange(4), "idx"), [8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    then, other = (helper.make_graph([helper.make_node("Identity", [name], ["y"])], name, [],
                                     [y], [tensor(name)]) for name in ("then", "else"))
    nodes = [helper.make_node("Constant", [], ["c"], value=tensor("constant")),
             helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)]
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    graph = helper.make_graph(nodes, "g", [cond], [y], [tensor("init")],
                              sparse_initializer=[sparse])
    function = helper.make_function("local", "f", [], ["z"], [helper.make_node(
        "Constant", [], ["z"], value=tensor("in_function"))], [helper.make_opsetid("", 13)])
    model = helper.make_model(graph, functions=[function],
                              opset_imports=[helper.make_opsetid("", 13),
                                             helper.make_opsetid("local", 1)])
    training = model.training_info.add()
    training.initialization.CopyFrom(helper.make_graph([], "init", [], [], [tensor("train")]))
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return sorted(["sparse_values", "then", "else", "constant", "init", "in_function",
                   "train"])


def test_the_worker_finds_external_data_wherever_onnx_does(tmp_path: Path) -> None:
    from kit.runtime.exchange import external_data

    names = model_with_external_data_everywhere(tmp_path / "m.onnx")
    found = worker.external_tensors((tmp_path / "m.onnx").read_bytes())
    assert sorted(found) == [(name, f"{name}.bin") for name in names]
    for name in names:
        (tmp_path / f"{name}.bin").write_bytes(WEIGHTS.tobytes())
    assert sorted(external_data(tmp_path / "m.onnx")) == [f"{name}.bin" for name in names]


UP = "../" * 40  # from any folder, up to the root


@pytest.mark.parametrize("runtime", ["ref", "cand"])
@pytest.mark.parametrize(("location", "says"), [
    (UP + "etc/passwd", "climbs out of the model's folder with '..'"),
    ("/etc/passwd", "is an absolute path"),
    ("escape.bin", "resolves through a symbolic link to /etc/passwd"),
    ("*/_ORT_MEM_ADDR_/*", "is onnxruntime's in-memory tag"),
    ("absent.bin", "is not a file beside the model"),
])
def test_external_data_outside_the_models_folder_is_refused(
        workdir: Path, runtime: str, location: str, says: str) -> None:
    add_model(workdir / "in" / "m" / "add.onnx", location)
    (workdir / "in" / "m" / "escape.bin").symlink_to("/etc/passwd")
    add_inputs(workdir / "in" / "x.npz")
    out = workdir / "out"
    with pytest.raises(WorkerFailed) as info:
        run_jobs(get_runtime(runtime), [job(model="m/add.onnx", inputs="x.npz")],
                 workdir / "in", out, "venv")
    assert f"m/add.onnx: tensor 'w': external data location {location!r} {says}" in \
        str(info.value)
    assert not out.exists() or [p for p in out.rglob("*") if p.is_file()] == []


@pytest.mark.parametrize("runtime", ["ref", "cand"])
def test_external_data_beside_the_model_runs_and_is_hashed(workdir: Path,
                                                           runtime: str) -> None:
    model = add_model(workdir / "in" / "m" / "add.onnx", "data/w.bin")
    (workdir / "in" / "m" / "data").mkdir()
    (workdir / "in" / "m" / "data" / "w.bin").write_bytes(WEIGHTS.tobytes())
    inputs = add_inputs(workdir / "in" / "x.npz")
    (out,) = run_jobs(get_runtime(runtime), [job(model="m/add.onnx", inputs="x.npz")],
                      workdir / "in", workdir / "out", "venv")
    np.testing.assert_array_equal(read_npz(out)["y"], read_npz(inputs)["x"] + WEIGHTS)
    record = json.loads(meta_path(out).read_text())
    weights = WEIGHTS.tobytes()
    expected = hashlib.sha256(model.read_bytes() + b"\0data/w.bin\0"
                              + len(weights).to_bytes(8, "big") + weights).hexdigest()
    assert record["model_sha256"] == expected
    assert record["model_external_data"] == {
        "data/w.bin": hashlib.sha256(weights).hexdigest()}


# ---------------------------------------------------------------- inputs, headers first
def npy_header(shape: tuple[int, ...], descr: str = "<f4") -> bytes:
    """A .npy version 1.0 header declaring ``shape`` and ``descr`` (no data)."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(  # type: ignore[no-untyped-call]
        buffer, {"descr": descr, "fortran_order": False, "shape": shape})
    return buffer.getvalue()


def zip_bomb(path: Path, mib: int = 256) -> Path:
    """An .npz whose one member, ``x``, deflates ``mib`` MiB of float32 zeros of shape
    (mib // 16, 4096, 1024) into a few hundred KB, written without holding them."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive, \
            archive.open("x.npy", "w", force_zip64=True) as member:
        member.write(npy_header((mib // 16, 4096, 1024)))
        for _ in range(mib):
            member.write(bytes(1 << 20))
    return path


def test_a_zip_bomb_is_refused_from_its_header_without_inflating_it(workdir: Path) -> None:
    bomb = zip_bomb(workdir / "in" / "bomb.npz")
    assert bomb.stat().st_size < 1 << 20
    tracemalloc.start()
    try:
        declared = worker.npz_headers(bomb, "bomb.npz")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert declared == {"x": ((16, 4096, 1024), np.dtype("float32"))}
    assert peak < 4 << 20  # the 256 MiB were never inflated
    add_model(workdir / "in" / "add.onnx")
    _expect_refusal(workdir, [job(model="add.onnx", inputs="bomb.npz")],
                    "bomb.npz: input 'x' has shape (16, 4096, 1024), the graph wants [None, 4]")


def _archive(path: Path, members: list[tuple[str, bytes]]) -> Path:
    with warnings.catch_warnings():  # zipfile warns of a name written twice
        warnings.simplefilter("ignore", UserWarning)
        with zipfile.ZipFile(path, "w") as archive:
            for name, data in members:
                archive.writestr(name, data)
    return path


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    return buffer.getvalue()


ROWS = np.zeros((2, 4), np.float32)
BAD_INPUTS = {
    "declared 768 TB": ([("x.npy", npy_header((48 * 10**12, 4)))],
                        "member 'x.npy' declares (48000000000000, 4) float32, past "
                        f"{worker.MAX_INPUT_BYTES} bytes for one input file"),
    "short of its header": ([("x.npy", npy_header((1000, 4)) + bytes(16))],
                            "member 'x.npy' declares (1000, 4) float32 (16000 bytes) but "
                            "holds 16"),
    "a pickle": ([("x.npy", pickle.dumps(ROWS))], "member 'x.npy' is not a .npy array"),
    "objects": ([("x.npy", _npy(np.array([None, 1], dtype=object)))],
                "member 'x.npy' holds Python objects (dtype object)"),
    "twice": ([("x.npy", _npy(ROWS)), ("x.npy", _npy(ROWS + 1))],
              "the archive holds ['x.npy'] more than once"),
    "not .npy": ([("x.npy", _npy(ROWS)), ("notes.txt", b"hello")],
                 "member 'notes.txt' is not a .npy array"),
    "NaN and Inf": ([("x.npy", _npy(np.array([[0, np.nan, 1, np.inf]], np.float32)))],
                    "input 'x' holds 2 NaN or infinite value(s); the worker takes finite "
                    "inputs only"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_archives_are_refused_naming_what_is_wrong(workdir: Path, case: str) -> None:
    members, says = BAD_INPUTS[case]
    _archive(workdir / "in" / "bad.npz", members)
    add_model(workdir / "in" / "add.onnx")
    _expect_refusal(workdir, [job(model="add.onnx", inputs="bad.npz")], f"bad.npz: {says}")


def test_a_job_that_takes_nonfinite_inputs_runs_them_and_counts_them(workdir: Path) -> None:
    """``"nonfinite": true`` (the audit's jobs) feeds NaN and infinities as they are and the
    record counts them; a job of the same list on the same file without it is refused,
    whichever comes first, and nothing is written."""
    x = np.array([[0, np.nan, 1, np.inf], [1, 2, 3, -np.inf]], np.float32)
    write_npz(workdir / "in" / "nan.npz", {"x": x})
    add_model(workdir / "in" / "add.onnx")
    taking = job(model="add.onnx", inputs="nan.npz", nonfinite=True, output="taking.npz")
    (out,) = run_jobs(get_runtime("ref"), [taking], workdir / "in", workdir / "out", "venv")
    np.testing.assert_array_equal(read_npz(out)["y"], x + WEIGHTS)
    assert json.loads(meta_path(out).read_text())["nonfinite_inputs"] == 3
    plain = job(model="add.onnx", inputs="nan.npz", output="plain.npz")
    for jobs in ([taking, plain], [plain, taking]):
        shutil.rmtree(workdir / "out")
        _expect_refusal(workdir, jobs, "nan.npz: input 'x' holds 3 NaN or infinite value(s)")
    _expect_refusal(workdir, [{**taking, "nonfinite": 1}], "nonfinite must be true or false")


def _conv(path: Path, channels: int | None, weight_input: str = "w") -> Path:
    """A Conv whose weights take 5 input channels, over inputs of ``channels``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = numpy_helper.from_array(np.ones((2, 5, 3, 3), np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, channels, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 2, 6, 6])
    graph = helper.make_graph([helper.make_node("Conv", ["x", weight_input], ["y"])], "conv",
                              [x], [y], [weights])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("runtime", ["ref", "cand"])
def test_a_model_that_does_not_load_or_run_is_a_refusal_naming_it(workdir: Path,
                                                                  runtime: str) -> None:
    version = get_runtime(runtime).onnxruntime
    write_npz(workdir / "in" / "x.npz", {"x": np.zeros((2, 3, 8, 8), np.float32)})
    _conv(workdir / "in" / "unknown.onnx", 3, weight_input="nowhere")
    _conv(workdir / "in" / "channels.onnx", None)
    for model, says in (("unknown.onnx", f"the model does not load under onnxruntime "
                                         f"{version}: "),
                        ("channels.onnx", f"the model does not run under onnxruntime "
                                          f"{version} (rows 0 to 1): ")):
        out = workdir / "out"
        with pytest.raises(WorkerFailed) as info:
            run_jobs(get_runtime(runtime), [job(model=model, inputs="x.npz")],
                     workdir / "in", out, "venv")
        assert f"{model}: {says}" in str(info.value)
        assert "Traceback" not in info.value.stderr
        assert [p for p in out.rglob("*") if p.is_file()] == []


def test_a_whole_job_keeps_an_output_without_a_batch_axis(tmp_path: Path) -> None:
    """A tensor laid out by position (here the rows transposed to the last axis) cannot be
    split into batches; ``"whole": true`` runs every row in one call and keeps it."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])], "t",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, "N"])])
    (tmp_path / "in").mkdir()
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(tmp_path / "in" / "t.onnx"))
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    write_npz(tmp_path / "in" / "x.npz", {"x": x})
    batched = {"model": "t.onnx", "inputs": "x.npz", "graph_optimization": "disable_all",
               "batch_size": 2}
    with pytest.raises(WorkerFailed, match="has no batch axis"):
        run_jobs(get_runtime("ref"), [{**batched, "output": "a.npz"}], tmp_path / "in",
                 tmp_path / "a", "venv")
    (out,) = run_jobs(get_runtime("ref"), [{**batched, "output": "b.npz", "whole": True}],
                      tmp_path / "in", tmp_path / "b", "venv")
    np.testing.assert_array_equal(read_npz(out)["y"], x.T)
    assert json.loads(meta_path(out).read_text())["whole"] is True
    with pytest.raises(WorkerFailed, match="whole must be true or false"):
        run_jobs(get_runtime("ref"), [{**batched, "output": "c.npz", "whole": 1}],
                 tmp_path / "in", tmp_path / "c", "venv")


def test_a_whole_job_feeds_inputs_that_share_no_first_axis_as_they_are(
        tmp_path: Path) -> None:
    """A MatMul of (3, 4) and (4, 5): a batched job refuses the two first axes, a whole
    job feeds both as they are in one call (its record's ``n`` is then null)."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"])], "m",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [3, 4]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])])
    (tmp_path / "in").mkdir()
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(tmp_path / "in" / "m.onnx"))
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal(shape).astype(np.float32) for shape in ((3, 4), (4, 5)))
    write_npz(tmp_path / "in" / "ab.npz", {"a": a, "b": b})
    job = {"model": "m.onnx", "inputs": "ab.npz", "graph_optimization": "disable_all"}
    with pytest.raises(WorkerFailed, match=r"inputs disagree on the batch size: \[3, 4\]"):
        run_jobs(get_runtime("ref"), [{**job, "output": "a.npz"}], tmp_path / "in",
                 tmp_path / "a", "venv")
    (out,) = run_jobs(get_runtime("ref"), [{**job, "output": "b.npz", "whole": True}],
                      tmp_path / "in", tmp_path / "b", "venv")
    np.testing.assert_allclose(read_npz(out)["y"], a @ b, rtol=1e-5)
    assert json.loads(meta_path(out).read_text())["n"] is None


@pytest.mark.parametrize("runtime", ["ref", "cand"])
def test_a_string_input_is_fed_as_fixed_width_text(tmp_path: Path, runtime: str) -> None:
    """A string input comes as numpy's fixed-width text (``storable``'s form, any width),
    which onnxruntime takes as it is; bytes are refused naming the input, since 1.20.1
    and 1.29.0 read a fixed-width bytes array past each element's end ('1.5' became
    1.52)."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Cast", ["s"], ["y"], to=TensorProto.FLOAT)], "t",
        [helper.make_tensor_value_info("s", TensorProto.STRING, ["N", 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])])
    (tmp_path / "in").mkdir()
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(tmp_path / "in" / "t.onnx"))
    write_npz(tmp_path / "in" / "s.npz", {"s": np.array([["1.5", "2"], ["-4e2", "0.25"]])})
    write_npz(tmp_path / "in" / "b.npz", {"s": np.array([[b"1.5", b"2"], [b"-4", b"0"]])})
    text = {"model": "t.onnx", "inputs": "s.npz", "graph_optimization": "enable_all",
            "output": "y.npz"}
    (out,) = run_jobs(get_runtime(runtime), [text], tmp_path / "in", tmp_path / "out", "venv")
    np.testing.assert_array_equal(read_npz(out)["y"], np.array([[1.5, 2], [-400, 0.25]],
                                                               np.float32))
    with pytest.raises(WorkerFailed, match=r"b.npz: input 's' has dtype \|S3, the graph wants "
                                           r"text \(numpy str_\)"):
        run_jobs(get_runtime(runtime), [{**text, "inputs": "b.npz"}], tmp_path / "in",
                 tmp_path / "bytes", "venv")


@pytest.mark.parametrize("runtime", ["ref", "cand"])
@pytest.mark.parametrize("narrow", ["FLOAT8E4M3FN", "BFLOAT16"])
def test_an_output_of_a_type_numpy_lacks_is_refused_naming_it(
        tmp_path: Path, runtime: str, narrow: str) -> None:
    """1.20.1 raises on a bfloat16 or float8 output, and 1.29.0 hands float8e4m3fn over
    as its raw bytes in uint8 (1.0 became 56): either way the worker refuses the job
    naming the output and its type, before anything is written."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["q"], to=getattr(TensorProto, narrow))], "t",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])],
        [helper.make_tensor_value_info("q", getattr(TensorProto, narrow), ["N", 2])])
    (tmp_path / "in").mkdir()
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)],
                                ir_version=10), str(tmp_path / "in" / "t.onnx"))
    write_npz(tmp_path / "in" / "x.npz", {"x": np.ones((2, 2), np.float32)})
    job = {"model": "t.onnx", "inputs": "x.npz", "graph_optimization": "disable_all",
           "output": "q.npz"}
    with pytest.raises(WorkerFailed, match=rf"graph output 'q' is tensor\({narrow.lower()}\), "
                                           "a type numpy lacks"):
        run_jobs(get_runtime(runtime), [job], tmp_path / "in", tmp_path / "out", "venv")
    assert not (tmp_path / "out" / "q.npz").exists()


def test_each_cell_builds_its_session_once(workdir: Path) -> None:
    """Jobs of one model at four levels: four sessions, one per level (the inputs are
    checked on the first, which its job then runs on), not one to check and one to run."""
    from kit.runtime.venvs import ensure_runtime

    levels = ["disable_all", "enable_basic", "enable_extended", "enable_all"]
    jobs = [job(id=level, output=f"{level}.npz", graph_optimization=level) for level in levels]
    (workdir / "jobs.json").write_text(json.dumps({"jobs": jobs}))
    count = ("import sys, collections; sys.path.insert(0, sys.argv[1]); import worker; "
             "built = collections.Counter(); build = worker._session\n"
             "def counted(model, shown, job):\n"
             "    built[job['graph_optimization']] += 1; return build(model, shown, job)\n"
             "worker._session = counted\n"
             "worker.run_jobs(*map(worker.Path, sys.argv[2:5])); print(dict(built))")
    proc = subprocess.run([str(ensure_runtime("ref")), "-c", count,
                           str(Path(worker.__file__).parent), str(workdir / "jobs.json"),
                           str(workdir / "in"), str(workdir / "out")],
                          capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().replace("'", '"')) == dict.fromkeys(levels, 1)
    assert sorted(p.name for p in (workdir / "out").glob("*.npz")) == \
        sorted(f"{level}.npz" for level in levels)
