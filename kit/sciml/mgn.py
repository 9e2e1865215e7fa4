"""The kit's MeshGraphNet (encode-process-decode on mesh edges), in plain torch.

Inputs per node: the velocity (2) and DeepMind's node type one-hot (9); per directed edge:
the relative position (dx, dy) and its length. Each is normalised by running statistics
(``Normaliser``, accumulated over training batches, frozen at evaluation). The encoder
MLPs lift nodes and edges to ``latent`` features; ``steps`` message-passing blocks update
edges from (edge, sender, receiver) and nodes from (node, sum of incoming edges), both
residual and layer-normed; the decoder predicts the normalised velocity update, which
``denormalise`` maps back. Aggregation is a sum with ``index_add_``, so the network is
equivariant under any node permutation that is applied to the edge list as well.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]
NODE_TYPES = 9


def directed_edges(cells: Array) -> Array:
    """(2, E) sender/receiver indices of both directions of every triangle edge."""
    pairs = np.concatenate([cells[:, [0, 1]], cells[:, [1, 2]], cells[:, [2, 0]]])
    unique = np.unique(np.sort(pairs, axis=1), axis=0)
    return np.asarray(np.concatenate([unique, unique[:, ::-1]]).T, np.int64)


def normaliser() -> Any:
    """The running-statistics normaliser class (torch imported inside)."""
    import torch
    from torch import nn

    class Normaliser(nn.Module):
        count: Any
        total: Any
        squares: Any

        def __init__(self, size: int) -> None:
            super().__init__()
            self.register_buffer("count", torch.zeros(()))
            self.register_buffer("total", torch.zeros(size))
            self.register_buffer("squares", torch.zeros(size))

        def forward(self, x: Any, accumulate: bool = False) -> Any:
            if accumulate:
                self.count += x.shape[0]
                self.total += x.detach().sum(0)
                self.squares += (x.detach() ** 2).sum(0)
            mean = self.total / self.count.clamp(min=1)
            std = (self.squares / self.count.clamp(min=1) - mean ** 2).clamp(min=1e-8).sqrt()
            return (x - mean) / std

        def inverse(self, x: Any) -> Any:
            mean = self.total / self.count.clamp(min=1)
            std = (self.squares / self.count.clamp(min=1) - mean ** 2).clamp(min=1e-8).sqrt()
            return x * std + mean

    return Normaliser


def build(latent: int = 64, steps: int = 8, seed: int = 0) -> Any:
    """A MeshGraphNet; the import of torch stays inside the function."""
    import torch
    from torch import nn

    torch.manual_seed(seed)

    def mlp(n_in: int, n_out: int, norm: bool = True) -> nn.Module:
        layers: list[nn.Module] = [nn.Linear(n_in, latent), nn.ReLU(),
                                   nn.Linear(latent, latent), nn.ReLU(),
                                   nn.Linear(latent, n_out)]
        if norm:
            layers.append(nn.LayerNorm(n_out))
        return nn.Sequential(*layers)

    Normaliser = normaliser()

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.edge = mlp(3 * latent, latent)
            self.node = mlp(2 * latent, latent)

        def forward(self, h: Any, e: Any, senders: Any, receivers: Any) -> tuple[Any, Any]:
            e_new = self.edge(torch.cat([e, h[senders], h[receivers]], 1))
            incoming = torch.zeros_like(h).index_add_(0, receivers, e_new)
            h_new = self.node(torch.cat([h, incoming], 1))
            return h + h_new, e + e_new

    class MeshGraphNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.node_norm = Normaliser(2 + NODE_TYPES)
            self.edge_norm = Normaliser(3)
            self.target_norm = Normaliser(2)
            self.encode_node = mlp(2 + NODE_TYPES, latent)
            self.encode_edge = mlp(3, latent)
            self.blocks = nn.ModuleList(Block() for _ in range(steps))
            self.decode = mlp(latent, 2, norm=False)

        def features(self, pos: Any, velocity: Any, node_type: Any, edges: Any,
                     accumulate: bool = False) -> tuple[Any, Any]:
            onehot = torch.nn.functional.one_hot(node_type, NODE_TYPES).to(velocity.dtype)
            nodes = self.node_norm(torch.cat([velocity, onehot], 1), accumulate)
            rel = pos[edges[0]] - pos[edges[1]]
            edge = torch.cat([rel, rel.norm(dim=1, keepdim=True)], 1)
            return nodes, self.edge_norm(edge, accumulate)

        def forward(self, pos: Any, velocity: Any, node_type: Any, edges: Any,
                    accumulate: bool = False) -> Any:
            """The normalised velocity update per node."""
            nodes, edge = self.features(pos, velocity, node_type, edges, accumulate)
            h, e = self.encode_node(nodes), self.encode_edge(edge)
            for block in self.blocks:
                h, e = block(h, e, edges[0], edges[1])
            return self.decode(h)

        def step(self, pos: Any, velocity: Any, node_type: Any, edges: Any) -> Any:
            """The next velocity: current + the denormalised update."""
            return velocity + self.target_norm.inverse(self(pos, velocity, node_type, edges))

    return MeshGraphNet()


def permute_graph(perm: Array, pos: Array, velocity: Array, node_type: Array, edges: Array
                  ) -> tuple[Array, Array, Array, Array]:
    """Relabel nodes so that new node i is old node perm[i]; edges follow."""
    inverse = np.empty_like(perm)
    inverse[perm] = np.arange(len(perm))
    return pos[perm], velocity[perm], node_type[perm], inverse[edges]
