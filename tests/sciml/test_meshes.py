"""Cylinder-flow meshes: node types, the symmetric channel's mirror bijection, and the
asymmetric mesh's placement mismatch."""

from __future__ import annotations

import numpy as np
import pytest

from kit.errors import KitError
from kit.sciml.meshes import (
    INFLOW,
    NORMAL,
    OBSTACLE,
    OUTFLOW,
    WALL,
    cylinder_mesh,
    mirror_map,
    placement_mismatch,
    symmetric_channel,
)


def test_cylinder_mesh_has_every_node_type_where_it_belongs() -> None:
    mesh = cylinder_mesh()
    assert 1500 < len(mesh.pos) < 2500
    types = set(mesh.node_type.tolist())
    assert types == {NORMAL, OBSTACLE, INFLOW, OUTFLOW, WALL}
    body = mesh.pos[mesh.node_type == OBSTACLE]
    np.testing.assert_allclose(np.hypot(body[:, 0] - 0.33, body[:, 1] - 0.22), 0.05,
                               rtol=1e-6)
    assert (mesh.pos[mesh.node_type == INFLOW][:, 0] == 0).all()
    edges = mesh.edges()
    assert len(edges) == len(np.unique(edges, axis=0))


def test_the_symmetric_channel_mirrors_onto_itself() -> None:
    mesh = symmetric_channel(8, 4)
    mapping = mirror_map(mesh)
    assert sorted(mapping.tolist()) == list(range(len(mesh.pos)))
    assert (mapping != np.arange(len(mapping))).sum() > 0
    assert placement_mismatch(mesh) < 1e-9


def test_the_asymmetric_mesh_is_refused_and_scored() -> None:
    mesh = cylinder_mesh()
    with pytest.raises(KitError, match="not mirror-symmetric"):
        mirror_map(mesh)
    assert placement_mismatch(mesh) > 0.5  # reflected nodes land far from any node


def test_a_broken_symmetric_mesh_is_refused() -> None:
    mesh = symmetric_channel(8, 4)
    flipped = mesh.cells.copy()
    a, b, c, d = flipped[0][0], flipped[0][1], flipped[0][2], flipped[1][2]
    flipped[0], flipped[1] = [a, b, d], [b, c, d]  # the other diagonal in one rectangle
    broken = type(mesh)(mesh.pos, flipped, mesh.node_type)
    with pytest.raises(KitError, match="triangles"):
        mirror_map(broken)
