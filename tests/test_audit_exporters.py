"""``python -m kit audit`` on graphs an exporter writes that the kit's own models never
have, end to end on the two releases the default tests build: a scalar output, a scalar
input, a string output, an output whose second axis follows the inputs (a similarity
matrix over more inputs than one run takes), and onnxruntime's MatMulScaleFusion defect
(the corpus's ``matmul-scale-leading-dims``: 1.20.1 gives its output another shape), as a
graph output and inside a graph that exposes a scalar to the instrumented copy, and, with
``--sets``, models whose inputs share no first axis (a MatMul of (3, 4) and (4, 5); the same
defect within each input set). Each gets a verdict and a report, never a traceback; the
shape a release changed is named as the runtime gave it, and the specification's shape
inference says which side is right."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from kit.audit.model import check_inputs, load_protocol, probe, widen
from kit.corpus.cases import CASES
from kit.errors import FileFormatError
from tests.test_audit import PAIR, audit

X = np.random.default_rng(0).standard_normal((16, 6)).astype(np.float32)
S, K, OUT = 4, 5, 3


def _save(tmp: Path, nodes: list[Any], inputs: list[Any], outputs: list[Any], opset: int = 17,
          inits: tuple[Any, ...] = (), **arrays: Any) -> tuple[Path, Path]:
    model = h.make_model(h.make_graph(nodes, "g", inputs, outputs, initializer=list(inits)),
                         opset_imports=[h.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, str(tmp / "m.onnx"))
    np.savez(tmp / "x.npz", **arrays)
    return tmp / "m.onnx", tmp / "x.npz"


def _x(dims: list[Any]) -> Any:
    return h.make_tensor_value_info("x", T.FLOAT, dims)


def _fusion(tmp: Path, inner_scalar: bool) -> tuple[Path, Path]:
    """MatMul then Mul by a [1, 1, 1, 1] scale: 1.20.1 fuses them and drops the leading
    axis the broadcast adds (16, 4, 3); the specification and 1.29.0 give (1, 16, 4, 3).
    With ``inner_scalar`` a softmax, a reshape and a division by the square root of the
    last axis's size (Shape, Gather, Cast, Sqrt: a rank-0 tensor) follow."""
    rng = np.random.default_rng(24)
    inits = (nh.from_array(rng.standard_normal((K, OUT)).astype(np.float32), "W"),
             nh.from_array(np.full((1, 1, 1, 1), 0.5, np.float32), "scale"),
             nh.from_array(np.array([-1, S, OUT], np.int64), "shape"),
             nh.from_array(np.array(2, np.int64), "idx"))
    x = (rng.standard_normal((16, S, K)) * 2).astype(np.float32)
    nodes = [h.make_node("MatMul", ["x", "W"], ["m"]), h.make_node("Mul", ["m", "scale"], ["ms"])]
    if not inner_scalar:
        return _save(tmp, nodes, [_x(["N", S, K])],
                     [h.make_tensor_value_info("ms", T.FLOAT, [1, "N", S, OUT])], 13, inits, x=x)
    nodes += [h.make_node("Softmax", ["ms"], ["p"], axis=2),
              h.make_node("Reshape", ["p", "shape"], ["y"]),
              h.make_node("Shape", ["y"], ["shp"]),
              h.make_node("Gather", ["shp", "idx"], ["d"], axis=0),
              h.make_node("Cast", ["d"], ["df"], to=T.FLOAT), h.make_node("Sqrt", ["df"], ["sd"]),
              h.make_node("Div", ["y", "sd"], ["z"])]
    return _save(tmp, nodes, [_x(["N", S, K])],
                 [h.make_tensor_value_info("z", T.FLOAT, ["N", S, OUT])], 13, inits, x=x)


def _run(model: Path, inputs: Path, out: Path, code: int, *more: str) -> dict[str, Any]:
    proc = audit(str(model), "--inputs", str(inputs), "--from", PAIR[0], "--to", PAIR[1],
                 "--out", str(out), "--workers", "1", *more)
    assert proc.returncode == code, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert (out / "index.html").is_file()
    record: dict[str, Any] = json.loads((out / "audit.json").read_text())
    return record


def test_a_scalar_output_and_a_scalar_input_get_a_verdict(tmp_path: Path) -> None:
    out_scalar = h.make_tensor_value_info("s", T.FLOAT, [])
    model, inputs = _save(tmp_path, [h.make_node("Div", ["x", "temp"], ["y"]),
                                     h.make_node("ReduceSum", ["y"], ["s"], keepdims=0)],
                          [_x(["N", 6]), h.make_tensor_value_info("temp", T.FLOAT, [])],
                          [out_scalar, h.make_tensor_value_info("y", T.FLOAT, ["N", 6])],
                          x=X, temp=np.array(2.0, np.float32))
    record = _run(model, inputs, tmp_path / "report", 0)
    assert record["verdict"] == "within clean drift"
    assert record["inputs_n"] == 16  # the scalar input counts no rows
    assert set(record["outputs"]) == {"s", "y"}


def test_a_string_output_is_compared_exactly(tmp_path: Path) -> None:
    model, inputs = _save(tmp_path, [h.make_node("Cast", ["x"], ["s"], to=T.STRING)],
                          [_x(["N", 6])], [h.make_tensor_value_info("s", T.STRING, ["N", 6])],
                          x=X)
    record = _run(model, inputs, tmp_path / "report", 0)
    row = record["outputs"]["s"]
    assert row["identical_share"] == 1.0
    assert row["max_abs"] is None
    assert row["polygraphy_verdict"] == "cannot compare text"


def test_a_string_input_given_in_the_inputs_file_is_fed_as_text(tmp_path: Path) -> None:
    """A string input read from the .npz as numpy's fixed-width text is fed as it is (the
    audit had refused any string input: 'input is <U12, the model takes object'); bytes
    are refused before anything runs, naming the input and the fix."""
    text = np.array([[f"{v:.6g}" for v in row] for row in X[:, :2]])
    model, inputs = _save(tmp_path, [h.make_node("Cast", ["s"], ["y"], to=T.FLOAT),
                                     h.make_node("Mul", ["y", "y"], ["sq"])],
                          [h.make_tensor_value_info("s", T.STRING, ["N", 2])],
                          [h.make_tensor_value_info("sq", T.FLOAT, ["N", 2])], s=text)
    record = _run(model, inputs, tmp_path / "report", 0)
    assert record["outputs"]["sq"]["identical_share"] == 1.0
    ran = np.load(tmp_path / "report" / "work" / "outputs" / PAIR[1] / "enable_all-t1" /
                  "plain-inputs.npz")
    np.testing.assert_array_equal(ran["sq"], np.square(text.astype(np.float32)))
    np.savez(inputs, s=text.astype(np.bytes_))
    proc = audit(str(model), "--inputs", str(inputs), "--from", PAIR[0], "--to", PAIR[1],
                 "--out", str(tmp_path / "bytes"), "--workers", "1")
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"kit: error: {inputs}: input 's' is |S9, the model takes " \
                                  "text: save it as numpy str_ (np.array(['a', 'b']))"
    assert not (tmp_path / "bytes").exists()


def test_every_integer_width_goes_in_and_comes_out(tmp_path: Path) -> None:
    """int16, uint16, uint32 and uint64 inputs are fed as they are (the worker had refused
    each, once both releases' workers had started) and an integer output of each width
    comes back exactly."""
    rng = np.random.default_rng(3)
    arrays = {f"i{dtype}": rng.integers(0, 1000, (16, 3)).astype(dtype)
              for dtype in ("int16", "uint16", "uint32", "uint64")}
    kinds = {"int16": T.INT16, "uint16": T.UINT16, "uint32": T.UINT32, "uint64": T.UINT64}
    nodes = [h.make_node("Cast", [name], [f"f{name}"], to=T.FLOAT) for name in arrays]
    nodes += [h.make_node("Sum", [f"f{name}" for name in arrays], ["y"])]
    nodes += [h.make_node("Identity", [name], [f"o{name}"]) for name in arrays]
    model, inputs = _save(
        tmp_path, nodes,
        [h.make_tensor_value_info(name, kinds[name[1:]], ["N", 3]) for name in arrays],
        [h.make_tensor_value_info("y", T.FLOAT, ["N", 3]),
         *[h.make_tensor_value_info(f"o{name}", kinds[name[1:]], ["N", 3]) for name in arrays]],
        **arrays)
    record = _run(model, inputs, tmp_path / "report", 0)
    assert record["verdict"] == "within clean drift"
    ran = np.load(tmp_path / "report" / "work" / "outputs" / PAIR[0] / "enable_all-t1" /
                  "plain-inputs.npz")
    for name, array in arrays.items():
        assert ran[f"o{name}"].dtype == array.dtype
        np.testing.assert_array_equal(ran[f"o{name}"], array)
    np.testing.assert_array_equal(ran["y"], sum(a.astype(np.float32) for a in arrays.values()))


def test_nan_and_infinite_inputs_go_in_as_given(tmp_path: Path) -> None:
    """A model that imputes missing values (scikit-learn's imputers take NaN for missing):
    NaN and infinities go in as given (the worker had refused them: "the worker takes
    finite inputs only"), the record and the page count them, a NaN both sides give alike
    is equal, and ``bench --audit``'s floor runs the same inputs."""
    x = X.copy()
    x[::3, 1], x[1, 2], x[5, 4] = np.nan, np.inf, -np.inf
    zeros = nh.from_array(np.zeros(6, np.float32), "zeros")
    model, inputs = _save(
        tmp_path, [h.make_node("IsNaN", ["x"], ["missing"]),
                   h.make_node("Where", ["missing", "zeros", "x"], ["filled"]),
                   h.make_node("Mul", ["x", "x"], ["squared"])],
        [_x(["N", 6])], [h.make_tensor_value_info("filled", T.FLOAT, ["N", 6]),
                         h.make_tensor_value_info("squared", T.FLOAT, ["N", 6])],
        inits=(zeros,), x=x)
    record = _run(model, inputs, tmp_path / "report", 0)
    assert record["verdict"] == "within clean drift"
    assert record["nonfinite_inputs"] == 8
    assert f"{inputs} (8 NaN or infinite values, fed as given)" in \
        (tmp_path / "report" / "index.html").read_text()
    assert record["outputs"]["squared"]["identical_share"] == 1.0  # NaN alike is equal
    ran = np.load(tmp_path / "report" / "work" / "outputs" / PAIR[0] / "enable_all-t1" /
                  "plain-inputs.npz")
    np.testing.assert_array_equal(ran["filled"], np.where(np.isnan(x), 0, x))
    from kit.audit.bench import bench_audit

    assert bench_audit(tmp_path / "report", quiet=True)["floor_s"] > 0  # its floor takes them


def test_an_output_whose_axes_follow_the_inputs_is_compared_whole(tmp_path: Path) -> None:
    """x @ x^T over 100 inputs: runs of 64 and 36 give (64, 64) and (36, 36)."""
    x = np.random.default_rng(1).standard_normal((100, 6)).astype(np.float32)
    model, inputs = _save(tmp_path, [h.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
                                     h.make_node("MatMul", ["x", "t"], ["sim"])],
                          [_x(["N", 6])], [h.make_tensor_value_info("sim", T.FLOAT, ["N", "N"])],
                          x=x)
    record = _run(model, inputs, tmp_path / "report", 0)
    ran = record["compared_whole"]["sim"][f"{PAIR[0]}/enable_all/t1"]
    assert ran == {"dtype": "float32", "shapes": [[64, 64], [36, 36]]}


def test_a_shape_a_release_changes_is_named_as_the_runtime_gave_it(tmp_path: Path) -> None:
    record = _run(*_fusion(tmp_path, inner_scalar=False), tmp_path / "report", 1)
    assert record["verdict"] == "beyond clean drift"
    # its scale (1, 1, 1, 1) has more dimensions than the MatMul's (N, 4, 3): the exact
    # trigger, so the screen's match decides (protocol version 7; advisory before)
    assert record["known_defects_affecting"] == ["matmul-scale-leading-dims"]
    assert record["why"].endswith("ms (float32[16, 4, 3] against float32[1, 16, 4, 3])")
    judged = record["oracle"]["outputs"]["ms"]
    assert judged["closer"] == "to"
    assert judged["spec_shape"] == [1, 16, 4, 3]
    assert judged["shapes"] == {"from": [16, 4, 3], "to": [1, 16, 4, 3]}
    page = re.sub(r"<[^>]+>", "", (tmp_path / "report" / "index.html").read_text())
    assert "to (the specification&#x27;s shape [1, 16, 4, 3]; from [16, 4, 3], to [1, 16, 4, " \
        "3])" in page


def test_a_move_whose_instrumented_copy_exposes_a_scalar_is_judged(tmp_path: Path) -> None:
    record = _run(*_fusion(tmp_path, inner_scalar=True), tmp_path / "report", 1)
    assert record["verdict"] == "beyond clean drift"
    assert record["exposed"]
    assert record["oracle"]["outputs"]["z"]["closer"] == "to"
    assert record["first_moving"] is not None or record["unlocalised"]


def _sets(tmp: Path, fused: bool) -> tuple[Path, Path]:
    """A model whose two inputs share no first axis, given 16 input sets: a MatMul of (3,
    4) and (4, 5); or (``fused``) the MatMulScaleFusion defect on a MatMul of (4, 5) and (5,
    3) and a [1, 1, 1] scale, where 1.20.1 gives each set (4, 3) for the
    specification's (1, 4, 3)."""
    rng = np.random.default_rng(5)
    m, k, n = (4, 5, 3) if fused else (3, 4, 5)
    nodes = [h.make_node("MatMul", ["a", "b"], ["m" if fused else "y"])]
    inits: tuple[Any, ...] = ()
    if fused:
        nodes.append(h.make_node("Mul", ["m", "scale"], ["y"]))
        inits = (nh.from_array(np.full((1, 1, 1), 0.5, np.float32), "scale"),)
    return _save(tmp, nodes, [h.make_tensor_value_info("a", T.FLOAT, [m, k]),
                              h.make_tensor_value_info("b", T.FLOAT, [k, n])],
                 [h.make_tensor_value_info("y", T.FLOAT, [1, m, n] if fused else [m, n])],
                 13, inits, a=rng.standard_normal((16, m, k)).astype(np.float32),
                 b=rng.standard_normal((16, k, n)).astype(np.float32))


def test_inputs_that_share_no_first_axis_are_audited_as_input_sets(tmp_path: Path) -> None:
    """Without --sets a MatMul of (3, 4) and (4, 5) is refused, the refusal saying what to
    do; with it each of the 16 sets runs as the model takes it, the outputs stacked per
    set, and ``bench --audit``'s floor feeds each set as the audit did."""
    model, inputs = _sets(tmp_path, fused=False)
    flat = tmp_path / "flat.npz"
    np.savez(flat, **{k: v[0] for k, v in np.load(inputs).items()})
    refused = audit(str(model), "--inputs", str(flat), "--from", PAIR[0], "--to", PAIR[1],
                    "--out", str(tmp_path / "refused"))
    assert refused.returncode == 2
    assert f"{flat}: every input needs the same number of rows" in refused.stderr
    assert "found [3, 4]; where the model's inputs share no first axis" in refused.stderr
    assert "pass --sets" in refused.stderr
    record = _run(model, inputs, tmp_path / "report", 0, "--sets")
    assert (record["verdict"], record["sets"], record["inputs_n"]) == \
        ("within clean drift", True, 16)
    ran = [np.load(tmp_path / "report" / "work" / "outputs" / PAIR[0] / "enable_all-t1" /
                   f"plain-inputs-{i:05d}.npz")["y"] for i in (0, 15)]
    arrays = np.load(inputs)
    for i, y in zip((0, 15), ran, strict=True):
        np.testing.assert_allclose(y, arrays["a"][i] @ arrays["b"][i], rtol=1e-5, atol=1e-6)
    assert record["compared_whole"] == {}
    assert f"{inputs} (16 input sets, each fed as the model takes it: --sets)" in \
        (tmp_path / "report" / "index.html").read_text()
    from kit.audit.bench import bench_audit

    assert bench_audit(tmp_path / "report", quiet=True)["floor_s"] > 0


def test_a_shape_a_release_changes_within_each_input_set_is_judged_per_set(
        tmp_path: Path) -> None:
    record = _run(*_sets(tmp_path, fused=True), tmp_path / "report", 1, "--sets")
    assert record["known_defects_affecting"] == ["matmul-scale-leading-dims"]
    assert record["why"].endswith("y (float32[16, 4, 3] against float32[16, 1, 4, 3])")
    judged = record["oracle"]["outputs"]["y"]
    assert (judged["closer"], judged["spec_shape"]) == ("to", [1, 4, 3])
    assert judged["shapes"] == {"from": [4, 3], "to": [1, 4, 3]}


def test_input_sets_are_checked_before_anything_runs_and_a_failing_set_is_named(
        tmp_path: Path) -> None:
    """With --sets the model's dimensions follow the sets' axis, and a set the model does
    not run on (a Reshape to a shape one set's data asks for, which no (3, 4) takes) is
    named as the user's inputs file, one of its sets, and the release."""
    model, inputs = _save(tmp_path, [h.make_node("Reshape", ["a", "s"], ["y"])],
                          [h.make_tensor_value_info("a", T.FLOAT, [3, 4]),
                           h.make_tensor_value_info("s", T.INT64, [2])],
                          [h.make_tensor_value_info("y", T.FLOAT, ["p", "q"])], 13,
                          a=np.ones((4, 3, 4), np.float32),
                          s=np.array([[2, 6], [6, 2], [4, 3], [5, 5]], np.int64))
    with pytest.raises(FileFormatError, match=r"input 'a' has shape \[4, 4, 3\], the model "
                       r"takes \[3, 4\] after the first axis \(the input sets, with --sets\)"):
        check_inputs(onnx.load(str(model)), _npz(tmp_path, a=np.ones((4, 4, 3), np.float32),
                                                 s=np.ones((4, 2), np.int64)), 2, sets=True)
    with pytest.raises(FileFormatError, match=r"the same number of input sets \(the first "
                       r"axis, with --sets\), at least 2 \(half calibrate, half are held "
                       r"out\); found \[1\]$"):
        check_inputs(onnx.load(str(model)), _npz(tmp_path, a=np.ones((1, 3, 4), np.float32),
                                                 s=np.ones((1, 2), np.int64)), 2, sets=True)
    proc = audit(str(model), "--inputs", str(inputs), "--from", PAIR[0], "--to", PAIR[1],
                 "--out", str(tmp_path / "report"), "--sets")
    assert proc.returncode == 2, proc.stderr[-2000:]
    said = proc.stderr.strip().splitlines()[-1]
    assert said.startswith(f"kit: error: {model}: the model does not run under onnxruntime ")
    assert f" on one of the 4 input sets of {inputs}: " in said
    assert "Traceback" not in proc.stderr


def test_an_output_whose_shape_varies_between_sets_leaves_the_others_judged() -> None:
    """The reference implementation on input sets: a Reshape to each set's own shape
    gives (2, 3) for one set and (3, 2) for the next, which no stacked output matches, so
    that output is "cannot tell"; the unrelated Neg beside it is still judged (the
    stacking had failed for the whole model: ``ran`` false, no output judged)."""
    from kit.audit.oracle import judge_sides

    model = h.make_model(h.make_graph(
        [h.make_node("Reshape", ["x", "s"], ["y"]), h.make_node("Neg", ["z"], ["w"])], "g",
        [h.make_tensor_value_info("x", T.FLOAT, [6]), h.make_tensor_value_info("s", T.INT64, [2]),
         h.make_tensor_value_info("z", T.FLOAT, [1])],
        [h.make_tensor_value_info("y", T.FLOAT, None),
         h.make_tensor_value_info("w", T.FLOAT, None)]),
        opset_imports=[h.make_opsetid("", 17)])
    sets = {"x": np.ones((4, 6), np.float32), "z": np.ones((4, 1), np.float32),
            "s": np.array([[2, 3], [3, 2], [2, 3], [3, 2]], np.int64)}
    whole = np.ones((1, 1, 24), np.float32)  # as the audit compares such an output
    found = judge_sides(model, sets, {"y": whole, "w": -np.ones((4, 1), np.float32)},
                        {"y": whole, "w": np.full((4, 1), -2.0, np.float32)}, True)
    assert found["ran"], found
    assert found["outputs"]["y"]["closer"].startswith("cannot tell (the reference's shape")
    assert found["outputs"]["w"]["closer"] == "from"


def _npz(tmp: Path, **arrays: Any) -> Path:
    np.savez(tmp / "given.npz", **arrays)
    return tmp / "given.npz"


NARROW = {"b": T.BFLOAT16, "e4": T.FLOAT8E4M3FN, "e4u": T.FLOAT8E4M3FNUZ, "e5": T.FLOAT8E5M2,
          "e5u": T.FLOAT8E5M2FNUZ}


def test_bfloat16_and_float8_outputs_are_compared_as_float32_after_an_exact_cast(
        tmp_path: Path) -> None:
    """onnxruntime 1.20.1 and 1.29.0 hand numpy no array for these types ("No corresponding
    Numpy type"; 1.29.0 gives float8e4m3fn's raw bytes as uint8): the audit's copy casts
    each to float32 under the output's own name, so every value arrives exact, and the
    report says so."""
    x = (X * 3).astype(np.float32)
    model, inputs = _save(tmp_path, [h.make_node("Mul", ["x", "x"], ["m"]), *(
        h.make_node("Cast", ["m"], [name], to=t) for name, t in NARROW.items())],
        [_x(["N", 6])], [h.make_tensor_value_info(n, t, ["N", 6]) for n, t in NARROW.items()],
        21, x=x)
    record = _run(model, inputs, tmp_path / "report", 0)
    ran = np.load(tmp_path / "report" / "work" / "outputs" / PAIR[0] / "enable_all-t1" /
                  "plain-inputs.npz")
    for name, t in NARROW.items():
        narrow = onnx.helper.tensor_dtype_to_np_dtype(t)  # onnx's ml_dtypes type
        assert record["outputs"][name]["compared_as"] == \
            f"float32 after an exact cast from {T.DataType.Name(t).lower()}"
        assert ran[name].dtype == np.float32
        assert record["outputs"][name]["identical_share"] == 1.0  # 1.29.0's: float32 too
        assert np.array_equal(ran[name], (x * x).astype(narrow).astype(np.float32),
                              equal_nan=True), name
    page = re.sub(r"<[^>]+>", "", (tmp_path / "report" / "index.html").read_text())
    assert "b (float32 after an exact cast from bfloat16)" in page


def test_a_move_with_bfloat16_inside_is_localised(tmp_path: Path) -> None:
    """The corpus's Pad-into-AveragePool host (1.20.1 fuses wrongly) with a bfloat16 tensor
    after the pool and a float8 output: the instrumented copy exposes the bfloat16 tensor
    cast as the output is, on both releases, and the reference implementation judges the
    float8 output."""
    case = next(c for c in CASES if c.id == "pad-avgpool-fusion").build(0)
    graph = case.model.graph
    graph.node.extend([h.make_node("Cast", ["y"], ["half"], name="to_bf16", to=T.BFLOAT16),
                       h.make_node("Cast", ["half"], ["wide"], name="back", to=T.FLOAT),
                       h.make_node("Cast", ["wide"], ["y8"], name="to_f8", to=T.FLOAT8E4M3FN)])
    graph.output[0].name = "y8"
    graph.output[0].type.tensor_type.elem_type = T.FLOAT8E4M3FN
    del case.model.opset_import[:]
    case.model.opset_import.append(h.make_opsetid("", 19))  # float8 (Pad-21 is not fused)
    case.model.ir_version = 9
    onnx.save(case.model, str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "x.npz", **case.inputs)
    record = _run(tmp_path / "m.onnx", tmp_path / "x.npz", tmp_path / "report", 1)
    assert record["verdict"] == "beyond clean drift"
    assert record["outputs"]["y8"]["compared_as"] == "float32 after an exact cast from " \
                                                     "float8e4m3fn"
    assert record["first_moving"]["node"] == "avgpool"
    assert record["exposed"] == 4  # the pool, both casts out of float and the output
    exposed = probe(case.model, tmp_path / "probe.onnx",
                    load_protocol()["localisation"]["op_types"])
    half = next(e for e in exposed if e["tensor"] == "half")
    assert half["compared_as"] == "float32 after an exact cast from bfloat16"
    assert record["oracle"]["outputs"]["y8"]["closer"] == "to"


def test_the_page_says_how_a_moving_narrow_tensor_was_compared() -> None:
    """A node whose bfloat16 output first moves: the page's "Where it first moves" row says
    it was compared as float32 after an exact cast, as the outputs table does."""
    from kit.audit.report import _measured

    moving = {"tensor": "half", "node": "to_bf16", "op": "Cast", "inputs": "y",
              "upstream": "", "audited_rate": 1.0,
              "compared_as": "float32 after an exact cast from bfloat16"}
    record = {"outputs": {}, "why": "", "first_moving": moving, "exposed": 3}
    table = next(t for t in _measured(record) if t.heading == "Where it first moves")
    assert table.rows == [["to_bf16 (float32 after an exact cast from bfloat16)", "Cast", "y",
                           "100%", "none"]]


def test_widen_keeps_the_name_and_rewires_every_reader(tmp_path: Path) -> None:
    """The narrow tensor is renamed where its producer writes it and wherever a node or a
    subgraph reads it; the output keeps its name, now float32; an initializer output is
    renamed with its graph input entry."""
    branch = h.make_graph([h.make_node("Cast", ["y"], ["t"], to=T.FLOAT)], "b", [],
                          [h.make_tensor_value_info("t", T.FLOAT, ["N", 6])])
    c = h.make_tensor("c", T.BFLOAT16, [1], [1.5])
    graph = h.make_graph(
        [h.make_node("Cast", ["x"], ["y"], name="narrow", to=T.BFLOAT16),
         h.make_node("Cast", ["y"], ["w"], to=T.FLOAT),
         h.make_node("If", ["flag"], ["z"], then_branch=branch, else_branch=branch)], "g",
        [_x(["N", 6]), h.make_tensor_value_info("flag", T.BOOL, []),
         h.make_tensor_value_info("c", T.BFLOAT16, [1])],
        [h.make_tensor_value_info("y", T.BFLOAT16, ["N", 6]),
         h.make_tensor_value_info("z", T.FLOAT, ["N", 6]),
         h.make_tensor_value_info("w", T.FLOAT, ["N", 6]),
         h.make_tensor_value_info("c", T.BFLOAT16, [1])], [c])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 21)], ir_version=10)
    copy, compared = widen(model)
    onnx.checker.check_model(copy, full_check=True)
    assert compared == {"y": "float32 after an exact cast from bfloat16",
                        "c": "float32 after an exact cast from bfloat16"}
    assert {o.name: o.type.tensor_type.elem_type for o in copy.graph.output} == \
        {"y": T.FLOAT, "z": T.FLOAT, "w": T.FLOAT, "c": T.FLOAT}
    nodes = {n.name: n for n in copy.graph.node}
    assert list(nodes["narrow"].output) == ["y/bfloat16"]
    assert [n.input[0] for n in copy.graph.node if n.op_type == "Cast"][1:] == \
        ["y/bfloat16", "y/bfloat16", "c/bfloat16"]
    assert copy.graph.node[2].attribute[0].g.node[0].input[0] == "y/bfloat16"
    assert [i.name for i in copy.graph.input] == ["x", "flag", "c/bfloat16"]
    assert nodes["y (bfloat16) cast to float32 by kit audit"].output[0] == "y"
    assert model.graph.node[0].output[0] == "y"  # the model itself is left as it was


def test_an_int4_output_is_widened_and_refused_by_name_where_a_release_lacks_the_cast(
        tmp_path: Path) -> None:
    """int4 reaches numpy on no release either; 1.29.0 casts it to int8 exactly (compared
    exactly), 1.20.1 has no such Cast kernel, and the error names the output and its type
    with the release, in one line."""
    model, inputs = _save(tmp_path, [h.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"])],
                          [_x(["N", 6])], [h.make_tensor_value_info("q", T.INT4, ["N", 6])],
                          21, (nh.from_array(np.array(0.5, np.float32), "s"),
                               h.make_tensor("zp", T.INT4, [], [0])), x=X)
    proc = audit(str(model), "--inputs", str(inputs), "--from", f"{PAIR[1]}/disable_all",
                 "--to", PAIR[1], "--out", str(tmp_path / "report"), "--workers", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((tmp_path / "report" / "audit.json").read_text())
    assert record["outputs"]["q"]["compared_as"] == "int8 after an exact cast from int4"
    assert record["outputs"]["q"]["identical_share"] == 1.0
    proc = audit(str(model), "--inputs", str(inputs), "--from", PAIR[0], "--to", PAIR[1],
                 "--out", str(tmp_path / "again"), "--workers", "1")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    [line] = [ln for ln in proc.stderr.splitlines() if ln.startswith("kit: error")]
    assert "onnxruntime 1.20.1" in line
    assert "q (int4) cast to int8 by kit audit" in line


def test_an_unseeded_random_op_is_refused_by_name_before_anything_runs(
        tmp_path: Path) -> None:
    """RandomNormalLike without a seed (here inside an If's branch, where a scan of the
    top graph would miss it) gave 'beyond clean drift' with a side-picking that changed
    from run to run: two worker processes of one release already draw differently. It is
    refused naming the node; seeded, and a Dropout in inference mode, the audit runs."""
    from kit.audit.model import unseeded_random

    def branch(seed: bool, name: str) -> onnx.GraphProto:
        noise = h.make_node("RandomNormalLike", ["x"], ["n"], name=name,
                            **({"seed": 3.0} if seed else {}))
        return h.make_graph([noise, h.make_node("Add", ["x", "n"], ["b"])], "branch", [],
                            [h.make_tensor_value_info("b", T.FLOAT, ["N", 6])])

    for seed, code in ((False, 2), (True, 0)):
        folder = tmp_path / f"seed-{seed}"
        folder.mkdir()
        model, inputs = _save(
            folder, [h.make_node("If", ["flag"], ["y"], then_branch=branch(seed, "noise"),
                                 else_branch=branch(seed, "other"))],
            [_x(["N", 6])], [h.make_tensor_value_info("y", T.FLOAT, ["N", 6])],
            inits=(nh.from_array(np.array(True), "flag"),), x=X)
        proc = audit(str(model), "--inputs", str(inputs), "--from", PAIR[0], "--to", PAIR[1],
                     "--out", str(folder / "report"))
        assert proc.returncode == code, proc.stderr[-2000:]
        if not seed:
            assert proc.stderr.strip() == (
                f"kit: error: {model}: other (RandomNormalLike), noise (RandomNormalLike) draw "
                "random numbers without a seed, so two runs of one release already differ and "
                "a difference between releases says nothing; set the seed attribute to audit "
                "the model")
            assert not (folder / "report").exists()
    dropout = [h.make_node("Dropout", ["x", "", "train"], ["y"], name="drop")]
    for train, found in ((False, []), (True, ["drop (Dropout)"])):
        graph = h.make_graph(dropout, "g", [_x(["N", 6])],
                             [h.make_tensor_value_info("y", T.FLOAT, ["N", 6])],
                             [nh.from_array(np.array(train), "train")])
        assert unseeded_random(graph) == found
