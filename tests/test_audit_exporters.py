"""``python -m kit audit`` on graphs an exporter writes that the kit's own models never
have, end to end on the two releases the default tests build: a scalar output, a scalar
input, a string output, an output whose second axis follows the inputs (a similarity
matrix over more inputs than one run takes), and onnxruntime's MatMulScaleFusion defect
(the corpus's ``matmul-scale-leading-dims``: 1.20.1 gives its output another shape), as a
graph output and inside a graph that exposes a scalar to the instrumented copy. Each gets
a verdict and a report, never a traceback; the shape a release changed is named as the
runtime gave it, and the specification's shape inference says which side is right."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

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


def _run(model: Path, inputs: Path, out: Path, code: int) -> dict[str, Any]:
    proc = audit(str(model), "--inputs", str(inputs), "--from", PAIR[0], "--to", PAIR[1],
                 "--out", str(out), "--workers", "1")
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
