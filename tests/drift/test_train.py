"""Deterministic, cached training on a small real slice of the digits."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
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


@pytest.mark.parametrize(("content", "what"), [
    (b"\xff\xfe not utf-8", "not UTF-8"),
    (b"{not json", "not valid JSON"),
    (b"[]", "not a JSON object"),
    (b'{"cache_key": "k", "weights_sha256": "w", "std": [1, 1, 1], "train_images": 3, '
     b'"recipe": {}}', "mean missing or not a list"),
    (b'{"cache_key": "k", "weights_sha256": "w", "mean": [0], "std": [1, 1, 1], '
     b'"train_images": 3, "recipe": {}}', "three channels"),
])
def test_a_broken_training_cache_record_is_an_error_naming_it(tmp_path: Path, content: bytes,
                                                              what: str) -> None:
    from kit.drift.train import read_cache_record
    from kit.errors import KitError

    path = tmp_path / "cache" / "record.json"
    path.parent.mkdir()
    path.write_bytes(content)
    with pytest.raises(KitError, match=what) as caught:
        read_cache_record(path)
    assert str(path) in str(caught.value)
    assert f"delete the cache folder {path.parent} to train again" in str(caught.value)
