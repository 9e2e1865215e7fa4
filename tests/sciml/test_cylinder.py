"""The cylinder-flow simulation on a tiny grid: shapes, the obstacle's effect, caching,
and the official data layout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from kit.sciml.checkpoints import cached_path
from kit.sciml.cylinder import Flow, simulate_grid, trajectory
from kit.sciml.deepmind import trajectories, write_dataset

TINY = Flow(nx=32, ny=16, spinup=3, frames=2, stride=2)


def test_tiny_simulation_is_incompressible_away_from_the_body(tmp_path: Path) -> None:
    grid = simulate_grid(TINY)
    assert grid["velocity"].shape == (2, 32, 16, 2)
    u = grid["velocity"][-1]
    dx, dy = 1.6 / 32, 0.41 / 16
    div = np.gradient(u[..., 0], dx, axis=0) + np.gradient(u[..., 1], dy, axis=1)
    far = div[20:28, 3:13]  # downstream interior, away from inflow, walls and body
    assert np.abs(far).max() < 0.5 * np.abs(u[..., 0]).max() / dx
    assert np.abs(u[..., 1]).max() > 1e-3  # the cylinder deflects the flow


def test_trajectory_is_cached_and_exports_in_the_official_layout(tmp_path: Path) -> None:
    first = trajectory(TINY, cache=tmp_path)
    again = trajectory(TINY, cache=tmp_path)
    np.testing.assert_array_equal(first["velocity"], again["velocity"])
    assert len(list(cached_path("cylinder", "x", tmp_path).parent.glob("*.npz"))) == 1
    frames, nodes = first["velocity"].shape[:2]
    meta = {"dt": 0.02, "trajectory_length": frames,
            "field_names": ["cells", "mesh_pos", "node_type", "velocity"],
            "features": {"cells": {"type": "static", "shape": [1, -1, 3], "dtype": "int32"},
                         "mesh_pos": {"type": "static", "shape": [1, -1, 2],
                                      "dtype": "float32"},
                         "node_type": {"type": "static", "shape": [1, -1, 1],
                                       "dtype": "int32"},
                         "velocity": {"type": "dynamic", "shape": [frames, -1, 2],
                                      "dtype": "float32"}}}
    record = {"cells": first["cells"][None], "mesh_pos": first["mesh_pos"][None],
              "node_type": first["node_type"][None], "velocity": first["velocity"]}
    write_dataset(tmp_path / "data", "train", [record], meta)
    (loaded,) = trajectories(tmp_path / "data", "train")
    assert loaded["velocity"].shape == (frames, nodes, 2)
    np.testing.assert_allclose(loaded["velocity"], first["velocity"], rtol=1e-6, atol=1e-6)


def test_the_simulation_runs_blas_on_one_thread() -> None:
    """BLAS's thread count changes the pressure solve's rounding, which vortex shedding
    amplifies (0.046 in velocity after 60 steps here), so the trajectory must not depend
    on the machine's cores. Checked in a fresh interpreter (where scipy's own OpenBLAS is
    not loaded yet) asking for four threads, at every pressure solve of a small run."""
    script = """
import json
from threadpoolctl import threadpool_info
from kit.sciml import cylinder
seen = []
simulate = cylinder._simulate_grid
def recording(flow):
    from phi.physics import fluid  # imported where the simulation imports it
    solve = fluid.make_incompressible
    def record(*args, **kwargs):
        seen.append({p["filepath"]: p["num_threads"] for p in threadpool_info()
                     if p["user_api"] == "blas"})
        return solve(*args, **kwargs)
    fluid.make_incompressible = record
    return simulate(flow)
cylinder._simulate_grid = recording
cylinder.simulate_grid(cylinder.Flow(nx=16, ny=8, spinup=1, frames=1, stride=1))
print(json.dumps(seen))
"""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "4"}
    done = subprocess.run([sys.executable, "-c", script], env=env, check=True,
                          capture_output=True, text=True)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(seen) == 2
    libraries = {path for call in seen for path in call}
    assert any("scipy" in path for path in libraries), libraries
    assert {n for call in seen for n in call.values()} == {1}, seen
