"""Trained SciML subjects (and simulated data), cached by content hash.

The cache name hashes the recipe (a dataclass), any extra key and the source files that
decide the result, so a changed recipe or changed code never loads a stale subject.
Checkpoints are torch state dicts written atomically under ``<cache>/sciml-<kind>/``.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kit.files import write_atomic
from kit.paths import cache_dir


def content_key(recipe: Any, sources: tuple[Path, ...], extra: bytes = b"") -> str:
    """20 hex digits of sha256(recipe as sorted JSON, extra, the sources' bytes)."""
    payload = json.dumps(asdict(recipe), sort_keys=True).encode() + extra \
        + b"".join(path.read_bytes() for path in sources)
    return hashlib.sha256(payload).hexdigest()[:20]


def cached_path(kind: str, stem: str, cache: Path | None, suffix: str = ".pt") -> Path:
    return (cache or cache_dir()) / f"sciml-{kind}" / f"{stem}{suffix}"


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
