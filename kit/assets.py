"""Upstream assets of the drift study, pinned by hash, and their hash-checked fetch.

Bytes come from the network (with resume) or from a mirror folder (``--assets DIR``); in
both cases nothing is used before its hash matches the pin, and a file that fails its
check is removed. The CIFAR-100 archive has a full sha256 pin. The chenyaofo checkpoints
publish only the 8-hex torch.hub prefix of their sha256: the prefix is checked and the
full sha256 returned for the run manifest (trust on first use, stated as such).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from kit.errors import KitError

CHUNK = 1 << 20


@dataclass(frozen=True)
class Asset:
    """One upstream file: where it lives and what its bytes must hash to."""

    name: str
    url: str
    sha256: str | None = None
    sha256_prefix: str | None = None
    size: int | None = None

    def check(self, digest: str, size: int, path: Path) -> None:
        """Raise KitError naming ``path`` unless ``digest``/``size`` match the pin."""
        if self.size is not None and size != self.size:
            raise KitError(f"{path}: {size} bytes, the pin for {self.name} says {self.size}")
        if self.sha256 is not None and digest != self.sha256:
            raise KitError(f"{path}: sha256 {digest} does not match the pin {self.sha256}")
        if self.sha256_prefix is not None and not digest.startswith(self.sha256_prefix):
            raise KitError(f"{path}: sha256 {digest} does not start with the pinned prefix "
                           f"{self.sha256_prefix}")
        if self.sha256 is None and self.sha256_prefix is None:
            raise KitError(f"{self.name}: asset has no hash pin; refusing to use it")


CHENYAOFO = "https://github.com/chenyaofo/pytorch-cifar-models/releases/download/"
CIFAR100 = Asset(
    "cifar-100-python.tar.gz", "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
    sha256="85cd44d02ba6437773c5bbd22e183051d648de2e7d6b014e1ef29b855ba677a7",
    size=169001437)
CIFAR100_MEMBERS = {
    "cifar-100-python/test": "4b67687d9933c4db8f0831104447f15b93774f4f464bd0516f0f0f2ac83b7864",
    "cifar-100-python/meta": "a5d4786345c961390f865e93b434dbd5c6904ce880667e0cb888c97d449f28b9",
}
CHECKPOINTS = {
    "resnet20": Asset("cifar100_resnet20-23dac2f1.pt",
                      CHENYAOFO + "resnet/cifar100_resnet20-23dac2f1.pt",
                      sha256_prefix="23dac2f1"),
    "mobilenetv2_x0_5": Asset("cifar100_mobilenetv2_x0_5-9f915757.pt",
                              CHENYAOFO + "mobilenetv2/cifar100_mobilenetv2_x0_5-9f915757.pt",
                              sha256_prefix="9f915757"),
    "vgg11_bn": Asset("cifar100_vgg11_bn-57d0759e.pt",
                      CHENYAOFO + "vgg/cifar100_vgg11_bn-57d0759e.pt",
                      sha256_prefix="57d0759e"),
}

Opener = Callable[..., Any]


def sha256_of(path: Path) -> tuple[str, int]:
    """(hex sha256, size in bytes) of a file."""
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def _verified(asset: Asset, part: Path, dest: Path) -> str:
    digest, size = sha256_of(part)
    try:
        asset.check(digest, size, part)
    except KitError:
        part.unlink(missing_ok=True)
        raise
    os.replace(part, dest)
    return digest


def _download(asset: Asset, part: Path, opener: Opener) -> None:
    have = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(asset.url, headers={"User-Agent": "kit-fetch"})
    if have:
        request.add_header("Range", f"bytes={have}-")
    try:
        response = opener(request, timeout=60)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:  # the partial file is already whole
            return
        raise KitError(f"{asset.url}: HTTP {exc.code} fetching {asset.name}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise KitError(f"{asset.url}: cannot fetch {asset.name} ({exc}); without a network, "
                       "pass a mirror folder holding it with --assets DIR") from exc
    with response:
        resumed = have and getattr(response, "status", 200) == 206
        mode = "ab" if resumed else "wb"
        with open(part, mode) as handle:
            _copy(response, handle)


def _copy(source: IO[bytes], target: IO[bytes]) -> None:
    while block := source.read(CHUNK):
        target.write(block)


def fetch(asset: Asset, dest_dir: Path, mirror: Path | None = None,
          opener: Opener = urllib.request.urlopen) -> tuple[Path, str]:
    """Place ``asset`` in ``dest_dir`` with its hash checked; returns (path, full sha256).

    A file already there is re-checked, not trusted. With ``mirror`` the bytes come from
    ``mirror/<name>`` only; otherwise they are downloaded, resuming a ``.part`` file."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / asset.name
    if dest.exists():
        digest, size = sha256_of(dest)
        asset.check(digest, size, dest)
        return dest, digest
    part = dest.with_name(dest.name + ".part")
    if mirror is not None:
        source = mirror / asset.name
        if not source.is_file():
            raise KitError(f"{source}: {asset.name} is not in the mirror folder {mirror}")
        shutil.copyfile(source, part)
    else:
        _download(asset, part, opener)
    return dest, _verified(asset, part, dest)
