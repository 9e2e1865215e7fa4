"""Hash-pinned lock files (``locks/*.lock``, written by pip-compile): every requirement
pinned with ``==`` and carrying its ``--hash=sha256:``. Read by the runtimes (which
onnxruntime a lock pins), by the environment builder (``kit.runtime.venvs``) and by
verify's check of its own interpreter (``kit.claims.installed``)."""

from __future__ import annotations

import re
from pathlib import Path

from kit.errors import ConfigError


def lock_requirements(lock: Path) -> dict[str, list[str]]:
    """Map each ``name==version`` pin of a lock to its sha256 hashes; every pin needs one."""
    try:
        text = lock.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{lock}: cannot read the lock file ({exc})") from exc
    joined = re.sub(r"\\\n", " ", text)
    pins: dict[str, list[str]] = {}
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "-")):
            continue
        pin = line.split()[0]
        if "==" not in pin:
            raise ConfigError(f"{lock}: {pin!r} is not pinned with ==")
        hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", line)
        if not hashes:
            raise ConfigError(f"{lock}: {pin} carries no --hash=sha256")
        pins[pin.lower()] = hashes
    if not pins:
        raise ConfigError(f"{lock}: no pinned requirement found")
    return pins
