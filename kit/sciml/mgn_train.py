"""Training of the kit's MeshGraphNet roster on the simulated cylinder flow.

- Roster: ``roster`` networks (4 seeds at the base size, one wider, one deeper when
  ``roster`` is 6), and the PointMLP baseline's seeds, trained on the one-step velocity
  update with Adam (float64, one torch thread), the normalisers accumulated over the
  training frames first.
- Cached by content hash of the subject, the data key and this module with
  ``kit/sciml/mgn.py`` and ``kit/sciml/pointmlp.py``, so the relation and fault studies can
  change without retraining.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from kit.errors import KitError
from kit.sciml import checkpoints
from kit.sciml.mgn import build, directed_edges
from kit.sciml.pointmlp import build_pointmlp

Array = np.ndarray[Any, Any]


@dataclass(frozen=True)
class Subject:
    """One trained network: ``arch`` "mgn" (``steps`` message-passing blocks) or
    "pointmlp" (``steps`` hidden layers, no message passing)."""

    seed: int
    latent: int = 32
    steps: int = 6
    train_steps: int = 200
    lr: float = 1e-3
    arch: str = "mgn"

    @property
    def name(self) -> str:
        return f"{self.arch}-seed{self.seed}"

    def build(self) -> Any:
        if self.arch == "mgn":
            return build(self.latent, self.steps, self.seed)
        if self.arch == "pointmlp":
            return build_pointmlp(self.latent, self.steps, self.seed)
        raise KitError(f"unknown architecture {self.arch!r} (mgn, pointmlp)")


def roster_subjects(roster: int, base: Subject) -> list[Subject]:
    """4 seeds at the base size, then one wider and one deeper (for roster 6)."""
    subjects = [replace(base, seed=s) for s in range(min(roster, 4))]
    if roster > 4:
        subjects.append(replace(base, seed=4, latent=base.latent * 3 // 2))
    if roster > 5:
        subjects.append(replace(base, seed=5, steps=base.steps + 4))
    return subjects


def pointmlp_subjects(count: int, base: Subject) -> list[Subject]:
    """``count`` PointMLP seeds (64 wide, 3 hidden layers) with the roster's training."""
    return [replace(base, seed=s, latent=64, steps=3, arch="pointmlp") for s in range(count)]


def tensors(data: dict[str, Array], frame: int) -> list[Any]:
    import torch

    edges = directed_edges(data["cells"])
    return [torch.tensor(data["mesh_pos"]), torch.tensor(data["velocity"][frame]),
            torch.tensor(data["node_type"][:, 0].astype(np.int64)), torch.tensor(edges)]


def train(subject: Subject, data: dict[str, Array], train_frames: int, key: str,
          cache: Path | None = None) -> Any:
    """One trained network (float64), cached by subject, data key and source."""
    import torch

    torch.set_num_threads(1)
    here = Path(__file__)
    digest = checkpoints.content_key(subject, (here.with_name("mgn.py"),
                                               here.with_name("pointmlp.py"), here), key.encode())
    path = checkpoints.cached_path("mgn", f"{subject.name}-{digest}", cache)
    net = subject.build().double()
    state = checkpoints.load(path)
    if state is not None:
        net.load_state_dict(state["model"])
        return net.eval()
    for frame in range(train_frames):  # normaliser statistics from the training frames
        pos, vel, types, edges = tensors(data, frame)
        with torch.no_grad():
            net(pos, vel, types, edges, accumulate=True)
            target = torch.tensor(data["velocity"][frame + 1]) - vel
            net.target_norm(target, accumulate=True)
    optimiser = torch.optim.Adam(net.parameters(), lr=subject.lr)
    generator = np.random.default_rng(subject.seed)
    for _ in range(subject.train_steps):
        frame = int(generator.integers(0, train_frames))
        pos, vel, types, edges = tensors(data, frame)
        target = net.target_norm(torch.tensor(data["velocity"][frame + 1]) - vel)
        loss = ((net(pos, vel, types, edges) - target) ** 2).mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    checkpoints.save(path, net)
    return net.eval()
