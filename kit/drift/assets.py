"""Upstream assets of the drift study, pinned by hash, and their hash-checked fetch.

Bytes come from the network (with resume) or from a mirror folder (``--assets DIR``); in
both cases nothing is used before its hash matches the pin, and a file that fails its
check is removed. A mirror is checked whole first (``check_mirror``): one error names
every pinned file missing from it or holding other bytes, as the user gave it, with the
pin and the sha256 it holds; a mirror file that fails ``fetch``'s own check is named as
the user's file too, not as the kit's ``.part`` copy. The CIFAR-100 archive has a full
sha256 pin. The chenyaofo checkpoints publish only the 8-hex torch.hub prefix of their
sha256: the prefix is checked and the full sha256 returned for the run manifest (trust on
first use, stated as such).

``PINNED`` holds these pins. A pins file (``--asset-pins FILE``, ``load_pins``) replaces
them for one run, for files that are not the published ones (the tests' synthetic assets)
or to pin a checkpoint's full sha256 once it is known: every file it names needs a full
sha256, so it can only narrow a pin to other bytes, never drop one. The fetch record names
which pins a run used, and a replaced set keeps its files in a store of its own.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from kit.errors import KitError
from kit.files import parse_json, read_bytes

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
        if self.sha256 is None and self.sha256_prefix is None:
            raise KitError(f"{self.name}: asset has no hash pin; refusing to use it")
        mismatch = self.mismatch(digest, size)
        if mismatch is not None:
            raise KitError(f"{path}: {mismatch}")

    def mismatch(self, digest: str, size: int) -> str | None:
        """How ``digest``/``size`` differ from the pin, in words (None when they match)."""
        if self.size is not None and size != self.size:
            return (f"{size} bytes (sha256 {digest}), the pin for {self.name} says "
                    f"{self.size} bytes, sha256 {self.pin().removeprefix('sha256 ')}")
        if self.sha256 is not None and digest != self.sha256:
            return f"sha256 {digest} does not match the pin {self.sha256}"
        if self.sha256_prefix is not None and not digest.startswith(self.sha256_prefix):
            return f"sha256 {digest} does not start with the pinned prefix {self.sha256_prefix}"
        return None

    def pin(self) -> str:
        """The pin in words, for the fetch record."""
        if self.sha256 is not None:
            return f"sha256 {self.sha256}"
        return f"sha256 prefix {self.sha256_prefix} (trust on first use for the rest)"


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

KIT_PINS = "kit/drift/assets.py"
SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Pins:
    """Every upstream file of the ``cifar100`` substrate with its pin, and their source:
    ``kit/drift/assets.py`` (the published files) or a pins file (``file_sha256`` set)."""

    archive: Asset
    members: dict[str, str]
    checkpoints: dict[str, Asset]
    source: str = KIT_PINS
    file_sha256: str | None = None

    def assets(self, models: Iterable[str]) -> list[Asset]:
        """Every file a run of ``models`` fetches: the archive, then each checkpoint."""
        return [self.archive, *(self.checkpoint(m) for m in models)]

    def checkpoint(self, model: str) -> Asset:
        """The pinned checkpoint of ``model``; KitError naming the pins when there is none."""
        if model not in self.checkpoints:
            raise KitError(f"{self.source}: pins no checkpoint for model {model!r} "
                           f"(pinned: {sorted(self.checkpoints)})")
        return self.checkpoints[model]

    def store(self, base: Path) -> Path:
        """Where fetched files live: ``base`` for the kit's pins, a folder per pins file
        otherwise, so that files of other bytes never sit where the published ones go."""
        return base if self.file_sha256 is None else base / f"pins-{self.file_sha256[:16]}"

    def record(self) -> dict[str, Any]:
        """Which pins a run used, for its fetch record (no absolute path)."""
        if self.file_sha256 is None:
            return {"source": KIT_PINS}
        return {"source": "pins file", "file": Path(self.source).name,
                "file_sha256": self.file_sha256, "replaces": KIT_PINS,
                "archive": self.archive.pin(), "members": dict(sorted(self.members.items())),
                "checkpoints": {m: a.pin() for m, a in sorted(self.checkpoints.items())}}


PINNED = Pins(CIFAR100, CIFAR100_MEMBERS, CHECKPOINTS)
PINS_KEYS = {"note", "archive", "members", "checkpoints"}
ASSET_KEYS = {"name", "sha256", "size", "url"}


def _pinned_asset(entry: Any, where: str, like: Asset) -> Asset:
    """One asset of a pins file: a plain file name and a full sha256 (size, url optional;
    the url defaults to the kit's for the same role)."""
    if not isinstance(entry, dict) or set(entry) - ASSET_KEYS or \
            not {"name", "sha256"} <= set(entry):
        raise KitError(f"{where}: needs name and sha256 (optional size, url), found {entry!r}")
    name, digest, size = entry["name"], entry["sha256"], entry.get("size")
    if not isinstance(name, str) or "\\" in name or Path(name).name != name or \
            name in ("", ".", ".."):
        raise KitError(f"{where}: name must be a plain file name, found {name!r}")
    if not isinstance(digest, str) or not SHA256.fullmatch(digest):
        raise KitError(f"{where}: sha256 must be 64 lower-case hex digits, found {digest!r}")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
        raise KitError(f"{where}: size must be a byte count, found {size!r}")
    return Asset(name, str(entry.get("url", like.url)), sha256=digest, size=size)


def load_pins(path: Path | None) -> Pins:
    """The kit's pins (``path`` None), or those of a pins file, checked at the boundary::

        {"note": "why these pins",
         "archive": {"name": "cifar-100-python.tar.gz", "sha256": "<64 hex>", "size": 123},
         "members": {"cifar-100-python/test": "<64 hex>", "cifar-100-python/meta": "<64 hex>"},
         "checkpoints": {"resnet20": {"name": "<file>.pt", "sha256": "<64 hex>"}, ...}}
    """
    if path is None:
        return PINNED
    raw = read_bytes(path)
    pins = parse_json(raw, path, "give a JSON pins file (kit.drift.assets.load_pins says its form)")
    if not isinstance(pins, dict) or set(pins) - PINS_KEYS or \
            not {"archive", "members", "checkpoints"} <= set(pins):
        found = sorted(pins) if isinstance(pins, dict) else pins
        raise KitError(f"{path}: asset pins need archive, members and checkpoints (and an "
                       f"optional note), found {found!r}")
    archive = _pinned_asset(pins["archive"], f"{path}: archive", CIFAR100)
    members = pins["members"]
    if not isinstance(members, dict) or set(members) != set(CIFAR100_MEMBERS) or \
            not all(isinstance(v, str) and SHA256.fullmatch(v) for v in members.values()):
        raise KitError(f"{path}: members must give a 64-hex sha256 for exactly "
                       f"{sorted(CIFAR100_MEMBERS)}")
    checkpoints = pins["checkpoints"]
    unknown = sorted(set(checkpoints) - set(CHECKPOINTS)) if isinstance(checkpoints, dict) \
        else checkpoints
    if not isinstance(checkpoints, dict) or not checkpoints or unknown:
        raise KitError(f"{path}: checkpoints must map models of {sorted(CHECKPOINTS)} to "
                       f"pinned files, found {unknown!r}")
    return Pins(archive, dict(members),
                {m: _pinned_asset(e, f"{path}: checkpoints/{m}", CHECKPOINTS[m])
                 for m, e in checkpoints.items()},
                source=str(path), file_sha256=hashlib.sha256(raw).hexdigest())


Opener = Callable[..., Any]


def sha256_of(path: Path) -> tuple[str, int]:
    """(hex sha256, size in bytes) of a file."""
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def mirror_problems(assets: Iterable[Asset], mirror: Path) -> list[str]:
    """Each of ``assets`` missing from ``mirror`` or holding other bytes there, named as
    ``mirror/<name>`` (the folder as the user gave it), with the pin and what it holds."""
    problems = []
    for asset in assets:
        source = mirror / asset.name
        if not source.is_file():
            problems.append(f"{source}: missing (the pin: {asset.pin()})")
            continue
        try:
            digest, size = sha256_of(source)
        except OSError as exc:
            problems.append(f"{source}: cannot be read ({exc.strerror or exc})")
            continue
        mismatch = asset.mismatch(digest, size)
        if mismatch is not None:
            problems.append(f"{source}: {mismatch}")
    return problems


def check_mirror(assets: Iterable[Asset], mirror: Path) -> None:
    """Refuse a mirror folder (``--assets DIR``) that lacks a pinned file or holds other
    bytes, naming every such file in one KitError (not only the first)."""
    wanted = list(assets)
    problems = mirror_problems(wanted, mirror)
    if problems:
        raise KitError(f"{mirror}: {len(problems)} of the {len(wanted)} pinned files are "
                       "missing from the mirror folder or hold other bytes (--assets DIR "
                       "must hold each under its pinned name):\n  " + "\n  ".join(problems))


def _verified(asset: Asset, part: Path, dest: Path, shown: Path | None = None) -> str:
    """Check ``part`` against the pin (errors name ``shown``, the user's file, where the
    bytes came from a mirror) and move it to ``dest``."""
    digest, size = sha256_of(part)
    try:
        asset.check(digest, size, shown or part)
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
    if mirror is None:
        _download(asset, part, opener)
        return dest, _verified(asset, part, dest)
    source = mirror / asset.name
    if not source.is_file():
        raise KitError(f"{source}: {asset.name} is not in the mirror folder {mirror}")
    try:
        shutil.copyfile(source, part)
    except OSError as exc:
        raise KitError(f"{source}: cannot be copied from the mirror ({exc})") from exc
    return dest, _verified(asset, part, dest, source)
