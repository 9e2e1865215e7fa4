"""CIFAR-100 from its python archive: safe extraction and a restricted unpickler.

The archive and each member are hash-checked before anything is unpickled, and the
unpickler resolves only the numpy names an array needs, so a tampered pickle cannot run
code. Extraction refuses members that are not plain files or folders, or whose path would
leave the target folder.
"""

from __future__ import annotations

import io
import pickle
import tarfile
from pathlib import Path
from typing import Any

import numpy as np

from kit.drift.assets import CIFAR100_MEMBERS, sha256_of
from kit.errors import KitError

ALLOWED_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode"),
}


class RestrictedUnpickler(pickle.Unpickler):
    """Builtin containers and numpy arrays only; any other global is refused."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed")
        return super().find_class(module, name)


def safe_extract(archive: Path, target: Path, members: list[str]) -> dict[str, Path]:
    """Extract the named regular-file members of a tar archive into ``target``."""
    target = target.resolve()
    found: dict[str, Path] = {}
    try:
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                where = (target / member.name).resolve()
                if member.name.startswith("/") or not where.is_relative_to(target):
                    raise KitError(f"{archive}: member {member.name!r} would land outside "
                                   f"{target}")
                if not (member.isfile() or member.isdir()):
                    raise KitError(f"{archive}: member {member.name!r} is not a plain file")
                if member.name in members:
                    tar.extract(member, target, filter="data")
                    found[member.name] = where
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise KitError(f"{archive}: not a readable tar archive ({exc})") from exc
    absent = sorted(set(members) - set(found))
    if absent:
        raise KitError(f"{archive}: member(s) {absent} not in the archive")
    return found


def load_pickle(path: Path, sha256: str) -> dict[bytes, Any]:
    """Check ``path`` against ``sha256``, then unpickle it with the restricted unpickler."""
    digest, _ = sha256_of(path)
    if digest != sha256:
        raise KitError(f"{path}: sha256 {digest} does not match the pin {sha256}")
    try:
        obj = RestrictedUnpickler(io.BytesIO(path.read_bytes()), encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as exc:
        raise KitError(f"{path}: refused or damaged pickle ({exc})") from exc
    if not isinstance(obj, dict):
        raise KitError(f"{path}: expected a pickled dict, found {type(obj).__name__}")
    return obj


def decode_split(obj: dict[bytes, Any], path: Path) -> tuple[np.ndarray[Any, Any],
                                                             np.ndarray[Any, Any]]:
    """(uint8 images N x 32 x 32 x 3, int64 fine labels N) from a CIFAR split dict."""
    for key in (b"data", b"fine_labels"):
        if key not in obj:
            raise KitError(f"{path}: CIFAR split lacks {key!r}")
    data = np.asarray(obj[b"data"])
    labels = np.asarray(obj[b"fine_labels"], dtype=np.int64)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise KitError(f"{path}: data must be uint8 N x 3072, found {data.dtype} {data.shape}")
    if labels.shape != (data.shape[0],) or labels.min() < 0 or labels.max() > 99:
        raise KitError(f"{path}: fine_labels must be N integers in 0..99")
    # Channel-major rows: R plane, G plane, B plane, each 32x32 row-major.
    images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1).copy()
    return images, labels


def load_cifar100_test(archive: Path, workdir: Path,
                       member_pins: dict[str, str] | None = None
                       ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], list[str]]:
    """The CIFAR-100 test split (images, fine labels) and the fine label names."""
    pins = member_pins or CIFAR100_MEMBERS
    test_name = next(name for name in pins if name.endswith("/test"))
    meta_name = next(name for name in pins if name.endswith("/meta"))
    paths = safe_extract(archive, workdir, [test_name, meta_name])
    images, labels = decode_split(load_pickle(paths[test_name], pins[test_name]),
                                  paths[test_name])
    meta = load_pickle(paths[meta_name], pins[meta_name])
    names = [n.decode() if isinstance(n, bytes) else str(n)
             for n in meta.get(b"fine_label_names", [])]
    if len(names) != 100:
        raise KitError(f"{paths[meta_name]}: expected 100 fine_label_names, found {len(names)}")
    return images, labels, names
