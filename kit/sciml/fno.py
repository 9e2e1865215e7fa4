"""FNO subjects (neuraloperator's FNO) trained by the kit on its own periodic solvers.

Each subject maps u0 to u at the PDE's horizon on a 32 x 32 periodic grid. The network has
``positional_embedding=None``: neuraloperator's default grid embedding appends absolute
coordinates, which breaks the circular-shift equivariance the translation card relies on
(measured by ``embedding_effect`` and shown to the gate). Training is deterministic (one
torch thread, seeded) and cached by a hash of the recipe, the data and this source.

Relations measured per (checkpoint, held-out case):
- periodic integer translation: relative L2 of f(roll(u)) rolled back against f(u), the
  largest over the card's shifts; its floor is the float32 sensitivity of the same forward
  pass (the output change when every input element moves by one float32 ulp);
- periodic conservation: |sum f(u) - sum u| / sum |u|, against the reference solver's own
  drift (tolerance) and the float32 rounding of the reference's sum (verdict floor).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kit.sciml import checkpoints
from kit.sciml.solvers import initial_states, relative_drift, simulate

Array = np.ndarray[Any, Any]
GRID = 32


@dataclass(frozen=True)
class Recipe:
    """Everything that decides one FNO checkpoint."""

    pde: str
    seed: int
    modes: int = 8
    hidden: int = 16
    steps: int = 200
    batch: int = 16
    lr: float = 5e-3
    train_cases: int = 256
    data_seed: int = 7001
    embedding: str | None = None


def dataset(pde: str, train_cases: int, data_seed: int) -> tuple[Array, Array]:
    """(inputs, targets) of the training set, float64 (cases, n, n)."""
    u0 = initial_states(train_cases, GRID, data_seed)
    return u0, simulate(u0, pde)


def heldout(pde: str, cases: int = 4, seed: int = 7002) -> tuple[Array, Array]:
    """The held-out cases (never trained on): inputs and reference targets."""
    u0 = initial_states(cases, GRID, seed)
    return u0, simulate(u0, pde)


def build(recipe: Recipe) -> Any:
    import torch
    from neuralop.models import FNO

    torch.manual_seed(recipe.seed)
    return FNO(n_modes=(recipe.modes, recipe.modes), hidden_channels=recipe.hidden,
               in_channels=1, out_channels=1, positional_embedding=recipe.embedding)


SOURCES = (Path(__file__), Path(__file__).with_name("solvers.py"))


def train(recipe: Recipe, cache: Path | None = None) -> tuple[Any, dict[str, Any]]:
    """The trained model (cached by content hash) and its training record."""
    import torch

    torch.set_num_threads(1)
    path = checkpoints.cached_path(
        "fno", f"{recipe.pde}-{recipe.seed}-{checkpoints.content_key(recipe, SOURCES)}", cache)
    model = build(recipe)
    state = checkpoints.load(path)
    if state is not None:
        model.load_state_dict(state["model"])
        return model.eval(), {"cached": True, "final_loss": float(state["final_loss"])}
    u0, target = dataset(recipe.pde, recipe.train_cases, recipe.data_seed)
    x = torch.tensor(u0[:, None], dtype=torch.float32)
    y = torch.tensor(target[:, None], dtype=torch.float32)
    optimiser = torch.optim.Adam(model.parameters(), lr=recipe.lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, recipe.steps)
    generator = torch.Generator().manual_seed(recipe.seed)
    loss = torch.tensor(0.0)
    for _ in range(recipe.steps):
        pick = torch.randint(0, len(x), (recipe.batch,), generator=generator)
        prediction = model(x[pick])
        loss = (torch.linalg.vector_norm(prediction - y[pick], dim=(1, 2, 3))
                / torch.linalg.vector_norm(y[pick], dim=(1, 2, 3))).mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        schedule.step()
    checkpoints.save(path, model, final_loss=float(loss.detach()))
    return model.eval(), {"cached": False, "final_loss": float(loss.detach())}


def predict(model: Any, u0: Array) -> Array:
    """Float32 forward pass on (cases, n, n); the result as float64."""
    import torch

    with torch.no_grad():
        out = model(torch.tensor(u0[:, None], dtype=torch.float32))
    return np.asarray(out[:, 0].numpy(), np.float64)


def ulp_jitter(u0: Array, seed: int = 0) -> Array:
    """The input with every float32 element moved one ulp up or down at random."""
    x = u0.astype(np.float32)
    up = np.random.default_rng(seed).integers(0, 2, size=x.shape) == 1
    return np.where(up, np.nextafter(x, np.float32(np.inf)),
                    np.nextafter(x, np.float32(-np.inf))).astype(np.float64)


def _relative(a: Array, b: Array) -> Array:
    axes = (1, 2)
    return np.asarray(np.linalg.norm(a - b, axis=axes) / np.linalg.norm(b, axis=axes))


def translation(model: Any, u0: Array, shifts: list[list[int]]) -> dict[str, Array]:
    """Per case: the largest relative L2 violation over the shifts, and the precision floor."""
    base = predict(model, u0)
    worst = np.zeros(len(u0))
    for dx, dy in shifts:
        follow = predict(model, np.roll(u0, (dx, dy), axis=(1, 2)))
        back = np.roll(follow, (-dx, -dy), axis=(1, 2))
        worst = np.maximum(worst, _relative(back, base))
    floor = _relative(predict(model, ulp_jitter(u0)), base)
    return {"violation": worst, "floor": floor}


def conservation(model: Any, u0: Array, target: Array) -> dict[str, Array]:
    """Per case: the surrogate's channel-sum drift, the reference's drift, the float32
    rounding floor of the reference's sum, and the subject's own floor (the change of its
    predicted sum when every input element moves by one float32 ulp)."""
    prediction = predict(model, u0)
    rounded = target.astype(np.float32).astype(np.float64)
    jittered = predict(model, ulp_jitter(u0))
    return {"violation": relative_drift(u0, prediction),
            "subject_floor": np.abs(jittered.sum((1, 2)) - prediction.sum((1, 2)))
            / np.abs(u0).sum((1, 2)),
            "reference_drift": relative_drift(u0, target),
            "float32_floor": np.abs(rounded.sum((1, 2)) - target.sum((1, 2)))
            / np.abs(target).sum((1, 2))}


def embedding_effect(shifts: list[list[int]], seed: int = 0) -> dict[str, float]:
    """Translation violation of an untrained FNO with and without the grid embedding."""
    u0 = initial_states(2, GRID, 99)
    found = {}
    for name, embedding in (("grid", "grid"), ("none", None)):
        model = build(Recipe("heat", seed, embedding=embedding)).eval()
        found[name] = float(translation(model, u0, shifts)["violation"].max())
    return found
