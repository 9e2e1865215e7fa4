"""Operator-floor sweep: the numerical floor of the P1 discrete divergence, derived.

The measuring operator is the P1 (vector) divergence tested against piecewise constants,
assembled by scikit-fem: on each triangle K it returns ``div(I_h u)`` for the nodal
interpolant ``I_h u``. It is exact on affine fields, so on a divergence-free field its
output is exactly the geometry-weighted second-order Taylor remainder

    e_K = sum_i R_i(u) d/dx lambda_i + R_i(v) d/dy lambda_i,
    R_i(f) = f(x_i) - f(c) - grad f(c) . (x_i - c)

(c the centroid, lambda_i the barycentric coordinates). Its leading-order predictor uses
``R_i ~ 1/2 d_i^T H(c) d_i`` with the analytic Hessian; an a-priori bound replaces H by
its global spectral norm (``|R_i| <= 1/2 sup||H|| |d_i|^2``), so it dominates at every
resolution. The floor is the discrete L2 norm ``sqrt(sum_K |K| e_K^2)``; its log-log slope
against the largest edge length ``h`` over the sweep says which order it follows.

Subject field: the stream function ``psi = sin(pi x) sin(pi y)`` on the unit square,
``u = d psi/dy``, ``v = -d psi/dx`` (divergence-free; ``||H_u||, ||H_v|| <= pi^3``).

A flux-form finite-volume divergence on a Cartesian grid, with face fluxes taken exactly
from ``psi``, telescopes: the sum of cell divergences equals the boundary flux to
round-off, which gives conservation a machine-precision floor and so an executable verdict.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]
PI = np.pi
HESSIAN_BOUND = PI**3  # sup of the spectral norms of H_u and H_v for this field


def velocity(x: Array, y: Array) -> tuple[Array, Array]:
    """The divergence-free field from psi = sin(pi x) sin(pi y)."""
    return PI * np.sin(PI * x) * np.cos(PI * y), -PI * np.cos(PI * x) * np.sin(PI * y)


def gradients(x: Array, y: Array) -> tuple[Array, Array]:
    """(grad u, grad v) as (..., 2) arrays."""
    u = np.stack([PI**2 * np.cos(PI * x) * np.cos(PI * y),
                  -PI**2 * np.sin(PI * x) * np.sin(PI * y)], axis=-1)
    v = np.stack([PI**2 * np.sin(PI * x) * np.sin(PI * y),
                  -PI**2 * np.cos(PI * x) * np.cos(PI * y)], axis=-1)
    return u, v


def hessians(x: Array, y: Array) -> tuple[Array, Array]:
    """(H_u, H_v) as (..., 2, 2) arrays."""
    sx, cx, sy, cy = np.sin(PI * x), np.cos(PI * x), np.sin(PI * y), np.cos(PI * y)
    hu = -PI**3 * np.stack([np.stack([sx * cy, cx * sy], -1),
                            np.stack([cx * sy, sx * cy], -1)], -2)
    hv = PI**3 * np.stack([np.stack([cx * sy, sx * cy], -1),
                           np.stack([sx * cy, cx * sy], -1)], -2)
    return hu, hv


@dataclass(frozen=True)
class Resolution:
    """One mesh of the sweep."""

    refinements: int
    elements: int
    h: float
    measured: float
    exact_remainder: float
    predicted: float
    bound: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def symmetric_mesh(refinements: int) -> Any:
    """scikit-fem's symmetric unit-square mesh, uniformly refined."""
    from skfem import MeshTri

    return MeshTri.init_sqsymmetric().refined(refinements)


Field = Callable[[Array, Array], tuple[Array, Array]]


def measured_divergence(mesh: Any, field: Field = velocity) -> Array:
    """Per-element P1 divergence of the interpolated field, assembled by scikit-fem."""
    from skfem import Basis, BilinearForm, ElementTriP0, ElementTriP1, ElementVector
    from skfem.helpers import div

    vbasis = Basis(mesh, ElementVector(ElementTriP1()))
    qbasis = Basis(mesh, ElementTriP0())

    @BilinearForm  # type: ignore[untyped-decorator]  # scikit-fem is untyped
    def divergence(u: Any, q: Any, _: Any) -> Any:
        return div(u) * q

    matrix = divergence.assemble(vbasis, qbasis)
    nodal = np.zeros(vbasis.N)
    u, v = field(mesh.p[0], mesh.p[1])
    nodal[vbasis.nodal_dofs[0]], nodal[vbasis.nodal_dofs[1]] = u, v  # nodal interpolant
    return np.asarray(matrix @ nodal) / _areas(mesh)


def _areas(mesh: Any) -> Array:
    p = np.asarray(mesh.p[:, mesh.t], dtype=np.float64)  # (2, 3, K)
    return np.asarray(0.5 * np.abs((p[0, 1] - p[0, 0]) * (p[1, 2] - p[1, 0])
                                   - (p[0, 2] - p[0, 0]) * (p[1, 1] - p[1, 0])))


def barycentric_gradients(p: Array, area: Array) -> Array:
    """(K, 3, 2) gradients of the barycentric coordinates."""
    x, y = p[0], p[1]  # (3, K)
    gx = np.stack([y[1] - y[2], y[2] - y[0], y[0] - y[1]], axis=1) / (2 * area)[:, None]
    gy = np.stack([x[2] - x[1], x[0] - x[2], x[1] - x[0]], axis=1) / (2 * area)[:, None]
    orient = np.sign((x[1] - x[0]) * (y[2] - y[0]) - (x[2] - x[0]) * (y[1] - y[0]))
    return np.asarray(np.stack([gx, gy], axis=-1) * orient[:, None, None])


def closed_form(mesh: Any) -> tuple[Array, Array, Array, Array]:
    """(exact remainder e_K, leading-order predictor, a-priori bound per element, areas)."""
    p = mesh.p[:, mesh.t]                       # (2, 3, K)
    area = _areas(mesh)
    grad = barycentric_gradients(p, area)      # (K, 3, 2)
    c = p.mean(axis=1)                          # (2, K)
    d = np.transpose(p - c[:, None, :], (2, 1, 0))  # (K, 3, 2)
    vx, vy = velocity(p[0].T, p[1].T)           # (K, 3)
    ux_c, uy_c = velocity(c[0], c[1])
    gu, gv = gradients(c[0], c[1])              # (K, 2)
    r_u = vx - ux_c[:, None] - np.einsum("kj,kij->ki", gu, d)
    r_v = vy - uy_c[:, None] - np.einsum("kj,kij->ki", gv, d)
    exact = (r_u * grad[..., 0] + r_v * grad[..., 1]).sum(axis=1)
    hu, hv = hessians(c[0], c[1])               # (K, 2, 2)
    q_u = 0.5 * np.einsum("kia,kab,kib->ki", d, hu, d)
    q_v = 0.5 * np.einsum("kia,kab,kib->ki", d, hv, d)
    predicted = (q_u * grad[..., 0] + q_v * grad[..., 1]).sum(axis=1)
    sq = (d**2).sum(axis=-1)
    bound = 0.5 * HESSIAN_BOUND * (sq * (np.abs(grad[..., 0]) + np.abs(grad[..., 1]))).sum(1)
    return exact, predicted, bound, area


def l2(values: Array, area: Array) -> float:
    return float(np.sqrt((area * values**2).sum()))


def loglog_fit(h: list[float], floor: list[float]) -> dict[str, Any]:
    """Slope of log floor on log h with its 95% t interval and R^2 (scipy linregress)."""
    from scipy import stats  # imported where used: verify loads this module

    fit = stats.linregress(np.log(h), np.log(floor))
    t = stats.t.ppf(1 - 0.05 / 2, len(h) - 2)  # two-sided 95%
    return {"slope": float(fit.slope),
            "slope_ci95": [float(fit.slope - t * fit.stderr), float(fit.slope + t * fit.stderr)],
            "r_squared": float(fit.rvalue**2)}


def sweep(refinements: range = range(1, 10)) -> dict[str, Any]:
    """The floor at every resolution, its log-log fit and the bound check."""
    rows = []
    for k in refinements:
        mesh = symmetric_mesh(k)
        measured = measured_divergence(mesh)
        exact, predicted, bound, area = closed_form(mesh)
        edges = mesh.p[:, mesh.facets]
        h = float(np.sqrt(((edges[:, 0] - edges[:, 1]) ** 2).sum(axis=0)).max())
        rows.append(Resolution(k, int(mesh.t.shape[1]), h, l2(measured, area),
                               l2(exact, area), l2(predicted, area), l2(bound, area)))
    return {
        "field": "psi = sin(pi x) sin(pi y) on the unit square",
        "mesh": "skfem MeshTri.init_sqsymmetric, uniformly refined",
        "norm": "discrete L2 over elements: sqrt(sum_K |K| e_K^2)",
        "resolutions": [r.as_dict() for r in rows],
        **loglog_fit([r.h for r in rows], [r.measured for r in rows]),
        "bound_dominates": all(r.bound >= r.measured for r in rows),
        "finest_predictor_relative_error": abs(rows[-1].predicted - rows[-1].measured)
        / rows[-1].measured,
    }


def finite_volume_balance(cells: int) -> dict[str, float]:
    """Flux-form FV divergence on a cells x cells grid: (sum of cell divergences x volume)
    against the boundary flux, both from exact face fluxes of psi."""
    if cells < 1:
        raise ValueError("a finite-volume grid needs at least one cell")
    edges = np.linspace(0.0, 1.0, cells + 1)
    psi = np.sin(PI * edges)[:, None] * np.sin(PI * edges)[None, :]   # psi at grid nodes
    # Face fluxes: through x-faces (normal +x) the flux is psi(top) - psi(bottom); through
    # y-faces (normal +y) it is -(psi(right) - psi(left)).
    flux_x = psi[:, 1:] - psi[:, :-1]                 # (cells+1, cells): at x = edges[i]
    flux_y = -(psi[1:, :] - psi[:-1, :])              # (cells, cells+1): at y = edges[j]
    net = (flux_x[1:, :] - flux_x[:-1, :]) + (flux_y[:, 1:] - flux_y[:, :-1])
    boundary = (flux_x[-1].sum() - flux_x[0].sum()) + (flux_y[:, -1].sum() - flux_y[:, 0].sum())
    scale = float(np.abs(flux_x).sum() + np.abs(flux_y).sum())
    return {"cells": float(cells), "sum_divergence": float(net.sum()),
            "boundary_flux": float(boundary),
            "imbalance": float(abs(net.sum() - boundary)), "max_cell_divergence":
            float(np.abs(net).max()), "flux_scale": scale,
            "floor": float(np.finfo(np.float64).eps * scale)}
