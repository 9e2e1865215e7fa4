"""A retrained value judged against the study's own seed-to-seed spread.

After ``--models train`` on a CPU other than the evidence machine's, the trained subjects
are other weights, so their records cannot replay byte for byte or within a kernel
tolerance. The science question is whether the retrain moved a value by more than the
study's own seeds differ among themselves. The rosters and checkpoint lists train many
seeds, and their records are JSON lists of per-seed (or per-trial) entries, so for each
value that moved the spread is read off the shipped record itself: the value at the same
path in every sibling entry of the innermost list around it that holds at least
``MIN_SEEDS`` of them.

- a number is within the spread when it moved by at most max - min of its siblings, or
  by no more than the file's replay bound admits (``kit.tolerance.Bound.admits``: a
  rounding-level move of a value whose seeds all agree to the last bit is no finding);
- a flag or a word (a ``detected`` flag, a verdict type) is within it when the siblings
  themselves take the fresh value (the outcome already varies from seed to seed);
- a value in no such list has no spread, and a change of structure (keys, lengths, types)
  is never within one: both are named.

The status diff stays the decisive line (``kit.claims.fresh``): this only says, file by
file, whether a retrain stayed inside the variation the study itself shows.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MIN_SEEDS = 3  # fewer siblings than this give no spread to judge against
Path_ = tuple[str | int, ...]


@dataclass
class Judged:
    """One file: how many values moved, and the first outside its spread (or none)."""

    moved: int = 0
    outside: str = ""  # the first value outside its spread, named
    detail: dict[str, Any] | None = None
    beyond: int = 0  # how many moved values are outside their spread
    admits: Callable[[float, float], bool] | None = None  # the file's replay bound

    @property
    def within(self) -> bool:
        return not self.outside


_MISSING = object()


def _holds(doc: Any, key: str | int) -> bool:
    if isinstance(doc, dict):
        return isinstance(key, str) and key in doc
    return isinstance(doc, list) and isinstance(key, int) and 0 <= key < len(doc)


def _at(doc: Any, path: Path_) -> Any:
    """The value at ``path``, or ``_MISSING``."""
    for key in path:
        if not _holds(doc, key):
            return _MISSING
        doc = doc[key]
    return doc


def siblings(doc: Any, path: Path_) -> list[Any]:
    """The values at ``path`` in every entry of the innermost list around it with at least
    ``MIN_SEEDS`` entries holding a value of the same kind there; empty when none."""
    leaf = _at(doc, path)
    for depth in range(len(path) - 1, -1, -1):
        if not isinstance(path[depth], int):
            continue
        around = _at(doc, path[:depth])
        if not isinstance(around, list):
            continue
        found = [_at(entry, path[depth + 1:]) for entry in around]
        found = [v for v in found if v is not _MISSING and _kind(v) == _kind(leaf)]
        if len(found) >= MIN_SEEDS:
            return found
    return []


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "flag"
    if isinstance(value, (int, float)):
        return "number"
    return type(value).__name__


def _name(path: Path_) -> str:
    return "/" + "/".join(str(p) for p in path) if path else "(top)"


def judge(shipped: Any, fresh: Any,
          admits: Callable[[float, float], bool] | None = None) -> Judged:
    """Every value of ``fresh`` that differs from ``shipped``, against its seed spread
    (or within the file's replay bound, ``admits``)."""
    judged = Judged(admits=admits)
    _walk(shipped, fresh, shipped, (), judged)
    return judged


def _walk(a: Any, b: Any, root: Any, path: Path_, judged: Judged) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        if sorted(a) != sorted(b):
            _outside(judged, f"keys of {_name(path)} changed", shipped=sorted(a),
                     fresh=sorted(b))
            return
        for key in sorted(a):
            if not key.endswith("sha256"):  # hashes of other files, judged themselves
                _walk(a[key], b[key], root, (*path, key), judged)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            _outside(judged, f"length of {_name(path)} changed", shipped=len(a), fresh=len(b))
            return
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _walk(x, y, root, (*path, i), judged)
    elif _kind(a) != _kind(b):
        _outside(judged, f"{_name(path)} changed type", shipped=a, fresh=b)
    elif a != b and not (_kind(a) == "number" and math.isnan(a) and math.isnan(b)):
        judged.moved += 1
        if _kind(a) == "number" and judged.admits is not None and \
                judged.admits(float(a), float(b)):
            return
        _judge_leaf(a, b, siblings(root, path), path, judged)


def _judge_leaf(a: Any, b: Any, seeds: list[Any], path: Path_, judged: Judged) -> None:
    where = _name(path)
    if not seeds:
        _outside(judged, f"{where} moved and has no seed spread (not in a list of "
                 f"{MIN_SEEDS} or more seeds)", shipped=a, fresh=b)
    elif _kind(a) == "number":
        finite = [float(v) for v in seeds if math.isfinite(float(v))]
        spread = max(finite) - min(finite) if finite else 0.0
        moved = abs(float(b) - float(a)) if math.isfinite(float(b)) else math.inf
        if not moved <= spread:
            _outside(judged, f"{where} moved by {moved:.3g}, outside its seed spread "
                     f"{spread:.3g} ({len(seeds)} seeds)", shipped=a, fresh=b,
                     moved=moved, spread=spread)
    elif b not in seeds:
        _outside(judged, f"{where} became {b!r}, a value none of its {len(seeds)} seeds "
                 "takes", shipped=a, fresh=b)


def _outside(judged: Judged, where: str, **detail: Any) -> None:
    judged.beyond += 1
    if not judged.outside:
        judged.outside, judged.detail = where, detail
