"""``python -m kit bench --vs-polygraphy`` (kit.audit.versus) and the models it exports
(kit.audit.models): the by-hand Polygraphy route really compares the two releases, and
one side-by-side row carries both routes' times and verdicts."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from kit.audit.models import export
from kit.audit.versus import polygraphy_commands, polygraphy_path, side_by_side
from kit.runtime.venvs import ensure_runtime


def test_the_by_hand_route_passes_equal_outputs_and_fails_moved_ones(tmp_path: Path) -> None:
    """Polygraphy (tools.lock's) runs in each release's own environment; a saved output
    moved by 1e-3 fails the second command."""
    from polygraphy.json import load_json, save_json

    graph = helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["y"], axis=1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])])
    model = tmp_path / "softmax.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(model))
    inputs, outputs = tmp_path / "in.json", tmp_path / "out.json"
    save_json([{"x": np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)}],
              str(inputs))
    pythons = (ensure_runtime("ref"), ensure_runtime("cand"))
    env = {"PYTHONPATH": str(polygraphy_path(Path(tempfile.mkdtemp(dir=tmp_path))))}
    save, compare = polygraphy_commands(model, inputs, outputs, pythons)

    def run(command: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(command, env=env, capture_output=True, text=True, check=False,
                              timeout=300)

    assert run(save).returncode == 0
    passed = run(compare)
    assert passed.returncode == 0, passed.stderr[-2000:]
    assert "PASSED" in passed.stdout + passed.stderr
    assert [p.name for p in Path(env["PYTHONPATH"]).iterdir()] == ["polygraphy"]  # alone
    results = load_json(str(outputs))
    [(_, [iteration])] = list(results.items())
    iteration["y"] = iteration["y"] + np.float32(1e-3)
    save_json(results, str(outputs))
    failed = run(compare)
    assert failed.returncode == 1
    assert "FAILED" in failed.stdout + failed.stderr


def test_one_side_by_side_row(tmp_path: Path) -> None:
    """The encoder, one timed run of each route after the untimed one: both within, the
    ratio the medians', the floor beside."""
    row = side_by_side("encoder", tmp_path, runs=1)
    assert row["audit_verdict"] == "within clean drift"
    assert row["polygraphy_verdict"] == "PASSED"
    medians = row["audit_s"]["median"] / row["polygraphy_s"]["median"]  # each rounded
    assert abs(row["ratio"] - medians) <= 0.02 * medians
    assert row["met"] == (row["ratio"] <= 3.0)
    assert row["floor_s"] > 0
    # whether the clean pairs ran (test_audit.py checks each way), and the forced route
    assert row["envelope"] in ("run", "not run: bit-identical")
    assert row["envelope_s"]["median"] > 0
    json.dumps(row)


def test_a_torchvision_model_exports_with_its_inputs(tmp_path: Path) -> None:
    model, inputs = export("squeezenet1_1", tmp_path)
    graph = onnx.load(str(model)).graph
    assert [i.name for i in graph.input] == ["x"]
    assert graph.input[0].type.tensor_type.shape.dim[0].dim_param == "n"  # dynamic rows
    assert np.load(inputs)["x"].shape == (16, 3, 224, 224)
