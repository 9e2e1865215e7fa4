"""Stage fetch: the substrate's images and the three models, exported to ONNX.

- ``digits`` (offline default): scikit-learn's digits brought to 32x32x3 (kit/drift/digits.py);
  the three architectures trained deterministically on the images outside the 600-image
  sample (kit/drift/train.py, cached by content hash); normalisation from that training pool.
- ``cifar100``: the pinned archive and checkpoints, from the network or ``--assets DIR``,
  each hash-checked before use; the test split decoded by the restricted unpickler; the
  state_dicts loaded strictly into the kit's own architectures. The pins are
  ``kit/drift/assets.py``'s unless a pins file (``--asset-pins FILE``) replaces them; the record
  says which (``asset_pins``).

Each model is exported twice: the plain graph (logits) and an instrumented copy with one
activation sketch per convolution (kit/drift/instrument.py).

``source="shipped"`` (digits only; ``reproduce --models shipped``) trains nothing: each
plain ONNX is the one shipped under ``claims/drift/evidence/digits/fetch/models``, copied
after its sha256 is checked against the shipped fetch record, whose recipe must be the
protocol's; the instrumented copy is made again from it and checked against the shipped
run manifest. The rest of the study then replays on the shipped weights, on any CPU
(training picks float kernels by instruction set, so a retrain elsewhere gives other
weights). Where the models came from is run metadata (``training-cache.json``), so the
fetch record is the shipped one byte for byte.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from kit.drift.assets import Pins, check_mirror, load_pins
from kit.drift.assets import fetch as fetch_asset
from kit.drift.export import export_onnx
from kit.drift.instrument import instrument
from kit.drift.models import load_checkpoint
from kit.errors import KitError
from kit.files import canonical_json, copy_checked, read_json, sha256, write_atomic, write_npz
from kit.paths import ROOT, cache_dir
from kit.runfolder import SHIPPED_MANIFEST, TRAINING_CACHE, Progress, Run

SUBSTRATES = ("digits", "cifar100")
MODEL_SOURCES = ("train", "shipped")
# The shipped digits evidence, whose fetch/models are the shipped models.
SHIPPED_DIGITS = ROOT / "claims" / "drift" / "evidence" / "digits"
# The training weights (torch state_dicts, ``<model>.pt``) behind that evidence, pinned by
# the weights_sha256 of its fetch record (verify checks them): the real-drift sweep's export
# with BatchNormalization kept starts from them (``sweep --models shipped``).
SHIPPED_WEIGHTS = ROOT / "claims" / "drift" / "weights" / "digits"
# images, labels, normalisation mean, std, and per model (weights file, its provenance)
Loaded = tuple[Any, Any, list[float], list[float], dict[str, tuple[Path, dict[str, Any]]]]


def _digits_data(protocol: dict[str, Any]) -> tuple[Any, Any, Any, list[float], list[float]]:
    """The digits images and labels, the training pool (every image outside the sample)
    and its channel statistics."""
    from kit.drift.digits import load_digits_rgb32
    from kit.drift.split import round_robin_sample, training_pool
    from kit.drift.train import channel_stats

    images, labels = load_digits_rgb32()
    sample = round_robin_sample(labels, protocol["sample"]["size"], protocol["seeds"]["sample"])
    pool = training_pool(len(labels), sample)
    mean, std = channel_stats(images[pool])
    return images, labels, pool, mean, std


def _recipes(protocol: dict[str, Any]) -> list[Any]:
    from kit.drift.train import Recipe

    training = protocol["training"]
    knobs = {k: training[k] for k in ("batch_size", "max_lr", "momentum", "weight_decay",
                                      "rotate_degrees", "shift_pixels", "threads")}
    return [Recipe(name, epochs=training["epochs"][name], seed=protocol["seeds"]["training"],
                   **knobs) for name in protocol["models"]]


def _digits(protocol: dict[str, Any], run: Run) -> Loaded:
    images, labels, pool, mean, std = _digits_data(protocol)
    weights, cache = {}, {}
    progress = Progress("fetch: training", len(protocol["models"]))
    recipes = _recipes(protocol)
    trained = _train_all(recipes, images[pool], labels[pool])
    for recipe in recipes:
        name = recipe.architecture
        path, record, cached = trained[name]
        # The cache key hashes the training code's bytes, and whether the weights came
        # from the cache depends on this machine's history: run metadata, not evidence, so
        # that moving or editing the code leaves the hashed record (and a replay) unchanged.
        cache[name] = {"cache_key": record["cache_key"], "cached": cached}
        record = {**{k: v for k, v in record.items() if k != "cache_key"},
                  "weights": "trained by the kit"}
        weights[name] = (path, record)
        progress.step(f"{name} ({'cached' if cached else 'trained'})")
    write_atomic(run.root / TRAINING_CACHE, canonical_json({"models": cache}))
    return images, labels, mean, std, weights


def _train_all(recipes: list[Any], images: Any, labels: Any
               ) -> dict[str, tuple[Path, dict[str, Any], bool]]:
    """Train (or take from the cache) every model, one process per model up to one per
    core: each trains on one torch thread from its own seed, so the weights are the bytes
    a serial run gives (tested against the shipped digits evidence's weights_sha256)."""
    from kit.drift.train import train_cached

    cache = cache_dir() / "digits-models"
    workers = min(len(recipes), os.cpu_count() or 1)
    if workers == 1:
        return {r.architecture: train_cached(r, images, labels, 10, cache) for r in recipes}
    context = multiprocessing.get_context("spawn")  # no forked torch state in the children
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = {r.architecture: pool.submit(train_cached, r, images, labels, 10, cache)
                   for r in recipes}
        return {name: future.result() for name, future in futures.items()}


def _cifar100(protocol: dict[str, Any], run: Run, assets: Path | None, pins: Pins) -> Loaded:
    from kit.drift.cifar import load_cifar100_test

    store = pins.store(cache_dir() / "assets")
    if assets is not None:  # every file the mirror lacks or holds wrongly, in one error
        check_mirror([asset for asset in pins.assets(protocol["models"])
                      if not (store / asset.name).exists()], assets)
    archive, archive_sha = fetch_asset(pins.archive, store, assets)
    images, labels, _ = load_cifar100_test(archive, run.stage("fetch") / "extracted",
                                           pins.members)
    mean, std = (list(v) for v in protocol["substrates"]["cifar100"]["normalisation"])
    weights = {}
    for name in protocol["models"]:
        checkpoint = pins.checkpoint(name)
        path, sha = fetch_asset(checkpoint, store, assets)
        weights[name] = (path, {"weights": "chenyaofo checkpoint", "sha256": sha,
                                "pin": checkpoint.pin(), "archive_sha256": archive_sha})
    return images, labels, mean, std, weights


def _fetch_shipped(protocol: dict[str, Any], run: Run, shipped: Path) -> dict[str, Any]:
    """The digits stage from the shipped models (module docstring); returns the record."""
    from dataclasses import asdict

    source = shipped / "fetch" / "fetch.json"
    record = read_json(source)
    manifest = read_json(shipped / SHIPPED_MANIFEST).get("files", {})
    images, labels, _, mean, std = _digits_data(protocol)
    out = run.stage("fetch")
    models: dict[str, Any] = {}
    for recipe in _recipes(protocol):
        name = recipe.architecture
        entry = record.get("models", {}).get(name)
        if entry is None or entry["source"].get("recipe") != asdict(recipe):
            raise KitError(f"{source}: the shipped {name} was not trained by this protocol's "
                           f"recipe ({asdict(recipe)}); use --models train")
        plain = out / "models" / f"{name}.onnx"
        copy_checked(shipped / entry["onnx"], plain, entry["onnx_sha256"], "model",
                     "shipped fetch record")
        instrument(plain, out / "models" / f"{name}.sketch.onnx",
                   protocol["instrumentation"]["max_values"])
        expected = manifest.get(entry["sketch_onnx"])
        if sha256(run.root / entry["sketch_onnx"]) != expected:
            raise KitError(f"{run.root / entry['sketch_onnx']}: the instrumented copy of the "
                           f"shipped {name} is not the shipped one ({shipped / SHIPPED_MANIFEST}); "
                           "kit/drift/instrument.py changed since the evidence was made")
        models[name] = entry
    write_npz(out / "dataset.npz", {"images": np.asarray(images, np.uint8),
                                    "labels": np.asarray(labels, np.int64)})
    write_atomic(run.root / TRAINING_CACHE, canonical_json({"models": {
        name: {"from": "shipped evidence", "onnx_sha256": entry["onnx_sha256"]}
        for name, entry in models.items()}}))
    result = {"substrate": "digits", "classes": protocol["substrates"]["digits"]["classes"],
              "mean": mean, "std": std, "images": len(images), "models": models}
    run.write_record("fetch", result)
    return result


def run_fetch(protocol: dict[str, Any], run: Run, substrate: str,
              assets: Path | None = None, asset_pins: Path | None = None,
              source: str = "train", shipped: Path = SHIPPED_DIGITS) -> dict[str, Any]:
    """Fetch or train, then export every model; returns the stage record. ``asset_pins``
    names a pins file that replaces ``kit/drift/assets.py``'s pins (``cifar100`` only);
    ``source="shipped"`` takes the digits models from ``shipped`` instead of training."""
    if substrate not in SUBSTRATES:
        raise KitError(f"unknown substrate {substrate!r}; choose from {SUBSTRATES}")
    if source not in MODEL_SOURCES:
        raise KitError(f"unknown model source {source!r}; choose from {MODEL_SOURCES}")
    if source == "shipped":
        if substrate != "digits":
            raise KitError(f"--models shipped: the kit ships trained models for digits only; "
                           f"{substrate} fetches its pinned checkpoints")
        return _fetch_shipped(protocol, run, shipped)
    pinned: dict[str, Any] = {}
    if substrate == "digits":
        if asset_pins is not None:
            raise KitError(f"{asset_pins}: asset pins apply to the cifar100 substrate only; "
                           "digits fetches nothing")
        images, labels, mean, std, weights = _digits(protocol, run)
    else:
        pins = load_pins(asset_pins)
        pinned = {"asset_pins": pins.record()}
        images, labels, mean, std, weights = _cifar100(protocol, run, assets, pins)
    classes = protocol["substrates"][substrate]["classes"]
    out = run.stage("fetch")
    write_npz(out / "dataset.npz", {"images": np.asarray(images, np.uint8),
                                    "labels": np.asarray(labels, np.int64)})
    models: dict[str, Any] = {}
    for name in protocol["models"]:
        path, record = weights[name]
        model = load_checkpoint(name, path, classes)
        plain = export_onnx(model, out / "models" / f"{name}.onnx", (1, 3, 32, 32),
                            opset=protocol["export"]["opset"])
        sketches = instrument(plain, out / "models" / f"{name}.sketch.onnx",
                              protocol["instrumentation"]["max_values"])
        models[name] = {"onnx": plain.relative_to(run.root).as_posix(),
                        "sketch_onnx": f"fetch/models/{name}.sketch.onnx",
                        "onnx_sha256": sha256(plain), "sketch_outputs": len(sketches),
                        "weights_sha256": sha256(path), "source": record}
    result = {"substrate": substrate, "classes": classes, "mean": mean, "std": std,
              "images": len(images), "models": models, **pinned}
    run.write_record("fetch", result)
    return result


def training_weights(run: Run, name: str, cached: dict[str, Any], digest: str) -> Path:
    """The training weights model ``name`` of ``run`` was exported from (sha256 ``digest``,
    its fetch record's): the training cache's when fetch trained it (``cached`` names the
    key), else the shipped ones (``SHIPPED_WEIGHTS``, those behind the shipped evidence)."""
    places = [SHIPPED_WEIGHTS / f"{name}.pt"]
    if isinstance(cached.get("cache_key"), str):
        places.insert(0, cache_dir() / "digits-models" / cached["cache_key"][:16] / f"{name}.pt")
    for weights in places:
        if weights.is_file() and not weights.is_symlink() and sha256(weights) == digest:
            return weights
    raise KitError(f"{run.root}: no training weights of {name} with the sha256 its fetch "
                   f"record names ({digest}) in {' or '.join(map(str, places))}; rerun fetch "
                   "there")
