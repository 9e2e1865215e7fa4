"""The runtimes: the study's named configurations (``runtimes.toml``: lock, image,
optimisation level) and any onnxruntime CPU release as data (``releases.toml``).

A release runs from ``locks/ort-<release>.lock`` (written by ``python -m
kit.runtime.releases lock``), or from the lock of the ``runtimes.toml`` entry that pins it,
so 1.20.1 is ``ref`` and 1.29.0 is ``cand``; its image builds from ``Dockerfile.release``.
The graph optimisation level and thread counts are per job, never part of a runtime."""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.errors import ConfigError
from kit.locks import lock_requirements
from kit.paths import ROOT

CONFIG = Path(__file__).with_name("runtimes.toml")
RELEASES = Path(__file__).with_name("releases.toml")
# Every level any release names (1.23 added enable_layout); which of them a release
# offers is releases.toml's [levels] (``levels_offered``), as its own wheel says
# (kit.runtime.backends.describe_runtime).
GRAPH_LEVELS = ("disable_all", "enable_basic", "enable_extended", "enable_layout",
                "enable_all")
FIELDS = ("description", "onnxruntime", "lock", "dockerfile", "image", "graph_optimization")


@dataclass(frozen=True)
class Runtime:
    """One pinned runtime: which onnxruntime, from which lock, in which image."""

    name: str
    description: str
    onnxruntime: str
    lock: Path
    dockerfile: Path
    image: str
    graph_optimization: str

    def lock_sha256(self) -> str:
        """sha256 of the lock file: it labels the image and stamps the venv."""
        return hashlib.sha256(self.lock.read_bytes()).hexdigest()


def _check_lock(name: str, lock: Path, version: str) -> None:
    if not lock.is_file():
        raise ConfigError(f"{lock}: lock file of runtime {name!r} not found")
    pins = [pin for pin in lock_requirements(lock) if pin.startswith("onnxruntime==")]
    if pins != [f"onnxruntime=={version}"]:
        raise ConfigError(f"{lock}: must pin onnxruntime=={version} once, found {pins}")


def load_runtimes(config: Path = CONFIG, root: Path = ROOT) -> dict[str, Runtime]:
    """Read and check every runtime; a malformed file raises ConfigError naming it."""
    try:
        table = tomllib.loads(config.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{config}: cannot read the runtime configurations ({exc})") from exc
    runtimes = {}
    for name, entry in sorted(table.items()):
        missing = [key for key in FIELDS if key not in entry]
        if missing:
            raise ConfigError(f"{config}: runtime {name!r} lacks {missing}")
        if entry["graph_optimization"] not in GRAPH_LEVELS:
            raise ConfigError(f"{config}: runtime {name!r}: graph_optimization must be "
                              f"one of {GRAPH_LEVELS}")
        runtime = Runtime(
            name=name, description=entry["description"], onnxruntime=entry["onnxruntime"],
            lock=root / entry["lock"], dockerfile=root / entry["dockerfile"],
            image=entry["image"], graph_optimization=entry["graph_optimization"])
        _check_lock(name, runtime.lock, runtime.onnxruntime)
        runtimes[name] = runtime
    return runtimes


def known_releases(path: Path | None = None) -> dict[str, str]:
    """Every release the kit can run, mapped to the numpy its lock pins."""
    return dict(_release_table("numpy", path))


def levels_offered(release: str, path: Path | None = None) -> list[str]:
    """The graph optimisation levels onnxruntime ``release`` offers, lowest first
    (``releases.toml``'s [levels]), so that a level it lacks is refused before any worker
    starts; a ConfigError naming the table where it lacks the release or names a level
    no release has."""
    path = path or RELEASES
    levels = _release_table("levels", path).get(release)
    if not isinstance(levels, list) or not levels or any(lv not in GRAPH_LEVELS
                                                         for lv in levels):
        raise ConfigError(f"{path}: [levels] gives onnxruntime {release!r} no list of "
                          f"levels out of {', '.join(GRAPH_LEVELS)}; add what its worker "
                          "says (`python kit/runtime/worker.py --describe` in its "
                          "environment)")
    return list(levels)


def _release_table(name: str, path: Path | None) -> dict[str, Any]:
    path = path or RELEASES
    try:
        table = tomllib.loads(path.read_text())[name]
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, KeyError) as exc:
        raise ConfigError(f"{path}: cannot read the release table ({exc!r})") from exc
    return dict(table)


def release_lock(release: str, root: Path = ROOT) -> Path:
    """Where the kit writes the lock of a release no runtimes.toml entry pins."""
    return root / "locks" / f"ort-{release}.lock"


def release_runtime(release: str) -> Runtime:
    """The runtime of onnxruntime ``release``: the runtimes.toml entry pinning it, else
    ``ort-<release>`` from its own lock. An unknown release or a missing lock is a
    ConfigError naming it, raised before anything runs."""
    releases = known_releases()
    if release not in releases:
        raise ConfigError(f"{RELEASES}: onnxruntime {release!r} is not a release the kit "
                          f"knows (no cp311 CPU wheel listed); known: {', '.join(releases)}")
    named = [rt for rt in load_runtimes().values() if rt.onnxruntime == release]
    if named:
        return named[0]
    lock = release_lock(release)
    if not lock.is_file():
        raise ConfigError(f"{lock}: no lock for onnxruntime {release}; write it with "
                          f"`python -m kit.runtime.releases lock {release}`")
    _check_lock(f"ort-{release}", lock, release)
    return Runtime(name=f"ort-{release}", description=f"onnxruntime {release}",
                   onnxruntime=release, lock=lock, dockerfile=ROOT / "Dockerfile.release",
                   image=f"kit-ort:{release}", graph_optimization="disable_all")


def get_runtime(name: str) -> Runtime:
    """The runtime called ``name``: ``ref``, ``cand`` or ``ort-<release>``."""
    if name.startswith("ort-"):
        return release_runtime(name.removeprefix("ort-"))
    runtimes = load_runtimes()
    if name not in runtimes:
        raise ConfigError(f"{CONFIG}: no runtime {name!r}; known: {sorted(runtimes)} "
                          "and ort-<release> for every release of releases.toml")
    return runtimes[name]
