"""Synthetic stand-ins for the pinned CIFAR-100 assets, in the real formats.

``cifar-100-python.tar.gz`` holds ``cifar-100-python/{train,test,meta}``, each a protocol-2
pickle of the real dict layout (``data`` uint8 N x 3072 channel-major, ``fine_labels``,
``coarse_labels``, ``filenames``, ``batch_label``; meta ``fine_label_names`` and
``coarse_label_names``); the three checkpoints are ``torch.save`` of an ``OrderedDict`` with
every key and shape of ``tests/data/chenyaofo_cifar100_state_dict_keys.txt`` and seeded
weights (He-scaled convolutions, BatchNorm running variances in [0.5, 1.5]). None of it is
CIFAR-100 or a trained model: it exercises the ``cifar100`` code path where the published
files cannot be downloaded. ``write_assets`` also writes the pins file (``--asset-pins``)
with the sha256 of what it wrote.
"""

from __future__ import annotations

import hashlib
import io
import json
import pickle
import tarfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from tests.drift.test_models import reference_keys

FINE, COARSE = 100, 20
FILE_NAMES = {"resnet20": "cifar100_resnet20-synthetic.pt",
              "mobilenetv2_x0_5": "cifar100_mobilenetv2_x0_5-synthetic.pt",
              "vgg11_bn": "cifar100_vgg11_bn-synthetic.pt"}
ARCHIVE = "cifar-100-python.tar.gz"
PINS = "asset-pins.json"


def _images(rng: np.random.Generator, n: int) -> np.ndarray:
    """Smooth random uint8 images (a coarse 8x8 field bilinearly enlarged, plus grain),
    flattened channel-major as CIFAR stores them."""
    coarse = rng.uniform(0, 255, (n, 3, 9, 9))
    grid = np.linspace(0, 8, 32)
    lo = np.minimum(grid.astype(int), 7)
    w = grid - lo
    rows = coarse[:, :, lo, :] * (1 - w)[:, None] + coarse[:, :, lo + 1, :] * w[:, None]
    full = rows[..., lo] * (1 - w) + rows[..., lo + 1] * w
    full += rng.normal(0, 12, full.shape)
    return np.clip(np.rint(full), 0, 255).astype(np.uint8).reshape(n, 3072)


def _split(rng: np.random.Generator, labels: list[int], batch: bytes) -> dict[bytes, Any]:
    n = len(labels)
    return {b"batch_label": batch, b"fine_labels": labels,
            b"coarse_labels": [fine * COARSE // FINE for fine in labels],
            b"data": _images(rng, n),
            b"filenames": [f"synthetic_{i:06d}.png".encode() for i in range(n)]}


def cifar_members(per_class: int, classes: int = FINE, train_per_class: int = 1,
                  seed: int = 0) -> dict[str, bytes]:
    """The three pickled members: ``per_class`` test images for each of ``classes`` fine
    classes spread over 0..99 (interleaved, as the real test split is unordered)."""
    rng = np.random.default_rng(seed)
    test = [c for _ in range(per_class) for c in range(0, FINE, FINE // classes)][
        :per_class * classes]
    train = [c for _ in range(train_per_class) for c in range(FINE)]
    meta = {b"fine_label_names": [f"fine{c:02d}".encode() for c in range(FINE)],
            b"coarse_label_names": [f"coarse{c:02d}".encode() for c in range(COARSE)]}
    return {"cifar-100-python/meta": pickle.dumps(meta, protocol=2),
            "cifar-100-python/test": pickle.dumps(
                _split(rng, test, b"testing batch 1 of 1"), protocol=2),
            "cifar-100-python/train": pickle.dumps(
                _split(rng, train, b"training batch 1 of 1"), protocol=2)}


def write_archive(path: Path, members: dict[str, bytes]) -> Path:
    """A gzip tar with the folder entry and the members, as the real archive lays them."""
    with tarfile.open(path, "w:gz") as tar:
        folder = tarfile.TarInfo("cifar-100-python")
        folder.type, folder.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(folder)
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return path


def state_dict(model: str, seed: int) -> OrderedDict[str, Any]:
    """Every key and shape of the chenyaofo checkpoint of ``model``, seeded weights."""
    import torch

    keys = reference_keys()[model]
    generator = torch.Generator().manual_seed(seed)
    bn = {k.rsplit(".", 1)[0] for k in keys if k.endswith(".running_mean")}
    state: OrderedDict[str, Any] = OrderedDict()
    for key, shape in keys.items():
        owner, leaf = key.rsplit(".", 1)
        if leaf == "num_batches_tracked":
            state[key] = torch.tensor(1000, dtype=torch.int64)
        elif owner in bn:
            n = shape[0]
            state[key] = {"weight": 1 + 0.1 * torch.randn(n, generator=generator),
                          "bias": 0.1 * torch.randn(n, generator=generator),
                          "running_mean": 0.1 * torch.randn(n, generator=generator),
                          "running_var": 0.5 + torch.rand(n, generator=generator)}[leaf]
        elif leaf == "weight":
            fan_in = int(np.prod(shape[1:]))
            gain = 2.0 if len(shape) == 4 else 1.0
            state[key] = torch.randn(shape, generator=generator) * (gain / fan_in) ** 0.5
        else:
            state[key] = 0.01 * torch.randn(shape, generator=generator)
    return state


def write_checkpoint(path: Path, model: str, seed: int) -> Path:
    import torch

    torch.save(state_dict(model, seed), path)
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_assets(folder: Path, per_class: int, classes: int = FINE,
                 models: tuple[str, ...] = tuple(FILE_NAMES), seed: int = 0) -> Path:
    """The mirror folder (archive and checkpoints) and, beside it, the pins file that pins
    them by the sha256 computed here; returns the pins file."""
    folder.mkdir(parents=True, exist_ok=True)
    members = cifar_members(per_class, classes, seed=seed)
    archive = write_archive(folder / ARCHIVE, members)
    checkpoints = {m: write_checkpoint(folder / FILE_NAMES[m], m, seed + 1 + i)
                   for i, m in enumerate(models)}
    pins = {"note": "synthetic CIFAR-100 stand-ins written by tests/cifar_synth.py",
            "archive": {"name": ARCHIVE, "sha256": sha256(archive),
                        "size": archive.stat().st_size},
            "members": {name: hashlib.sha256(members[name]).hexdigest()
                        for name in ("cifar-100-python/meta", "cifar-100-python/test")},
            "checkpoints": {m: {"name": p.name, "sha256": sha256(p)}
                            for m, p in checkpoints.items()}}
    path = folder.with_name(folder.name + "-" + PINS)
    path.write_text(json.dumps(pins, indent=1, sort_keys=True))
    return path
