"""The kit's MeshGraphNet: shapes, and node-permutation equivariance on an untrained
model (the exact relation the permutation card relies on)."""

from __future__ import annotations

import numpy as np

from kit.sciml.meshes import cylinder_mesh
from kit.sciml.mgn import build, directed_edges, permute_graph


def test_permutation_equivariance_of_an_untrained_network() -> None:
    import torch

    torch.set_num_threads(1)
    mesh = cylinder_mesh(max_area=2e-3)
    edges = directed_edges(mesh.cells)
    assert edges.shape[0] == 2
    assert edges.shape[1] == 2 * len(mesh.edges())
    rng = np.random.default_rng(0)
    velocity = rng.normal(size=(len(mesh.pos), 2))
    net = build(latent=16, steps=2, seed=0).double().eval()
    tensors = [torch.tensor(mesh.pos), torch.tensor(velocity),
               torch.tensor(mesh.node_type.astype(np.int64)), torch.tensor(edges)]
    with torch.no_grad():
        net(*tensors, accumulate=True)  # give the normalisers statistics
        base = net.step(*tensors).numpy()
        perm = rng.permutation(len(mesh.pos))
        moved = permute_graph(perm, mesh.pos, velocity, mesh.node_type.astype(np.int64), edges)
        follow = net.step(*[torch.tensor(a) for a in moved]).numpy()
    assert base.shape == (len(mesh.pos), 2)
    np.testing.assert_allclose(follow, base[perm], rtol=0, atol=1e-12)
    # and it is a real function of the input: a changed velocity changes the output
    with torch.no_grad():
        other = net.step(tensors[0], tensors[1] * 2, tensors[2], tensors[3]).numpy()
    assert np.abs(other - base).max() > 1e-3
