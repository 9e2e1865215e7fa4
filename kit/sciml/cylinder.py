"""Incompressible channel flow past a cylinder, simulated with phiflow and put on the
unstructured mesh of ``kit.sciml.meshes`` in DeepMind's cylinder_flow layout.

Solver: phiflow 3.4 on the numpy backend, a staggered 128 x 64 grid of the 1.6 x 0.41
channel, uniform inflow ``inflow`` at x = 0, zero-gradient outflow, no-slip walls, the
cylinder as an obstacle; semi-Lagrangian advection, explicit diffusion (nu), pressure
projection. Re = inflow x diameter / nu (100 by default), where vortex shedding develops.
Frames after ``spinup`` steps, every ``stride`` steps, are interpolated (linear, from cell
centres) onto the mesh nodes. Results are cached by a hash of the configuration and this
source, since one trajectory takes minutes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kit.files import load_npz, write_npz
from kit.sciml.checkpoints import cached_path, content_key
from kit.sciml.meshes import HEIGHT, LENGTH, Mesh, cylinder_mesh

Array = np.ndarray[Any, Any]


@dataclass(frozen=True)
class Flow:
    """Everything that decides one trajectory."""

    inflow: float = 1.0
    nu: float = 1e-3
    nx: int = 128
    ny: int = 64
    dt: float = 0.004
    spinup: int = 400
    frames: int = 50
    stride: int = 5
    centre: tuple[float, float] = (0.33, 0.22)
    radius: float = 0.05


def simulate_grid(flow: Flow) -> dict[str, Array]:
    """Cell-centred velocity (frames, nx, ny, 2) and pressure (frames, nx, ny).

    BLAS runs on one thread throughout: its summation order changes with the thread
    count, the pressure solve's iterations follow, and vortex shedding amplifies the
    difference (measured: 0.046 in velocity after 60 steps between one thread and two),
    so without the limit a trajectory would depend on the machine's cores and its load.
    The limit reaches only the BLAS libraries already loaded, and scipy loads its own
    OpenBLAS, so phiflow and scipy's solvers are imported first (measured: imported under
    the limit, scipy's BLAS kept two threads, and of three concurrent 60-step runs one
    differed from the others by 0.046)."""
    import phi.flow  # noqa: F401  (loads scipy's BLAS before the limit is set)
    import scipy.linalg
    import scipy.sparse.linalg  # noqa: F401
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        return _simulate_grid(flow)


def _simulate_grid(flow: Flow) -> dict[str, Array]:
    from phi import flow as phi

    bounds = phi.Box(x=LENGTH, y=HEIGHT)
    obstacle = phi.Obstacle(phi.Sphere(x=flow.centre[0], y=flow.centre[1],
                                       radius=flow.radius))
    boundary = {"x-": phi.vec(x=flow.inflow, y=0), "x+": phi.ZERO_GRADIENT, "y-": 0, "y+": 0}
    velocity = phi.StaggeredGrid(phi.vec(x=flow.inflow, y=0), boundary, bounds,
                                 x=flow.nx, y=flow.ny)
    pressure = None
    frames_v, frames_p = [], []
    for step in range(flow.spinup + flow.frames * flow.stride):
        velocity = phi.advect.semi_lagrangian(velocity, velocity, flow.dt)
        velocity = phi.diffuse.explicit(velocity, flow.nu, flow.dt)
        velocity, pressure = phi.fluid.make_incompressible(
            velocity, [obstacle], phi.Solve("auto", 1e-5, x0=pressure))
        if step >= flow.spinup and (step - flow.spinup) % flow.stride == flow.stride - 1:
            frames_v.append(velocity.at_centers().values.numpy("x,y,vector"))
            frames_p.append(pressure.values.numpy("x,y"))
    return {"velocity": np.asarray(frames_v, np.float64),
            "pressure": np.asarray(frames_p, np.float64)}


def to_mesh(grid: dict[str, Array], flow: Flow, mesh: Mesh) -> dict[str, Array]:
    """Linear interpolation of every frame from cell centres onto the mesh nodes."""
    from scipy.interpolate import RegularGridInterpolator

    xs = (np.arange(flow.nx) + 0.5) * LENGTH / flow.nx
    ys = (np.arange(flow.ny) + 0.5) * HEIGHT / flow.ny
    velocity, pressure = [], []
    for v, p in zip(grid["velocity"], grid["pressure"], strict=True):
        frame = [RegularGridInterpolator((xs, ys), v[..., k], bounds_error=False,
                                         fill_value=None)(mesh.pos) for k in range(2)]
        velocity.append(np.stack(frame, 1))
        pressure.append(RegularGridInterpolator((xs, ys), p, bounds_error=False,
                                                fill_value=None)(mesh.pos)[:, None])
    return {"mesh_pos": mesh.pos, "cells": mesh.cells, "node_type": mesh.node_type[:, None],
            "velocity": np.asarray(velocity), "pressure": np.asarray(pressure)}


def trajectory(flow: Flow, cache: Path | None = None) -> dict[str, Array]:
    """One trajectory on the cylinder mesh (cached)."""
    path = cached_path("cylinder", content_key(flow, (Path(__file__),)), cache, ".npz")
    if path.is_file():
        return load_npz(path)
    mesh = cylinder_mesh(flow.centre, flow.radius)
    found = to_mesh(simulate_grid(flow), flow, mesh)
    write_npz(path, {k: np.ascontiguousarray(v) for k, v in found.items()})
    return found
