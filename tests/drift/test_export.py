"""Export as the drift study does (BN folded) and what the two runtimes make of it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from kit.files import load_npz
from kit.runtime.backends import run_jobs
from kit.runtime.runtimes import get_runtime
from tests.conftest import job


def test_export_folds_batchnorm_into_convolutions(convnet_onnx: Path) -> None:
    graph = onnx.load(str(convnet_onnx)).graph
    ops = [node.op_type for node in graph.node]
    assert "BatchNormalization" not in ops
    assert ops.count("Conv") == 9  # stem, 3 blocks of 2, 2 projection skips
    assert [i.name for i in graph.input] == ["input"]
    assert [o.name for o in graph.output] == ["logits"]
    batch = graph.input[0].type.tensor_type.shape.dim[0]
    assert batch.dim_param == "batch"


def test_reference_and_candidate_differ_slightly_with_equal_argmax(workdir: Path) -> None:
    ref = run_jobs(get_runtime("ref"), [job()], workdir / "in", workdir / "ref", "venv")[0]
    cand = run_jobs(get_runtime("cand"), [job()], workdir / "in", workdir / "cand", "venv")[0]
    lo, lc = load_npz(ref)["logits"], load_npz(cand)["logits"]
    difference = np.abs(lc.astype(np.float64) - lo.astype(np.float64)).max()
    assert 0 < difference < 1e-3
    np.testing.assert_array_equal(lo.argmax(axis=1), lc.argmax(axis=1))
