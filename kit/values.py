"""What a recompute function returns, and the two functions both studies' ledgers name:
``constant`` (a bound the ledger states) and ``recorded`` (a value a run wrote, the other
side of an ``agrees`` rule). The drift and SciML recompute registries import them from
here, so neither study imports the other."""

from __future__ import annotations

import math
from typing import Any

from kit.errors import KitError

Value = float | int | bool | list[float] | str


def constant(ev: Any, value: Value) -> Value:
    """A bound the ledger states (never a result): for rules such as 'below 10 x'.
    Both studies' ledgers name it (``drift.constant``, ``sciml.constant_value``)."""
    del ev
    return value


def recorded(ev: Any, file: str, path: str) -> Value:
    """A value the run recorded in one of its JSON files (``path`` dotted, list indexes as
    numbers): the other side of an ``agrees`` rule, which checks that the number
    recomputed from the raw per-case evidence is the number the run reported. Both
    studies' ledgers name it (``drift.recorded``, ``sciml.recorded``)."""
    value: Any = ev.json(file)
    for key in path.split("."):
        try:
            value = value[int(key)] if isinstance(value, list) else value[key]
        except (KeyError, IndexError, ValueError) as exc:
            raise KitError(f"{ev.root / file}: no recorded value at {path!r}") from exc
    if isinstance(value, (dict, list)) and not (isinstance(value, list) and all(
            isinstance(v, (int, float)) for v in value)):
        raise KitError(f"{ev.root / file}: {path!r} is not a number or a list of numbers")
    return value  # type: ignore[no-any-return]


def contradictions(found: Any, expected: Any, where: str, source: str,
                   rel_tol: float = 1e-12) -> list[str]:
    """Recount, never read: every place where a stored record (``found``) says other than
    its recount (``expected``, whose keys are the ones checked), as ``<where>/<key> says X,
    <source> give Y``; floats within ``rel_tol`` relative, everything else exactly and of
    the same type."""
    def inner(key: object) -> str:
        return f"{where}/{key}" if where else str(key)

    if isinstance(expected, dict):
        if not isinstance(found, dict):
            return [f"{where} is not an object; {source} give one"]
        return [p for k in sorted(expected)
                for p in contradictions(found.get(k), expected[k], inner(k), source, rel_tol)]
    if isinstance(expected, list) and isinstance(found, list) and len(found) == len(expected):
        return [p for i, (a, b) in enumerate(zip(found, expected, strict=True))
                for p in contradictions(a, b, inner(i), source, rel_tol)]
    if isinstance(expected, float) and isinstance(found, (int, float)) \
            and not isinstance(found, bool):
        if math.isfinite(expected) and math.isfinite(found):
            same = abs(found - expected) <= rel_tol * max(abs(expected), 1.0)
        else:  # an infinity only as itself, NaN only on both sides
            same = found == expected or (math.isnan(found) and math.isnan(expected))
    else:
        same = found == expected and type(found) is type(expected)
    return [] if same else [f"{where} says {str(found)[:80]}, {source} give {str(expected)[:80]}"]
