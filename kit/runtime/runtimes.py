"""The runtime configurations (``kit/runtimes.toml``): lock, image, optimisation level."""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass
from pathlib import Path

from kit.errors import ConfigError
from kit.paths import ROOT
from kit.runtime.locks import lock_requirements

CONFIG = Path(__file__).with_name("runtimes.toml")
GRAPH_LEVELS = ("disable_all", "enable_basic", "enable_extended", "enable_all")
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


def get_runtime(name: str) -> Runtime:
    """The runtime called ``name`` (``ref`` or ``cand``)."""
    runtimes = load_runtimes()
    if name not in runtimes:
        raise ConfigError(f"{CONFIG}: no runtime {name!r}; known: {sorted(runtimes)}")
    return runtimes[name]
