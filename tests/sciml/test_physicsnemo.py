"""The PhysicsNeMo subject's worker protocol: train (then load from the cache), step,
node-permutation equivariance through the pipe, errors raised with the worker's words.
The kit backend runs everywhere; the PhysicsNeMo backend where its environment is built
(``python -m kit.runtime.venvs physicsnemo``).

Also covers ``kit.sciml.physicsnemo_subject``, ``kit.sciml.physicsnemo_worker`` (no test
file of their own)."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kit.errors import KitError
from kit.paths import cache_dir
from kit.runtime.venvs import PHYSICSNEMO_LOCK, is_current, venv_python
from kit.sciml.checkpoints import cached_path
from kit.sciml.meshes import cylinder_mesh
from kit.sciml.mgn import directed_edges, permute_graph
from kit.sciml.mgn_train import Subject
from kit.sciml.physicsnemo_subject import Remote


def _data() -> dict[str, Any]:
    mesh = cylinder_mesh(max_area=2e-3)
    x, y = mesh.pos[:, 0], mesh.pos[:, 1]
    frames = np.stack([np.stack([1 + 0.1 * np.sin(3 * x + 0.3 * t), 0.05 * np.cos(4 * y + t)], 1)
                       for t in range(4)])
    return {"mesh_pos": mesh.pos, "cells": mesh.cells, "node_type": mesh.node_type[:, None],
            "velocity": frames}


def _exercise(python: Path, backend: str, tmp_path: Path) -> None:
    data = _data()
    subject = Subject(0, latent=8, steps=1, train_steps=3, arch=backend)
    edges = directed_edges(data["cells"])
    types = data["node_type"][:, 0].astype(np.int64)
    with Remote(python, backend) as net:
        net.train(subject, data, 3, "test", cache=tmp_path)
        assert net.info["parameters"] > 0
        first = net.info["final_loss"]
        base = net.step(data["mesh_pos"], data["velocity"][3], types, edges).numpy()
        assert base.shape == data["velocity"][3].shape
        assert np.abs(base - data["velocity"][3]).max() > 0  # a real update
        perm = np.random.default_rng(0).permutation(len(types))
        moved = net.step(*permute_graph(perm, data["mesh_pos"], data["velocity"][3], types,
                                        edges)).numpy()
        np.testing.assert_allclose(moved, base[perm], rtol=0, atol=1e-12)
        with pytest.raises(KitError, match=rf"physicsnemo_worker.py \({backend}\): RuntimeError"):
            net.step(data["mesh_pos"], data["velocity"][3][:5], types, edges)  # wrong shape
    cached = list(cached_path("physicsnemo", "x", tmp_path).parent.glob("*.pt"))
    assert len(cached) == 1
    with Remote(python, backend) as again:  # loaded, not trained again
        again.train(subject, data, 3, "test", cache=tmp_path)
        assert again.info["final_loss"] == first
        np.testing.assert_array_equal(
            again.step(data["mesh_pos"], data["velocity"][3], types, edges).numpy(), base)


def test_the_worker_protocol_with_the_kit_backend(tmp_path: Path) -> None:
    _exercise(Path(sys.executable), "kit", tmp_path)


def test_a_step_before_training_is_refused() -> None:
    data = _data()
    with Remote(Path(sys.executable), "kit") as net, \
            pytest.raises(KitError, match="step before train"):
        net.step(data["mesh_pos"], data["velocity"][0], data["node_type"][:, 0],
                 directed_edges(data["cells"]))


def test_a_worker_that_dies_is_reported(tmp_path: Path) -> None:
    with Remote(Path(sys.executable), "no-such-backend") as net, \
            pytest.raises(KitError, match="ended without answering"):
        net.train(Subject(0, arch="kit"), _data(), 3, "test", cache=tmp_path)


def test_a_stop_kills_the_worker_and_one_that_will_not_quit_is_killed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stop (here Ctrl-C) unwinding through ``Remote`` kills its worker at once, where it
    had asked it to quit and waited 60 s, then raised over the stop; a worker asked to quit
    that does not is killed after ``QUIT_WAIT_S``, never left running."""
    from kit.sciml import physicsnemo_subject

    hang = tmp_path / "hang.py"
    hang.write_text("import time\ntime.sleep(600)\n")
    monkeypatch.setattr(physicsnemo_subject, "WORKER", hang)
    started = time.monotonic()
    net = Remote(Path(sys.executable))
    with pytest.raises(KeyboardInterrupt):
        _ctrl_c_inside(net)
    assert net.process.returncode == -signal.SIGKILL
    assert time.monotonic() - started < 30
    monkeypatch.setattr(physicsnemo_subject, "QUIT_WAIT_S", 0.5)
    with Remote(Path(sys.executable)) as net:
        deaf = net.process
    assert deaf.returncode == -signal.SIGKILL


def _ctrl_c_inside(net: Remote) -> None:
    with net:
        raise KeyboardInterrupt


PHYSICSNEMO = venv_python(cache_dir() / "venvs" / "physicsnemo")


def test_the_worker_protocol_with_physicsnemo(tmp_path: Path) -> None:
    """Skipped where the environment is not built, unless KIT_REQUIRE_PHYSICSNEMO=1 (CI
    builds it), where a missing environment is a failure."""
    if not is_current(PHYSICSNEMO.parents[1], PHYSICSNEMO_LOCK):
        # A build that was interrupted leaves an interpreter without the lock's stamp.
        problem = f"the PhysicsNeMo environment is not built from {PHYSICSNEMO_LOCK} " \
                  f"({PHYSICSNEMO.parents[1]}; python -m kit.runtime.venvs physicsnemo)"
        if os.environ.get("KIT_REQUIRE_PHYSICSNEMO") == "1":
            pytest.fail(f"KIT_REQUIRE_PHYSICSNEMO=1 but {problem}")
        pytest.skip(problem)
    _exercise(PHYSICSNEMO, "physicsnemo", tmp_path)
