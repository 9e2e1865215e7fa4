"""The second task the gate screens: compressible flow past an elliptic airfoil at a
non-zero angle of attack, on an unstructured triangle mesh (DeepMind airfoil node types).

The field is analytic, so the kit can justify every property the gate reads:

- the mass flux m = rho u is the potential flow past the ellipse (Joukowski map of a
  circle, free stream at angle ``alpha``), scaled by the free-stream density: it is
  divergence-free exactly, so compressible continuity holds in the continuum;
- the density is the isentropic relation at the local speed, rho = (1 + (g-1)/2 M^2
  (1 - q^2))^(1/(g-1)) with q = |m| / rho, solved on the subsonic branch by bisection;
- u = m / rho then has a non-zero divergence wherever the density varies.

It does not solve the momentum equation exactly (it stands in for a compressible solver's
output); what the gate needs from it are measured properties, and each decision below
comes from one of them, never from a flag:

- incompressible continuity: the basis (density constant) is measured as the density
  variation (max - min) / rho_inf against ``INCOMPRESSIBLE_LIMIT`` (the customary 5%,
  about Mach 0.3): rejected at the basis when it exceeds it;
- mirror-y: the boundary values under reflection (y -> -y, v -> -v, nearest-neighbour
  mapping on the mesh) are compared on the inflow boundary with the same measure for the
  free stream at zero incidence on this mesh (the mapping floor): rejected at the boundary
  condition when the mismatch exceeds twice that floor (the reflected problem has the
  free stream at -alpha: another boundary-value problem);
- node permutation: no node order enters a message-passing network, so it is admitted
  (and executed on the kit's trained MeshGraphNets with this field as input);
- absolute compressible mass conservation: the reference's own interior P1 residual of
  div(rho u) (zero in the continuum, so it is the operator and interpolation floor) is
  measured against a tolerance of 1% of the mass-flux gradient scale; deferred to a
  reference-relative diagnostic when the floor is not dominated by the card's margin.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from kit.sciml.cards import fixed_tolerance, tolerance_fraction
from kit.sciml.gate import FAILS, HOLDS, GateFindings, decide
from kit.sciml.ledger import Ledger
from kit.sciml.meshes import INFLOW, NORMAL, OUTFLOW, Mesh
from kit.sciml.mgn import directed_edges
from kit.sciml.mgn_faults import (
    Divergence,
    Graph,
    nearest_reflection,
    permutation_violation,
    reflect,
    step,
)
from kit.sciml.verdicts import judge

Array = np.ndarray[Any, Any]
AIRFOIL = 2  # DeepMind NodeType.AIRFOIL
GAMMA = 1.4
INCOMPRESSIBLE_LIMIT = 0.05
MASS_FRACTION = tolerance_fraction("cmp-mass-conservation")
X_RANGE, Y_HALF = (-1.0, 2.0), 1.0


@dataclass(frozen=True)
class Airfoil:
    mach: float = 0.4
    alpha_deg: float = 6.0
    radius: float = 0.25       # circle radius a in the Joukowski plane
    focus: float = 0.15        # c: the ellipse has semi-axes a + c^2/a and a - c^2/a
    max_area: float = 5e-4    # about 9,700 nodes
    segments: int = 160


def airfoil_mesh(case: Airfoil) -> Mesh:
    """The far-field box with the ellipse cut out, by ``triangle``; node types: airfoil,
    inflow (left, top, bottom), outflow (right), fluid."""
    import triangle

    a, c = case.radius, case.focus
    theta = np.linspace(0, 2 * np.pi, case.segments, endpoint=False)
    body = np.c_[(a + c * c / a) * np.cos(theta), (a - c * c / a) * np.sin(theta)]
    (x0, x1), h = X_RANGE, Y_HALF
    outer = np.array([[x0, -h], [x1, -h], [x1, h], [x0, h]])
    ring = np.arange(case.segments) + 4
    segments = np.r_[np.array([[0, 1], [1, 2], [2, 3], [3, 0]]), np.c_[ring, np.roll(ring, -1)]]
    result = triangle.triangulate({"vertices": np.r_[outer, body], "segments": segments,
                                   "holes": np.array([[0.0, 0.0]])},
                                  f"pq30a{case.max_area}")
    pos = np.asarray(result["vertices"], np.float64)
    types = np.full(len(pos), NORMAL, np.int32)
    x, y = pos[:, 0], pos[:, 1]
    tol = 1e-9
    inside = (x / (a + c * c / a)) ** 2 + (y / (a - c * c / a)) ** 2
    types[inside < 1 + 1e-6] = AIRFOIL
    types[(x < x0 + tol) | (np.abs(y) > h - tol)] = INFLOW
    types[x > x1 - tol] = OUTFLOW
    return Mesh(pos, np.asarray(result["triangles"], np.int64), types)


def _potential_velocity(case: Airfoil, pos: Array) -> Array:
    """Incompressible potential flow past the ellipse, unit free stream at alpha."""
    a, c, alpha = case.radius, case.focus, np.radians(case.alpha_deg)
    z = pos[:, 0] + 1j * pos[:, 1]
    root = np.sqrt(z * z - 4 * c * c)
    zeta = np.where(np.abs(z + root) >= np.abs(z - root), (z + root) / 2, (z - root) / 2)
    w = (np.exp(-1j * alpha) - a * a * np.exp(1j * alpha) / zeta ** 2) / (1 - c * c / zeta ** 2)
    return np.stack([w.real, -w.imag], 1)  # w = u - i v


def _isentropic(mach: float, q: Array) -> Array:
    base = 1 + 0.5 * (GAMMA - 1) * mach * mach * (1 - q * q)
    return np.asarray(np.maximum(base, 0.0) ** (1 / (GAMMA - 1)))


def compressible_field(case: Airfoil, pos: Array) -> tuple[Array, Array]:
    """(velocity, density) at the nodes; refuses a case whose flux would choke."""
    flux = _potential_velocity(case, pos)
    magnitude = np.linalg.norm(flux, axis=1)
    sonic = np.sqrt((2 / (GAMMA - 1) + case.mach ** 2) / ((GAMMA + 1) / (GAMMA - 1))) \
        / case.mach  # speed (in free-stream units) where the local Mach number is 1
    if magnitude.max() >= _isentropic(case.mach, np.array([sonic]))[0] * sonic:
        raise ValueError(f"{case}: the mass flux exceeds the sonic limit (the flow chokes)")
    low, high = np.zeros_like(magnitude), np.full_like(magnitude, sonic)
    for _ in range(80):  # bisection on the subsonic branch of rho(q) q = |m|
        mid = 0.5 * (low + high)
        below = _isentropic(case.mach, mid) * mid < magnitude
        low, high = np.where(below, mid, low), np.where(below, high, mid)
    speed = 0.5 * (low + high)
    density = _isentropic(case.mach, speed)
    return np.asarray(flux / density[:, None]), density


def _boundary_mismatch(velocity: Array, source: Array, on: Array) -> float:
    reflected = reflect(velocity, source)
    return float(np.linalg.norm((reflected - velocity)[on]) / np.linalg.norm(velocity[on]))


def run_second_task(ledger: Ledger, cards: dict[str, dict[str, Any]], nets: list[Any],
                    case: Airfoil | None = None, permutation_seeds: int = 5
                    ) -> dict[str, Any]:
    """Measure, decide the four relations, execute the admitted permutation relation."""

    case = case or Airfoil()
    mesh = airfoil_mesh(case)
    velocity, density = compressible_field(case, mesh.pos)
    divergence = Divergence(mesh.pos, mesh.cells, mesh.node_type, interior=True)
    variation = float((density.max() - density.min()) / 1.0)
    source = nearest_reflection(mesh.pos, height=0.0)
    inflow = mesh.node_type == INFLOW
    level, _ = compressible_field(replace(case, alpha_deg=0.0), mesh.pos)
    bc_mismatch = _boundary_mismatch(velocity, source, inflow)
    bc_floor = _boundary_mismatch(level, source, inflow)
    mass = velocity * density[:, None]
    mass_floor = divergence.rms(mass)
    mass_scale = divergence.gradient_rms(mass)
    mass_tolerance = MASS_FRACTION * mass_scale
    measured = {
        "nodes": len(mesh.pos), "airfoil_nodes": int((mesh.node_type == AIRFOIL).sum()),
        "density_min": float(density.min()), "density_max": float(density.max()),
        "density_variation": variation, "incompressible_limit": INCOMPRESSIBLE_LIMIT,
        "velocity_divergence_rms": divergence.rms(velocity),
        "velocity_gradient_rms": divergence.gradient_rms(velocity),
        "inflow_mirror_mismatch": bc_mismatch, "inflow_mirror_floor": bc_floor,
        "mass_residual_rms": mass_floor, "mass_gradient_rms": mass_scale,
        "mass_tolerance": mass_tolerance}

    continuity = cards["cmp-incompressible-continuity"]
    ledger.decide(decide(continuity, GateFindings(
        {continuity["preconditions"][0]: HOLDS}, HOLDS, HOLDS, floor=mass_floor,
        tolerance=MASS_FRACTION * measured["velocity_gradient_rms"],
        basis=HOLDS if variation <= INCOMPRESSIBLE_LIMIT else FAILS,
        basis_why=f"density variation {variation:.3g} vs limit {INCOMPRESSIBLE_LIMIT:g}")))
    mirror = cards["cmp-mirror-y"]
    compatible = HOLDS if bc_mismatch <= 2 * bc_floor else FAILS
    ledger.decide(decide(mirror, GateFindings(
        {mirror["preconditions"][0]: HOLDS}, compatible, HOLDS, floor=bc_floor,
        tolerance=2 * bc_floor, notes={"inflow boundary mismatch under reflection":
                                       f"{bc_mismatch:.3g} vs floor {bc_floor:.3g}"})))
    mass_card = cards["cmp-mass-conservation"]
    ledger.decide(decide(mass_card, GateFindings(
        {mass_card["preconditions"][0]: HOLDS}, HOLDS, HOLDS, floor=mass_floor,
        tolerance=mass_tolerance)))
    perm_card = cards["cmp-node-permutation"]
    tolerance = fixed_tolerance(perm_card["id"])
    ledger.decide(decide(perm_card, GateFindings(
        {perm_card["preconditions"][0]: HOLDS}, HOLDS, HOLDS, floor=0.0, tolerance=tolerance)))
    violations = []
    graph = Graph(mesh.pos, velocity, mesh.node_type.astype(np.int64),
                  directed_edges(mesh.cells))
    for index, net in enumerate(nets):
        base = step(net, graph)
        for seed in range(permutation_seeds):
            v = permutation_violation(net, graph, seed, base)
            violations.append(v)
            ledger.add(judge(perm_card["id"], f"airfoil-subject{index}-p{seed}", v, tolerance))
    return {"case": asdict(case), "measured": measured,
            "permutation_violations": violations}
