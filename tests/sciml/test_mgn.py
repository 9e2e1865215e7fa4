"""The kit's MeshGraphNet: shapes, and node-permutation equivariance on an untrained
model (the exact relation the permutation card relies on).

Also covers ``kit.sciml.mgn_exact``, ``kit.sciml.pointmlp`` (no test file of their own)."""

from __future__ import annotations

import numpy as np
import pytest

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


class _Linear:
    """A mirror-equivariant stand-in: the next state is 1.1 x the current one."""

    def step(self, pos: object, velocity: object, node_type: object, edges: object) -> object:
        return velocity * 1.1


def test_exact_mirror_passes_an_equivariant_map_and_fails_an_untrained_pointmlp() -> None:
    import torch

    from kit.sciml.ledger import Ledger
    from kit.sciml.meshes import mirror_map, symmetric_channel
    from kit.sciml.mgn_exact import EXACT_MIRROR_INPUTS, exact_mirror, exact_mirror_inputs
    from kit.sciml.pointmlp import build_pointmlp

    torch.set_num_threads(1)
    channel = symmetric_channel(16, 4)
    target = mirror_map(channel)
    ledger = Ledger("test")
    from kit.sciml.cards import load_cards
    from kit.sciml.gate import GateFindings, decide

    card = load_cards()["mgn-mirror-y-exact"]
    ledger.decide(decide(card, GateFindings({card["preconditions"][0]: "holds"}, "holds", "holds",
                                        floor=0.0, tolerance=1e-5)))
    assert max(exact_mirror(ledger, _Linear(), "linear", channel, target)["violations"]) < 1e-12
    net = build_pointmlp(16, 2, 0).double().eval()
    inputs = exact_mirror_inputs(channel, EXACT_MIRROR_INPUTS)
    with torch.no_grad():
        net(torch.tensor(channel.pos), torch.tensor(inputs[0]),
            torch.tensor(channel.node_type.astype(np.int64)), None, accumulate=True)
    assert min(exact_mirror(ledger, net, "pointmlp", channel, target)["violations"]) > 1e-3
    assert [v.verdict for v in ledger.verdicts] == ["pass"] * 3 + ["fail"] * 3
    # the inputs respect the channel: zero on the walls, the parabolic profile at the inflow
    walls = channel.node_type == 6
    assert np.abs(inputs[1][walls]).max() < 1e-12


def test_pointmlp_is_permutation_equivariant() -> None:
    import torch

    from kit.sciml.pointmlp import build_pointmlp

    mesh = cylinder_mesh(max_area=2e-3)
    rng = np.random.default_rng(1)
    velocity = rng.normal(size=(len(mesh.pos), 2))
    types = mesh.node_type.astype(np.int64)
    net = build_pointmlp(16, 2, 0).double().eval()
    edges = directed_edges(mesh.cells)
    with torch.no_grad():
        tensors = [torch.tensor(a) for a in (mesh.pos, velocity, types, edges)]
        net(*tensors, accumulate=True)
        base = net.step(*tensors).numpy()
        perm = rng.permutation(len(mesh.pos))
        moved = net.step(*[torch.tensor(a) for a in permute_graph(
            perm, mesh.pos, velocity, types, edges)]).numpy()
    np.testing.assert_allclose(moved, base[perm], rtol=0, atol=1e-12)


def test_the_normaliser_control_zeroes_the_y_odd_means_and_keeps_the_spread() -> None:
    import torch

    from kit.sciml.mgn_exact import symmetrised

    mesh = cylinder_mesh(max_area=2e-3)
    velocity = np.random.default_rng(2).normal(loc=(1.0, 0.3), size=(len(mesh.pos), 2))
    net = build(latent=8, steps=1, seed=0).double().eval()
    edges = directed_edges(mesh.cells)
    with torch.no_grad():
        tensors = [torch.tensor(a) for a in (mesh.pos, velocity,
                                             mesh.node_type.astype(np.int64), edges)]
        net(*tensors, accumulate=True)
        net.target_norm(torch.tensor(velocity), accumulate=True)
    twin = symmetrised(net)

    def moments(norm: object, channel: int) -> tuple[float, float]:
        count = float(norm.count)  # type: ignore[attr-defined]
        mean = float(norm.total[channel]) / count  # type: ignore[attr-defined]
        return mean, float(norm.squares[channel]) / count - mean ** 2  # type: ignore[attr-defined]

    assert moments(net.node_norm, 1)[0] > 0.2
    mean, var = moments(twin.node_norm, 1)
    assert mean == 0.0
    assert var == pytest.approx(moments(net.node_norm, 1)[1])
    assert moments(twin.node_norm, 0) == moments(net.node_norm, 0)  # v_x untouched
