"""Weight faults on the exported test net, checked in the weights and through a runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from kit.drift.faults import conv_layers, inject, perturb
from kit.errors import KitError
from kit.files import load_npz
from kit.runtime.backends import run_jobs
from kit.runtime.runtimes import get_runtime
from tests.conftest import job


def weights(path: Path) -> dict[str, np.ndarray]:
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer}


def test_conv_layers_in_graph_order(convnet_onnx: Path) -> None:
    layers = conv_layers(onnx.load(str(convnet_onnx)))
    assert len(layers) == 9
    assert [layer.index for layer in layers] == list(range(9))
    assert len({layer.weight for layer in layers}) == 9


@pytest.mark.parametrize(("family", "severity"), [("scale", 1e-3), ("noise", 1e-2),
                                                  ("quantise", 4)])
def test_only_the_chosen_weight_changes(convnet_onnx: Path, tmp_path: Path, family: str,
                                        severity: float) -> None:
    record = inject(convnet_onnx, tmp_path / "f.onnx", 4, family, severity, seed=5)
    clean, faulty = weights(convnet_onnx), weights(tmp_path / "f.onnx")
    changed = [name for name in clean if not np.array_equal(clean[name], faulty[name])]
    assert changed == [record.weight]
    w, f = clean[record.weight].astype(np.float64), faulty[record.weight].astype(np.float64)
    if family == "scale":
        np.testing.assert_allclose(f, w * (1 + severity), rtol=1e-6)
    elif family == "noise":
        assert 0.5 < (f - w).std() / (severity * w.std()) < 1.5
    else:
        assert len(np.unique(f)) <= 2 ** 4 - 1
    assert record.weight_sha256_before != record.weight_sha256_after


def test_same_seed_same_fault_bytes(convnet_onnx: Path, tmp_path: Path) -> None:
    a = inject(convnet_onnx, tmp_path / "a.onnx", 2, "noise", 1e-3, seed=9)
    b = inject(convnet_onnx, tmp_path / "b.onnx", 2, "noise", 1e-3, seed=9)
    c = inject(convnet_onnx, tmp_path / "c.onnx", 2, "noise", 1e-3, seed=10)
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()
    assert a.model_sha256 == b.model_sha256 != c.model_sha256


def test_a_fault_moves_the_candidates_logits(workdir: Path) -> None:
    inject(workdir / "in" / "convnet.onnx", workdir / "in" / "faulty.onnx", 8, "scale", 1e-2, 0)
    cand = get_runtime("cand")
    clean, faulty = run_jobs(cand, [job(id="c", output="c.npz"),
                                    job(id="f", model="faulty.onnx", output="f.npz")],
                             workdir / "in", workdir / "out", "venv")
    delta = load_npz(faulty)["logits"] - load_npz(clean)["logits"]
    assert np.abs(delta).max() > 1e-4


def test_bad_faults_are_refused(convnet_onnx: Path, tmp_path: Path) -> None:
    with pytest.raises(KitError, match=r"out of range 0\.\.8"):
        inject(convnet_onnx, tmp_path / "x.onnx", 9, "scale", 1e-3, 0)
    with pytest.raises(KitError, match="unknown fault family 'flip'"):
        perturb(np.ones(3, np.float32), "flip", 1, 0)
    with pytest.raises(KitError, match="integer bit count"):
        perturb(np.ones(3, np.float32), "quantise", 2.5, 0)
    with pytest.raises(KitError, match=r"leaves .* unchanged"):
        inject(convnet_onnx, tmp_path / "x.onnx", 0, "scale", 1e-12, 0)
    assert not (tmp_path / "x.onnx").exists()
