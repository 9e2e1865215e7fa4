"""PINN subjects: small tanh MLPs u(x, t) trained by the kit on 1-D viscous Burgers
(Dirichlet) and heat (Neumann) on x in [0, 1], t in [0, T], with their references.

    Burgers  u_t + u u_x = nu u_xx, nu = 0.02, u0 = sin(pi x), u(0, t) = u(1, t) = 0
    heat     u_t = k u_xx, k = 0.1, u0 = 1 + cos(pi x), u_x(0, t) = u_x(1, t) = 0
             (exact: 1 + exp(-k pi^2 t) cos(pi x))

The Burgers reference is a conservative finite-volume solution (Rusanov flux, zero
Dirichlet ghost cells, 400 cells). Training: Adam on the PDE residual at seeded
collocation points plus initial and boundary losses, one torch thread, a fixed step budget
(``Recipe.steps``: 1,000 Adam steps on 500 points, about 20 s for Burgers and 5 s for
heat on one core here), cached by a hash of the recipe and this source.

Relations per subject:
- MR-A collocation permutation: permuting the evaluation points permutes a pointwise
  network's outputs exactly, so the violation is identically 0: vacuous by construction.
- MR-B boundary residual: RMS of the boundary-condition residual (u for Dirichlet, u_x
  for Neumann, by autograd) over 101 times, over the residual floor ``BOUNDARY_FLOOR``
  x the field scale (max |u0| or max |u0'|), fixed before any training.
- MR-C reference-relative conservation: integral of u(., T) over the reference's
  (trapezoid, 201 points); passes within ``CONSERVATION_TOLERANCE`` of 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kit.sciml import checkpoints

Array = np.ndarray[Any, Any]
HORIZON = 0.5
PDES: dict[str, dict[str, Any]] = {"burgers": {"nu": 0.02, "boundary": "dirichlet"},
        "heat": {"nu": 0.1, "boundary": "neumann"}}
BOUNDARY_FLOOR = 1.0e-2
CONSERVATION_TOLERANCE = 0.05


@dataclass(frozen=True)
class Recipe:
    pde: str
    seed: int
    width: int = 32
    depth: int = 3
    steps: int = 1000
    collocation: int = 500
    lr: float = 2e-3


def initial(pde: str, x: Array) -> Array:
    return np.asarray(np.sin(np.pi * x) if pde == "burgers" else 1.0 + np.cos(np.pi * x))


def reference(pde: str, x: Array, t: float) -> Array:
    """The reference solution at time ``t`` on the points ``x``."""
    nu = PDES[pde]["nu"]
    if pde == "heat":
        return np.asarray(1.0 + math.exp(-nu * math.pi ** 2 * t) * np.cos(np.pi * x))
    cells = 400
    dx = 1.0 / cells
    centres = (np.arange(cells) + 0.5) * dx
    u = initial(pde, centres)
    time = 0.0
    while time < t - 1e-12:
        dt = min(0.4 * dx / max(np.abs(u).max(), 1e-12), 0.2 * dx * dx / nu, t - time)
        padded = np.r_[-u[0], u, -u[-1]]                 # zero Dirichlet by odd ghosts
        left, right = padded[:-1], padded[1:]
        speed = np.maximum(np.abs(left), np.abs(right))
        flux = 0.25 * (left ** 2 + right ** 2) - 0.5 * speed * (right - left) \
            - nu * (right - left) / dx
        u = u - dt / dx * (flux[1:] - flux[:-1])
        time += dt
    return np.interp(x, np.r_[0.0, centres, 1.0], np.r_[0.0, u, 0.0])


def _network(recipe: Recipe) -> Any:
    import torch
    from torch import nn

    torch.manual_seed(recipe.seed)
    layers: list[nn.Module] = []
    width_in = 2
    for _ in range(recipe.depth):
        layers += [nn.Linear(width_in, recipe.width), nn.Tanh()]
        width_in = recipe.width
    layers.append(nn.Linear(width_in, 1))
    return nn.Sequential(*layers).double()


def _derivatives(net: Any, x: Any, t: Any) -> tuple[Any, Any, Any, Any]:
    import torch

    u = net(torch.stack([x, t], 1))[:, 0]
    u_x, u_t = torch.autograd.grad(u.sum(), (x, t), create_graph=True)
    u_xx = torch.autograd.grad(u_x.sum(), x, create_graph=True)[0]
    return u, u_x, u_t, u_xx


def train(recipe: Recipe, cache: Path | None = None) -> tuple[Any, dict[str, Any]]:
    """The trained PINN (cached by content hash) and its record."""
    import torch

    torch.set_num_threads(1)
    key = checkpoints.content_key(recipe, (Path(__file__),))
    path = checkpoints.cached_path("pinn", f"{recipe.pde}-{recipe.seed}-{key}", cache)
    net = _network(recipe)
    state = checkpoints.load(path)
    if state is not None:
        net.load_state_dict(state["model"])
        return net, {"cached": True, "final_loss": float(state["final_loss"])}
    nu, boundary = PDES[recipe.pde]["nu"], PDES[recipe.pde]["boundary"]
    rng = np.random.default_rng(recipe.seed + 10_000)
    xc = torch.tensor(rng.uniform(0, 1, recipe.collocation), requires_grad=True)
    tc = torch.tensor(rng.uniform(0, HORIZON, recipe.collocation), requires_grad=True)
    x0 = np.linspace(0, 1, 101)
    init_in = torch.tensor(np.stack([x0, np.zeros_like(x0)], 1))
    init_out = torch.tensor(initial(recipe.pde, x0))
    tb = np.linspace(0, HORIZON, 101)
    xb = torch.tensor(np.r_[np.zeros_like(tb), np.ones_like(tb)], requires_grad=True)
    tbt = torch.tensor(np.r_[tb, tb], requires_grad=True)
    optimiser = torch.optim.Adam(net.parameters(), lr=recipe.lr)
    loss = torch.tensor(0.0)
    for _ in range(recipe.steps):
        u, u_x, u_t, u_xx = _derivatives(net, xc, tc)
        residual = u_t + (u * u_x if recipe.pde == "burgers" else 0.0) - nu * u_xx
        ub, ub_x, _, _ = _derivatives(net, xb, tbt)
        bc = ub if boundary == "dirichlet" else ub_x
        loss = (residual ** 2).mean() + ((net(init_in)[:, 0] - init_out) ** 2).mean() \
            + (bc ** 2).mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    checkpoints.save(path, net, final_loss=float(loss.detach()))
    return net, {"cached": False, "final_loss": float(loss.detach())}


def evaluate(net: Any, pde: str) -> dict[str, float]:
    """MR-A, MR-B and MR-C of one trained PINN."""
    import torch

    boundary = PDES[pde]["boundary"]
    rng = np.random.default_rng(0)
    points = torch.tensor(np.stack([rng.uniform(0, 1, 500), rng.uniform(0, HORIZON, 500)], 1))
    order = torch.tensor(rng.permutation(500))
    with torch.no_grad():
        permuted = float((net(points[order]) - net(points)[order]).abs().max())
    tb = np.linspace(0, HORIZON, 101)
    xb = torch.tensor(np.r_[np.zeros_like(tb), np.ones_like(tb)], requires_grad=True)
    tbt = torch.tensor(np.r_[tb, tb], requires_grad=True)
    ub, ub_x, _, _ = _derivatives(net, xb, tbt)
    bc = (ub if boundary == "dirichlet" else ub_x).detach().numpy()
    x0 = np.linspace(0, 1, 1001)
    scale = float(np.abs(initial(pde, x0)).max() if boundary == "dirichlet"
                  else np.abs(np.gradient(initial(pde, x0), x0)).max())
    x = np.linspace(0, 1, 201)
    with torch.no_grad():
        u_end = net(torch.tensor(np.stack([x, np.full_like(x, HORIZON)], 1)))[:, 0].numpy()
    reference_mass = float(np.trapezoid(reference(pde, x, HORIZON), x))
    return {"mr_a_violation": permuted,
            "mr_b_violation": float(np.sqrt(np.mean(bc ** 2)) / scale),
            "mr_b_floor": BOUNDARY_FLOOR,
            "mr_c_ratio": float(np.trapezoid(u_end, x)) / reference_mass,
            "relative_l2": float(np.linalg.norm(u_end - reference(pde, x, HORIZON))
                                 / np.linalg.norm(reference(pde, x, HORIZON)))}
