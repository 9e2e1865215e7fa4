"""Deterministic, cached training on a small real slice of the digits."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from kit.drift.digits import load_digits_rgb32
from kit.drift.models import load_checkpoint
from kit.drift.train import Recipe, augment, train_cached


def _slice() -> tuple[np.ndarray, np.ndarray]:
    images, labels = load_digits_rgb32()
    return images[:96], labels[:96]


def test_augment_is_seeded_and_keeps_shape() -> None:
    images, _ = _slice()
    recipe = Recipe("resnet20", epochs=1, seed=0)
    a = augment(images[:8], np.random.default_rng(1), recipe)
    b = augment(images[:8], np.random.default_rng(1), recipe)
    c = augment(images[:8], np.random.default_rng(2), recipe)
    assert a.shape == images[:8].shape
    assert a.dtype == np.uint8
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_training_is_deterministic_and_cached(tmp_path: Path) -> None:
    images, labels = _slice()
    recipe = Recipe("resnet20", epochs=1, seed=3, batch_size=32)
    first, record, cached = train_cached(recipe, images, labels, 10, tmp_path / "a")
    assert not cached
    again, _, cached = train_cached(recipe, images, labels, 10, tmp_path / "a")
    assert cached
    assert again == first
    fresh, _, cached = train_cached(recipe, images, labels, 10, tmp_path / "b")
    assert not cached
    assert fresh.read_bytes() == first.read_bytes()
    other, _, _ = train_cached(replace(recipe, seed=4), images, labels, 10, tmp_path / "a")
    assert other != first
    assert other.read_bytes() != first.read_bytes()
    model = load_checkpoint("resnet20", first, num_classes=10)
    assert model(torch.zeros(1, 3, 32, 32)).shape == (1, 10)
    assert len(record["mean"]) == 3


def test_a_tampered_cache_entry_is_retrained(tmp_path: Path) -> None:
    images, labels = _slice()
    recipe = Recipe("resnet20", epochs=1, seed=3, batch_size=32)
    path, _, _ = train_cached(recipe, images, labels, 10, tmp_path)
    good = path.read_bytes()
    path.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    again, _, cached = train_cached(recipe, images, labels, 10, tmp_path)
    assert not cached
    assert again.read_bytes() == good
