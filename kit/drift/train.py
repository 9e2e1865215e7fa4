"""Deterministic training of the ``digits`` substrate's three classifiers.

The recipe (SGD with Nesterov momentum, one-cycle learning rate, +-15 degree rotation and
+-2 px shift augmentation drawn from a seeded numpy generator) runs on one torch thread
with deterministic algorithms, so the same recipe, data and code give the same weights.
Trained weights are cached under a key that hashes the recipe, the training images and
labels, and the source of this module and ``kit/drift/models.py``: a rerun does not retrain,
and any change to one of them does.
"""

from __future__ import annotations

import hashlib
import io
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from kit.drift import models
from kit.drift.rotate import to_input
from kit.errors import FileFormatError
from kit.files import canonical_json, read_json, write_atomic

Array = np.ndarray[Any, Any]


@dataclass(frozen=True)
class Recipe:
    """Everything that decides the trained weights besides data and code."""

    architecture: str
    epochs: int
    seed: int
    batch_size: int = 64
    max_lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 5e-4
    rotate_degrees: float = 15.0
    shift_pixels: int = 2
    threads: int = 1


def augment(images: Array, rng: np.random.Generator, recipe: Recipe) -> Array:
    """Random rotation (bilinear, black fill) and integer shift (zero fill) per image."""
    out = np.empty_like(images)
    angles = rng.uniform(-recipe.rotate_degrees, recipe.rotate_degrees, len(images))
    shifts = rng.integers(-recipe.shift_pixels, recipe.shift_pixels + 1, (len(images), 2))
    for i, img in enumerate(images):
        turned = np.asarray(Image.fromarray(img, mode="RGB").rotate(
            float(angles[i]), resample=Image.Resampling.BILINEAR, fillcolor=(0, 0, 0)))
        dy, dx = shifts[i]
        moved = np.zeros_like(turned)
        h, w = turned.shape[:2]
        moved[max(dy, 0):h + min(dy, 0), max(dx, 0):w + min(dx, 0)] = \
            turned[max(-dy, 0):h + min(-dy, 0), max(-dx, 0):w + min(-dx, 0)]
        out[i] = moved
    return out


def channel_stats(images: Array) -> tuple[list[float], list[float]]:
    """Per-channel mean and std of uint8 images scaled to 0..1 (float64, then rounded)."""
    x = images.astype(np.float64) / 255.0
    return ([round(float(v), 6) for v in x.mean(axis=(0, 1, 2))],
            [round(float(v), 6) for v in x.std(axis=(0, 1, 2))])


def cache_key(recipe: Recipe, images: Array, labels: Array) -> str:
    """sha256 over the recipe, the training data and the training code."""
    digest = hashlib.sha256(canonical_json(asdict(recipe)))
    digest.update(hashlib.sha256(np.ascontiguousarray(images).tobytes()).digest())
    digest.update(hashlib.sha256(np.ascontiguousarray(labels).tobytes()).digest())
    for source in (Path(__file__), Path(models.__file__)):
        digest.update(hashlib.sha256(source.read_bytes()).digest())
    return digest.hexdigest()


def _fit(recipe: Recipe, images: Array, labels: Array, num_classes: int,
         mean: list[float], std: list[float]) -> torch.nn.Module:
    torch.set_num_threads(recipe.threads)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(recipe.seed)
    rng = np.random.default_rng(recipe.seed)
    model = models.build_model(recipe.architecture, num_classes)
    steps = recipe.epochs * -(-len(images) // recipe.batch_size)
    optimiser = torch.optim.SGD(model.parameters(), lr=recipe.max_lr, momentum=recipe.momentum,
                                nesterov=True, weight_decay=recipe.weight_decay)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, max_lr=recipe.max_lr,
                                                   total_steps=steps)
    target = torch.from_numpy(labels.astype(np.int64))
    model.train()
    started = time.monotonic()
    for epoch in range(1, recipe.epochs + 1):
        order = rng.permutation(len(images))
        batch_images = augment(images[order], rng, recipe)
        x_all = torch.from_numpy(to_input(batch_images, mean, std))
        for start in range(0, len(order), recipe.batch_size):
            rows = slice(start, start + recipe.batch_size)
            optimiser.zero_grad()
            loss = torch.nn.functional.cross_entropy(
                model(x_all[rows]), target[torch.from_numpy(order[rows])])
            loss.backward()  # type: ignore[no-untyped-call]
            optimiser.step()
            schedule.step()
        elapsed = time.monotonic() - started
        print(f"train: {recipe.architecture} epoch {epoch}/{recipe.epochs} "
              f"({elapsed / epoch:.1f} s/epoch, eta {(recipe.epochs - epoch) * elapsed / epoch:.0f}"
              f" s) loss {loss.item():.4f}", file=sys.stderr, flush=True)
    return model.eval()


# What a training-cache record must hold for the stages that read it.
CACHE_FIELDS = {"cache_key": str, "weights_sha256": str, "mean": list, "std": list,
                "train_images": int, "recipe": dict}


def read_cache_record(path: Path) -> dict[str, Any]:
    """A training-cache record (``record.json`` beside the cached weights): JSON, UTF-8, an
    object with every field the stages read; else a KitError naming it and the fix."""
    fix = f"delete the cache folder {path.parent} to train again"
    record = read_json(path, fix)
    if not isinstance(record, dict):
        raise FileFormatError(f"{path}: not a JSON object; {fix}")
    for name, kind in CACHE_FIELDS.items():
        if not isinstance(record.get(name), kind) or isinstance(record.get(name), bool):
            raise FileFormatError(f"{path}: {name} missing or not a {kind.__name__}; {fix}")
    if len(record["mean"]) != 3 or len(record["std"]) != 3:
        raise FileFormatError(f"{path}: mean and std must hold three channels; {fix}")
    return record


def train_cached(recipe: Recipe, images: Array, labels: Array, num_classes: int,
                 cache: Path) -> tuple[Path, dict[str, Any], bool]:
    """(state_dict path, its record, whether it came from the cache)."""
    key = cache_key(recipe, images, labels)
    folder = cache / key[:16]
    weights, record_path = folder / f"{recipe.architecture}.pt", folder / "record.json"
    if weights.is_file() and record_path.is_file():
        record = read_cache_record(record_path)
        if record.get("cache_key") == key and record.get("weights_sha256") == \
                hashlib.sha256(weights.read_bytes()).hexdigest():
            return weights, record, True
    mean, std = channel_stats(images)
    model = _fit(recipe, images, labels, num_classes, mean, std)
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    data = buffer.getvalue()
    write_atomic(weights, data)
    record = {"cache_key": key, "recipe": asdict(recipe), "mean": mean, "std": std,
              "train_images": len(images), "weights_sha256": hashlib.sha256(data).hexdigest()}
    write_atomic(record_path, canonical_json(record))
    return weights, record, False


def accuracy(model: torch.nn.Module, images: Array, labels: Array, mean: list[float],
             std: list[float]) -> float:
    """Top-1 accuracy of ``model`` (eval mode) on uint8 images."""
    with torch.no_grad():
        logits = model.eval()(torch.from_numpy(to_input(images, mean, std)))
    return float((logits.argmax(dim=1).numpy() == labels).mean())
