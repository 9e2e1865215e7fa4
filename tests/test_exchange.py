"""The one-exchange command, through the real command line."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kit.worker import meta_path, read_npz, write_npz


def kit_run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kit", "run", *map(str, args)],
                          capture_output=True, text=True)


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
    assert sorted(read_npz(out)) == ["logits"]
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
