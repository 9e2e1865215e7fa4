"""The exact mirror-y relation of the MeshGraphNet study, on the symmetric channel
(``meshes.symmetric_channel``, whose reflection is a verified bijection): V = ||f(M x) -
M f(x)|| / ||f(x) - x|| (relative to the predicted update) on ``EXACT_MIRROR_INPUTS``
constructed inputs (a parabolic channel profile plus a seeded smooth perturbation),
against the card's tolerance (``EXACT_MIRROR_TOLERANCE``); and its normaliser control, a
copy whose normalisers treat y and -y alike."""

from __future__ import annotations

from typing import Any

import numpy as np

from kit.sciml import mgn_faults
from kit.sciml.cards import fixed_tolerance
from kit.sciml.ledger import Ledger
from kit.sciml.meshes import HEIGHT, LENGTH, Mesh
from kit.sciml.mgn import directed_edges
from kit.sciml.verdicts import judge

Array = np.ndarray[Any, Any]
EXACT_MIRROR_TOLERANCE = fixed_tolerance("mgn-mirror-y-exact")
EXACT_MIRROR_INPUTS = 3


def exact_mirror_inputs(mesh: Mesh, count: int) -> list[Array]:
    """A parabolic channel profile plus a seeded smooth perturbation that vanishes on the
    walls and the inflow (so the inputs respect the channel's boundary values)."""
    x, y = mesh.pos[:, 0], mesh.pos[:, 1]
    profile = 4.0 * y * (HEIGHT - y) / HEIGHT ** 2
    inputs = []
    modes = [(i, j) for i in range(1, 4) for j in range(1, 4)]
    bumps = np.stack([np.sin(i * np.pi * x / LENGTH) * np.sin(j * np.pi * y / HEIGHT)
                      for i, j in modes], 1)  # (N, 9), zero on every boundary
    for seed in range(count):
        amplitude = np.random.default_rng(seed).normal(scale=0.05, size=(len(modes), 2))
        inputs.append(np.stack([profile, np.zeros_like(profile)], 1) + bumps @ amplitude)
    return inputs


def exact_violation(net: Any, graph: mgn_faults.Graph, target: Array) -> float:
    """||f(M x) - M f(x)|| / ||f(x) - x|| through the mesh's exact bijection."""
    base = mgn_faults.step(net, graph)
    follow = mgn_faults.step(net, graph.with_velocity(mgn_faults.reflect(graph.velocity, target)))
    expected = mgn_faults.reflect(base, target)
    return float(np.linalg.norm(follow - expected) / np.linalg.norm(base - graph.velocity))


def symmetrised(net: Any) -> Any:
    """A copy whose normalisers treat y and -y alike (zero mean in every y-odd channel:
    v_y of the nodes, dy of the edges, the update's v_y), each channel's spread kept: the
    normaliser control of the exact relation."""
    import copy

    import torch

    twin = copy.deepcopy(net)
    with torch.no_grad():
        for norm, channel in ((twin.node_norm, 1), (twin.edge_norm, 1), (twin.target_norm, 1)):
            count = norm.count.clamp(min=1)
            mean = norm.total[channel] / count
            norm.squares[channel] -= count * mean ** 2
            norm.total[channel] = 0.0
    return twin


def exact_mirror(ledger: Ledger, net: Any, name: str, channel: Mesh, target: Array,
                 control: bool = False) -> dict[str, Any]:
    """The exact relation on every constructed input; with ``control``, also the
    violation of the normaliser-symmetrised copy on the first input."""
    graph = mgn_faults.Graph(channel.pos, np.zeros((len(channel.pos), 2)),
                             channel.node_type.astype(np.int64),
                             directed_edges(channel.cells))
    inputs = exact_mirror_inputs(channel, EXACT_MIRROR_INPUTS)
    violations = []
    for seed, velocity in enumerate(inputs):
        v = exact_violation(net, graph.with_velocity(velocity), target)
        violations.append(v)
        ledger.add(judge("mgn-mirror-y-exact", f"{name}-channel-input{seed}", v,
                         EXACT_MIRROR_TOLERANCE))
    out: dict[str, Any] = {"violations": violations}
    if control:
        out["normaliser_control"] = exact_violation(symmetrised(net),
                                                    graph.with_velocity(inputs[0]), target)
    return out
