"""A non-message-passing baseline for the cylinder flow: a pointwise MLP on each node's
position, velocity and node type (the paper's PointMLP coordinate network).

It has the MeshGraphNet's interface (``forward`` with the same arguments, ``step``,
``target_norm``) so the studies run it unchanged; it ignores the edges, so node
permutation holds by construction, and it reads absolute coordinates, so nothing makes it
mirror-equivariant.
"""

from __future__ import annotations

from typing import Any

from kit.sciml.mgn import NODE_TYPES, normaliser


def build_pointmlp(latent: int = 64, depth: int = 3, seed: int = 0) -> Any:
    import torch
    from torch import nn

    torch.manual_seed(seed)
    Normaliser = normaliser()

    class PointMLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.node_norm = Normaliser(4 + NODE_TYPES)
            self.target_norm = Normaliser(2)
            layers: list[nn.Module] = [nn.Linear(4 + NODE_TYPES, latent), nn.ReLU()]
            for _ in range(depth - 1):
                layers += [nn.Linear(latent, latent), nn.ReLU()]
            self.mlp = nn.Sequential(*layers, nn.Linear(latent, 2))

        def forward(self, pos: Any, velocity: Any, node_type: Any, edges: Any,
                    accumulate: bool = False) -> Any:
            del edges
            onehot = torch.nn.functional.one_hot(node_type, NODE_TYPES).to(velocity.dtype)
            return self.mlp(self.node_norm(torch.cat([pos, velocity, onehot], 1), accumulate))

        def step(self, pos: Any, velocity: Any, node_type: Any, edges: Any) -> Any:
            return velocity + self.target_norm.inverse(self(pos, velocity, node_type, edges))

    return PointMLP()
