"""Trained SciML subjects (and simulated data), cached by content hash.

The cache name hashes the recipe (a dataclass), any extra key and the source files that
decide the result, so a changed recipe or changed code never loads a stale subject.
Checkpoints are torch state dicts written atomically under ``<cache>/sciml-<kind>-avx2/``.

Trained subjects are evidence. Every subject's checkpoint a step asks for is noted
(``take_used``); the study copies them into its run folder (``weights/``), so they ship
with the evidence under the run manifest's sha256. ``--models shipped`` fills a cache of
its own with the shipped checkpoints (``use_shipped``) and trains nothing: a subject whose
checkpoint is not shipped is an error, never a silent retrain. Training picks its float
kernels by CPU (MKL's matrix products and FFTs are not held by the pins below), so the
shipped weights are what lets the rest of the study replay on another CPU.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kit.errors import KitError
from kit.files import write_atomic
from kit.paths import cache_dir

# The CPU kernels decide a trained subject's bits. oneDNN (torch's convolutions and matrix
# products) and ATen pick their kernels by the CPU's vector ISA, and the same seeded
# training gives other weights with AVX-512 kernels than with AVX2 ones (measured on one
# AVX-512 machine: FNO heat seed 0, 200 steps, final loss 0.0019819308 by default and
# 0.0019816370 with oneDNN held to AVX2, the shipped value). The study holds both
# dispatchers to AVX2, which every x86-64 CPU from 2013-2015 on has, so that a subject
# trained on any such machine has the same bits; the cache folders name the pin.
NUMERICS = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
NUMERICS_TAG = "avx2"


def content_key(recipe: Any, sources: tuple[Path, ...], extra: bytes = b"") -> str:
    """20 hex digits of sha256(recipe as sorted JSON, extra, the sources' bytes)."""
    payload = json.dumps(asdict(recipe), sort_keys=True).encode() + extra \
        + b"".join(path.read_bytes() for path in sources)
    return hashlib.sha256(payload).hexdigest()[:20]


# The kinds of cache entry that are trained subjects (the rest are simulated data).
WEIGHTS = ("fno", "pinn", "mgn", "physicsnemo")
_used: dict[str, Path] = {}  # name under the cache -> path, since the last take_used
_shipped: Path | None = None  # the cache use_shipped filled: nothing may be trained


def cached_path(kind: str, stem: str, cache: Path | None, suffix: str = ".pt") -> Path:
    """The cache entry of one subject (or simulated dataset). A subject's entry is noted
    for ``take_used``; under ``use_shipped`` a subject that is not shipped is a KitError."""
    path = (cache or cache_dir()) / f"sciml-{kind}-{NUMERICS_TAG}" / f"{stem}{suffix}"
    if kind in WEIGHTS:
        name = f"{path.parent.name}/{path.name}"
        if _shipped is not None and not path.is_file():
            raise KitError(f"{name}: --models shipped, but the shipped SciML weights hold no "
                           f"{kind} subject of this recipe and code (the name hashes both); "
                           "the evidence was made by other code: use --models train")
        _used[name] = path
    return path


def take_used() -> dict[str, Path]:
    """The subjects' entries asked for since the last call (and forget them)."""
    found = dict(sorted(_used.items()))
    _used.clear()
    return found


def use_shipped(weights: dict[str, tuple[Path, str]], cache: Path) -> Path:
    """Fill ``cache`` (emptied first: the kit's own folder) with the shipped checkpoints,
    name -> (file, its sha256), each checked before it is copied, and refuse from now on
    any subject that is not among them; returns ``cache``."""
    import shutil

    global _shipped
    from kit.files import copy_checked

    shutil.rmtree(cache, ignore_errors=True)
    for name, (source, expected) in sorted(weights.items()):
        copy_checked(source, cache / name, expected, "SciML checkpoint",
                     "shipped run manifest")
    _shipped = cache
    return cache


def pin_numerics() -> str:
    """Hold torch's kernel dispatch to AVX2 in this process and the workers it starts (the
    PhysicsNeMo worker inherits the environment); returns the ATen capability in use. Must
    run before torch runs its first kernel: a KitError when torch already chose others
    (or, on x86-64, the CPU lacks AVX2), since the subjects would then not be the shipped
    ones. Not x86-64: nothing to pin, the capability is returned as it is. Every torch
    computation of the process runs on one thread."""
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    if x86:
        os.environ.update(NUMERICS)
    import torch

    capability = str(torch.backends.cpu.get_cpu_capability())
    if x86 and capability != "AVX2":
        raise KitError(f"torch runs {capability} kernels, not the AVX2 ones the SciML study "
                       "pins (ONEDNN_MAX_CPU_ISA=AVX2, ATEN_CPU_CAPABILITY=avx2): start the "
                       "study in a fresh process (python -m kit sciml), before torch has run")
    # One thread for every computation of the study, not only for training: torch's
    # default is the machine's core count, and a reduction split over another number of
    # threads gives other bits (measured: the untrained FNO's embedding effect, computed
    # before the first training, moved from 7.7e-8 to 6.2e-8 between 2 threads and 1).
    torch.set_num_threads(1)
    return capability


def load(path: Path) -> dict[str, Any] | None:
    """The saved record (``model`` state dict and extras), or None when not cached. An
    entry that does not load as plain tensors (weights only) is reported and treated as
    missing, so the subject is trained again and the entry rewritten."""
    if not path.is_file():
        return None
    import pickle

    import torch

    try:
        return torch.load(path, weights_only=True)  # type: ignore[no-any-return]
    except (pickle.UnpicklingError, RuntimeError, EOFError) as exc:
        print(f"checkpoints: {path}: unreadable cache entry, training again "
              f"({type(exc).__name__})", file=sys.stderr)
        return None


def save(path: Path, model: Any, **extra: Any) -> None:
    """Write ``{"model": state_dict, **extra}`` atomically, tensors only (neuraloperator
    adds its constructor arguments as ``_metadata``, which a weights-only load refuses and
    its ``load_state_dict`` does not need)."""
    import torch

    state = {k: v for k, v in model.state_dict().items() if isinstance(v, torch.Tensor)}
    buffer = io.BytesIO()
    torch.save({"model": state, **extra}, buffer)
    write_atomic(path, buffer.getvalue())
