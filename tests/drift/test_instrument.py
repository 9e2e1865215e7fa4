"""Instrumented graphs: sketch outputs equal the numpy sketch of the raw activations."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from kit.drift.faults import conv_layers
from kit.drift.instrument import group_matrix, instrument, sketch_numpy
from kit.files import load_npz, write_atomic
from kit.runtime.backends import run_jobs
from kit.runtime.runtimes import get_runtime
from tests.conftest import job


def test_group_matrix_caps_and_averages() -> None:
    m = group_matrix(64, 21)
    assert m.shape == (64, 21)
    np.testing.assert_allclose(m.sum(axis=0), 1.0)
    assert (m > 0).sum(axis=1).tolist() == [1] * 64  # each channel in exactly one group
    assert group_matrix(16, 21).shape == (16, 16)


def _raw_conv_outputs(source: Path, target: Path) -> list[str]:
    model = onnx.load(str(source))
    names = []
    for layer in conv_layers(model):
        node = next(n for n in model.graph.node if n.name == layer.node)
        model.graph.output.append(helper.make_tensor_value_info(
            node.output[0], TensorProto.FLOAT, None))
        names.append(node.output[0])
    write_atomic(target, model.SerializeToString())
    return names


def test_sketches_match_numpy_and_logits_stay_at_the_reference(workdir: Path) -> None:
    inp = workdir / "in"
    sketches = instrument(inp / "convnet.onnx", inp / "inst.onnx")
    assert len(sketches) == 9
    raw_names = _raw_conv_outputs(inp / "convnet.onnx", inp / "raw.onnx")
    ref = get_runtime("ref")
    plain, inst, raw = run_jobs(ref, [job(id="p", output="p.npz"),
                                      job(id="i", model="inst.onnx", output="i.npz"),
                                      job(id="r", model="raw.onnx", output="r.npz")],
                                inp, workdir / "out", "venv")
    out, activations = load_npz(inst), load_npz(raw)
    for tag, raw_name in zip(sketches, raw_names, strict=True):
        expected = sketch_numpy(activations[raw_name])
        assert out[tag].shape == expected.shape
        assert out[tag].shape[1] <= 64
        np.testing.assert_allclose(out[tag], expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(out["logits"], load_npz(plain)["logits"])
