"""What a recompute function returns, and the two functions both studies' ledgers name:
``constant`` (a bound the ledger states) and ``recorded`` (a value a run wrote, the other
side of an ``agrees`` rule). The drift and SciML recompute registries import them from
here, so neither study imports the other."""

from __future__ import annotations

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
