"""Which release moved: ``kit audit --bisect`` after an audit found the move beyond clean
drift.

The releases the kit locks between FROM and TO (``kit/runtime/releases.toml``, in version
order, at TO's level) are searched by halves: each visited release is audited from FROM
exactly as the main audit (its clean pairs, its calibration, its verdict,
``kit.audit.command.measure``), and the search keeps the first release whose verdict is
``beyond clean drift``, in about log2 of the releases between in audits. It assumes the
move, once made, stays (a defect fixed and brought back between FROM and TO is found at
one of its ends only; the visited table shows what was seen). The result names that
release, the first node that moved there, and the corpus cases whose screen status
changes at it (fixed or affected from that release on).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kit.audit.model import Cell

Measure = Callable[[Cell, Path], dict[str, Any]]  # (TO-side cell, its work folder) -> audit


def _version(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


def between(source: Cell, target: Cell, releases: list[str]) -> list[str]:
    """The releases after FROM's up to TO's, in version order."""
    low, high = _version(source.release), _version(target.release)
    return sorted((r for r in releases if low < _version(r) <= high), key=_version)


def bisect(source: Cell, target: Cell, releases: list[str], measure: Measure, folder: Path,
           known: Callable[[Cell], list[dict[str, Any]]]) -> dict[str, Any]:
    """The first release between FROM and TO whose audit from FROM is beyond clean drift
    (TO's own verdict is taken as found), every release visited with its verdict."""
    order = between(source, target, releases)
    visited: dict[str, dict[str, Any]] = {}
    low, high = -1, len(order) - 1  # order[high] is beyond (the main audit's TO)
    while high - low > 1:
        mid = (low + high) // 2
        cell = Cell(order[mid], target.level, target.threads)
        work = folder / order[mid]
        work.mkdir(parents=True)
        found = measure(cell, work)
        visited[order[mid]] = {"verdict": found["verdict"], "why": found["why"],
                               "first_moving": found.get("first_moving"),
                               **({"unlocalised": found["unlocalised"]}
                                  if "unlocalised" in found else {})}
        if found["verdict"] == "beyond clean drift":
            high = mid
        else:
            low = mid
    first = order[high] if order else target.release
    cell = Cell(first, target.level, target.threads)
    cases = [row["case"] for row in known(cell) if row["to"] != row["from"]]
    return {"first_release": first, "releases_between": len(order),
            "audits": len(visited), "visited": [{"release": r, **v}
                                                for r, v in sorted(visited.items(),
                                                                   key=lambda i: _version(i[0]))],
            "first_moving": visited.get(first, {}).get("first_moving"),
            "unlocalised": visited.get(first, {}).get("unlocalised"),
            "known_cases_changing_there": cases}
