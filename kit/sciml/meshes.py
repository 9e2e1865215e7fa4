"""Meshes of the cylinder-flow case study, with DeepMind's node types.

- ``cylinder_mesh``: the 1.6 x 0.41 channel with a cylinder hole off the centre line,
  triangulated by ``triangle`` (quality switches ``pq30a<area>``), as in DeepMind's
  cylinder_flow set.
- ``symmetric_channel``: a structured channel without an obstacle whose triangles are
  split so that the mesh maps onto itself under y -> H - y; ``mirror_map`` finds the node
  bijection and checks that it preserves node types and cells, so the exact mirror
  relation has a mesh it is defined on.

Node types follow DeepMind's ``NodeType``: NORMAL 0, OBSTACLE 1, INFLOW 4, OUTFLOW 5,
WALL_BOUNDARY 6. Inflow and outflow take precedence over walls at the channel corners.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kit.errors import KitError

Array = np.ndarray[Any, Any]
NORMAL, OBSTACLE, INFLOW, OUTFLOW, WALL = 0, 1, 4, 5, 6
LENGTH, HEIGHT = 1.6, 0.41


@dataclass(frozen=True)
class Mesh:
    """Node positions (N, 2), triangles (T, 3) and node types (N,)."""

    pos: Array
    cells: Array
    node_type: Array

    def edges(self) -> Array:
        """Unique undirected edges (E, 2), sorted, from the triangles."""
        pairs = np.concatenate([self.cells[:, [0, 1]], self.cells[:, [1, 2]],
                                self.cells[:, [2, 0]]])
        return np.asarray(np.unique(np.sort(pairs, axis=1), axis=0))


def _types(pos: Array, centre: tuple[float, float] | None, radius: float, tol: float
           ) -> Array:
    x, y = pos[:, 0], pos[:, 1]
    types = np.full(len(pos), NORMAL, np.int32)
    types[(y < tol) | (y > HEIGHT - tol)] = WALL
    if centre is not None:
        on_body = np.hypot(x - centre[0], y - centre[1]) < radius + tol
        types[on_body] = OBSTACLE
    types[x < tol] = INFLOW
    types[x > LENGTH - tol] = OUTFLOW
    return types


def cylinder_mesh(centre: tuple[float, float] = (0.33, 0.22), radius: float = 0.05,
                  max_area: float = 3e-4, segments: int = 40) -> Mesh:
    """The channel with a cylinder hole, triangulated by ``triangle``."""
    import triangle

    outer = np.array([[0, 0], [LENGTH, 0], [LENGTH, HEIGHT], [0, HEIGHT]], float)
    angles = np.linspace(0, 2 * np.pi, segments, endpoint=False)
    circle = np.c_[centre[0] + radius * np.cos(angles), centre[1] + radius * np.sin(angles)]
    vertices = np.r_[outer, circle]
    ring = np.arange(segments) + 4
    segs = np.r_[np.array([[0, 1], [1, 2], [2, 3], [3, 0]]), np.c_[ring, np.roll(ring, -1)]]
    result = triangle.triangulate({"vertices": vertices, "segments": segs,
                                   "holes": np.array([centre])}, f"pq30a{max_area}")
    pos = np.asarray(result["vertices"], np.float64)
    cells = np.asarray(result["triangles"], np.int64)
    return Mesh(pos, cells, _types(pos, centre, radius, 1e-9 + radius * 1e-6))


def symmetric_channel(nx: int = 64, ny: int = 16) -> Mesh:
    """A structured channel, each rectangle split along the diagonal that points away
    from the centre line, so the triangulation is symmetric under y -> H - y."""
    if ny % 2:
        raise KitError("symmetric_channel needs an even ny (the centre line is a row)")
    xs, ys = np.linspace(0, LENGTH, nx + 1), np.linspace(0, HEIGHT, ny + 1)
    gx, gy = np.meshgrid(xs, ys, indexing="ij")
    pos = np.c_[gx.ravel(), gy.ravel()]
    index = np.arange((nx + 1) * (ny + 1)).reshape(nx + 1, ny + 1)
    cells = []
    for i in range(nx):
        for j in range(ny):
            a, b, c, d = index[i, j], index[i + 1, j], index[i + 1, j + 1], index[i, j + 1]
            if j < ny // 2:
                cells += [[a, b, c], [a, c, d]]
            else:
                cells += [[a, b, d], [b, c, d]]
    return Mesh(pos, np.asarray(cells, np.int64), _types(pos, None, 0.0, 1e-9))


def mirror_map(mesh: Mesh, tol: float = 1e-9) -> Array:
    """The node permutation p with pos[p[i]] = mirror(pos[i]); KitError unless it is a
    bijection that preserves node types and maps every triangle onto a triangle."""
    from scipy.spatial import cKDTree

    mirrored = mesh.pos * np.array([1.0, -1.0]) + np.array([0.0, HEIGHT])
    distance, target = cKDTree(mesh.pos).query(mirrored)
    if distance.max() > tol:
        raise KitError(f"mesh is not mirror-symmetric: a reflected node lies "
                       f"{distance.max():.3g} from the nearest node")
    if len(np.unique(target)) != len(target):
        raise KitError("the reflection is not a bijection of the nodes")
    if not np.array_equal(mesh.node_type[target], mesh.node_type):
        raise KitError("the reflection does not preserve node types")
    cells = {tuple(sorted(c)) for c in mesh.cells.tolist()}
    if {tuple(sorted(c)) for c in target[mesh.cells].tolist()} != cells:
        raise KitError("the reflection does not map triangles onto triangles")
    return np.asarray(target)


def channel_symmetry(channel: Mesh, target: Array) -> dict[str, Any]:
    """What the exact mirror relation's admission rests on, measured on the channel mesh
    and its reflection ``target`` (``mirror_map``); verify measures it again from the mesh
    the code builds (``kit.sciml.recount.mgn``)."""
    mirrored = channel.pos * np.array([1.0, -1.0]) + np.array([0.0, HEIGHT])
    return {"nodes": len(channel.pos),
            "reflection_offset": float(np.abs(channel.pos[target] - mirrored).max()),
            "type_match": float(np.mean(channel.node_type[target] == channel.node_type)),
            "bijection": bool(len(np.unique(target)) == len(target))}


def placement_mismatch(mesh: Mesh) -> float:
    """Worst distance from a reflected node to its nearest node, in median edge lengths
    (the m of the domain score D = m / (m + 1) for the mirror relation)."""
    from scipy.spatial import cKDTree

    mirrored = mesh.pos * np.array([1.0, -1.0]) + np.array([0.0, HEIGHT])
    distance, _ = cKDTree(mesh.pos).query(mirrored)
    edges = mesh.edges()
    lengths = np.linalg.norm(mesh.pos[edges[:, 0]] - mesh.pos[edges[:, 1]], axis=1)
    return float(distance.max() / np.median(lengths))
