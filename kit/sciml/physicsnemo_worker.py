"""A MeshGraphNet served over a pipe: NVIDIA PhysicsNeMo's (``--backend physicsnemo``, in
the environment of ``locks/physicsnemo.lock``) or the kit's own (``--backend kit``, the
same protocol in the tools environment, which the tests use).

Run as a script (``python physicsnemo_worker.py --backend physicsnemo``); it imports only
numpy, torch and the backend's packages. Messages both ways are an 8-byte little-endian
length followed by an ``.npz`` payload; the request's ``op`` array names the operation:

    train  pos (N, 2), edges (2, E), node_type (N,), velocity (F, N, 2), config (JSON:
           seed, latent, steps, train_steps, lr, train_frames), checkpoint (path): load the
           checkpoint if it exists, else train and write it (atomically); answers
           final_loss and parameters
    step   pos, velocity (N, 2), node_type, edges: answers velocity, the next state
    quit   ends the worker

The model predicts the normalised velocity update from node features (velocity and the
node-type one-hot) and edge features (dx, dy, |d|), all normalised by statistics of the
training frames, exactly as the kit's MeshGraphNet does, so the two implementations see
the same inputs and targets.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import struct
import sys
from pathlib import Path
from typing import Any

import numpy as np

NODE_TYPES = 9


def _read(stream: Any) -> dict[str, np.ndarray[Any, Any]] | None:
    head = stream.read(8)
    if len(head) < 8:
        return None
    (size,) = struct.unpack("<Q", head)
    with np.load(io.BytesIO(stream.read(size)), allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def _write(stream: Any, **arrays: Any) -> None:
    buffer = io.BytesIO()
    np.savez(buffer, **{k: np.asarray(v) for k, v in arrays.items()})
    payload = buffer.getvalue()
    stream.write(struct.pack("<Q", len(payload)) + payload)
    stream.flush()


def _features(pos: Any, velocity: Any, node_type: Any, edges: Any) -> tuple[Any, Any]:
    import torch

    onehot = torch.nn.functional.one_hot(node_type.long(), NODE_TYPES).to(velocity.dtype)
    rel = pos[edges[0]] - pos[edges[1]]
    return torch.cat([velocity, onehot], 1), torch.cat([rel, rel.norm(dim=1, keepdim=True)], 1)


class Served:
    """One model with its normalisers (mean, std of nodes, edges and targets)."""

    def __init__(self, backend: str, config: dict[str, Any]) -> None:
        import torch

        torch.manual_seed(int(config["seed"]))
        latent, steps = int(config["latent"]), int(config["steps"])
        if backend == "physicsnemo":
            from physicsnemo.models.meshgraphnet import MeshGraphNet  # type: ignore[import-not-found]

            self.model = MeshGraphNet(
                input_dim_nodes=2 + NODE_TYPES, input_dim_edges=3, output_dim=2,
                processor_size=steps, mlp_activation_fn="relu", num_layers_node_processor=2,
                num_layers_edge_processor=2, hidden_dim_processor=latent,
                hidden_dim_node_encoder=latent, num_layers_node_encoder=2,
                hidden_dim_edge_encoder=latent, num_layers_edge_encoder=2,
                hidden_dim_node_decoder=latent, num_layers_node_decoder=2, aggregation="sum",
                do_concat_trick=False).double()
        else:
            self.model = _kit_core()(latent, steps).double()
        self.backend = backend
        self.stats: dict[str, Any] = {}

    def _core(self, nodes: Any, edge: Any, edges: Any) -> Any:
        if self.backend == "physicsnemo":
            from torch_geometric.data import Data  # type: ignore[import-not-found]

            return self.model(nodes, edge, Data(edge_index=edges, num_nodes=nodes.shape[0]))
        return self.model(nodes, edge, edges)

    def _norm(self, name: str, x: Any) -> Any:
        mean, std = self.stats[name]
        return (x - mean) / std

    def forward(self, pos: Any, velocity: Any, node_type: Any, edges: Any) -> Any:
        nodes, edge = _features(pos, velocity, node_type, edges)
        return self._core(self._norm("nodes", nodes), self._norm("edges", edge), edges)

    def step(self, pos: Any, velocity: Any, node_type: Any, edges: Any) -> Any:
        mean, std = self.stats["target"]
        return velocity + self.forward(pos, velocity, node_type, edges) * std + mean

    def fit(self, arrays: dict[str, Any], config: dict[str, Any]) -> float:
        import torch

        t = {k: torch.tensor(arrays[k]) for k in ("pos", "edges", "node_type", "velocity")}
        frames = int(config["train_frames"])
        nodes = torch.cat([_features(t["pos"], t["velocity"][f], t["node_type"], t["edges"])[0]
                           for f in range(frames)])
        _, edge = _features(t["pos"], t["velocity"][0], t["node_type"], t["edges"])
        target = torch.cat([t["velocity"][f + 1] - t["velocity"][f] for f in range(frames)])
        for name, x in (("nodes", nodes), ("edges", edge), ("target", target)):
            self.stats[name] = (x.mean(0), x.std(0, unbiased=False).clamp(min=1e-4))
        optimiser = torch.optim.Adam(self.model.parameters(), lr=float(config["lr"]))
        rng = np.random.default_rng(int(config["seed"]))
        loss = torch.zeros(())
        for _ in range(int(config["train_steps"])):
            f = int(rng.integers(0, frames))
            goal = self._norm("target", t["velocity"][f + 1] - t["velocity"][f])
            loss = ((self.forward(t["pos"], t["velocity"][f], t["node_type"], t["edges"])
                     - goal) ** 2).mean()
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
        return float(loss.detach())

    def save(self, path: Path, final_loss: float) -> None:
        import torch

        buffer = io.BytesIO()
        torch.save({"model": self.model.state_dict(), "final_loss": final_loss,
                    "stats": {k: list(v) for k, v in self.stats.items()}}, buffer)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(buffer.getvalue())
        os.replace(tmp, path)

    def load(self, path: Path) -> float:
        import torch

        state = torch.load(path, weights_only=True)
        self.model.load_state_dict(state["model"])
        self.stats = {k: tuple(v) for k, v in state["stats"].items()}
        return float(state["final_loss"])


def _kit_core() -> Any:
    import torch
    from torch import nn

    class Core(nn.Module):
        """The kit's encode-process-decode core on already normalised features."""

        def __init__(self, latent: int, steps: int) -> None:
            super().__init__()

            def mlp(n_in: int, n_out: int, norm: bool = True) -> nn.Module:
                layers: list[nn.Module] = [nn.Linear(n_in, latent), nn.ReLU(),
                                           nn.Linear(latent, latent), nn.ReLU(),
                                           nn.Linear(latent, n_out)]
                return nn.Sequential(*layers, *([nn.LayerNorm(n_out)] if norm else []))

            self.encode_node, self.encode_edge = mlp(2 + NODE_TYPES, latent), mlp(3, latent)
            self.edge_mlps = nn.ModuleList(mlp(3 * latent, latent) for _ in range(steps))
            self.node_mlps = nn.ModuleList(mlp(2 * latent, latent) for _ in range(steps))
            self.decode = mlp(latent, 2, norm=False)

        def forward(self, nodes: Any, edge: Any, edges: Any) -> Any:
            h, e = self.encode_node(nodes), self.encode_edge(edge)
            for edge_mlp, node_mlp in zip(self.edge_mlps, self.node_mlps, strict=True):
                e_new = edge_mlp(torch.cat([e, h[edges[0]], h[edges[1]]], 1))
                incoming = torch.zeros_like(h).index_add_(0, edges[1], e_new)
                h, e = h + node_mlp(torch.cat([h, incoming], 1)), e + e_new
            return self.decode(h)

    return Core


def serve(backend: str, inbound: Any, outbound: Any) -> None:
    import torch

    torch.set_num_threads(1)
    served: Served | None = None
    while (request := _read(inbound)) is not None:
        op = str(request["op"])
        if op == "quit":
            break
        try:
            if op == "train":
                config = json.loads(str(request["config"]))
                served = Served(backend, config)
                path = Path(str(request["checkpoint"]))
                if path.is_file():
                    final = served.load(path)
                else:
                    final = served.fit(request, config)
                    served.save(path, final)
                served.model.eval()
                _write(outbound, final_loss=final,
                       parameters=sum(p.numel() for p in served.model.parameters()))
            elif op == "step":
                if served is None:
                    raise RuntimeError("step before train")
                t = [torch.tensor(request[k]) for k in ("pos", "velocity", "node_type", "edges")]
                with torch.no_grad():
                    _write(outbound, velocity=served.step(*t).numpy())
            else:
                raise RuntimeError(f"unknown op {op!r}")
        except Exception as exc:  # reported to the caller, which raises it
            _write(outbound, error=f"{type(exc).__name__}: {exc}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["physicsnemo", "kit"], required=True)
    args = parser.parse_args()
    # this script's folder is no package path: kit modules there must not shadow libraries
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    outbound = sys.stdout.buffer
    sys.stdout = sys.stderr  # library chatter must never reach the protocol stream
    serve(args.backend, sys.stdin.buffer, outbound)
    return 0


if __name__ == "__main__":
    sys.exit(main())
