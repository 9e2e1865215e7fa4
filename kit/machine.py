"""The machine fingerprint recorded with the evidence: byte identity holds per machine
(CPU kernels differ between instruction sets), so the evidence says which machine."""

from __future__ import annotations

import hashlib
import platform
from pathlib import Path
from typing import Any

ISA = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_vnni", "amx_tile", "neon", "asimd")


def _cpuinfo() -> tuple[str, list[str]]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown", []
    model, flags = "unknown", list[str]()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "Model") and model == "unknown":
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = sorted(value.split())
    return model, flags


def cpu_flags() -> list[str]:
    """Every flag the CPU reports (``/proc/cpuinfo``), sorted; empty where it cannot be read."""
    return _cpuinfo()[1]


def fingerprint() -> dict[str, Any]:
    """CPU model, instruction-set flags that select kernels, OS and architecture."""
    model, flags = _cpuinfo()
    return {"machine": platform.machine(), "system": platform.system(), "cpu": model,
            "isa": [f for f in ISA if f in flags],
            "cpu_flags_sha256": hashlib.sha256(" ".join(flags).encode()).hexdigest()}
