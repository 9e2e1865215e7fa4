"""MR cards: YAML files validated against ``kit/schemas/mr_card.schema.json``.

A card records a candidate relation before any execution: its source category and level,
basis, source-case schema, transformation, preconditions, boundary compatibility, output
mapping, metric, tolerance with its provenance, expected verdicts, exclusion rules,
artifact schema and what a violation would mean. Cards are read through
``kit.files.read_yaml``: no anchors or aliases, UTF-8 only.

A card whose tolerance is one fixed number carries it as ``tolerance.value``, and that is
the only place the number is written: the studies and the fault catalogue read it with
``fixed_tolerance``. A tolerance measured per case (a floor times the margin) has no value.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from kit import schema
from kit.errors import ConfigError
from kit.files import read_yaml

SCHEMA = schema.SCHEMAS / "mr_card.schema.json"
CARDS = Path(__file__).with_name("cards")


def validate_card(card: Any, source: Path) -> dict[str, Any]:
    """The card if it satisfies the schema; ConfigError naming the file and field if not."""
    schema.check(card, SCHEMA.name, source, ConfigError)
    assert isinstance(card, dict)
    return card


def load_card(path: Path) -> dict[str, Any]:
    """Read and validate one MR card."""
    card = validate_card(read_yaml(path), path)
    if card["id"] != path.stem:
        raise ConfigError(f"{path}: card id {card['id']!r} must match the file name")
    return card


def load_cards(folder: Path = CARDS) -> dict[str, dict[str, Any]]:
    """Every card of a folder by id."""
    return {path.stem: load_card(path) for path in sorted(folder.glob("*.yaml"))}


@cache
def tolerance_fraction(card_id: str, folder: Path = CARDS) -> float:
    """The fraction of a measured scale that card ``card_id``'s tolerance is
    (``tolerance.fraction``); ConfigError naming the card when it sets none."""
    path = folder / f"{card_id}.yaml"
    value = load_card(path)["tolerance"].get("fraction")
    if value is None:
        raise ConfigError(f"{path}: tolerance.fraction is not set")
    return float(value)


@cache
def fixed_tolerance(card_id: str, folder: Path = CARDS) -> float:
    """The fixed tolerance card ``card_id`` sets (``tolerance.value``); ConfigError naming
    the card when its tolerance is measured per case instead."""
    path = folder / f"{card_id}.yaml"
    value = load_card(path)["tolerance"].get("value")
    if value is None:
        raise ConfigError(f"{path}: tolerance.value is not set (this card's tolerance is "
                          "measured per case)")
    return float(value)
