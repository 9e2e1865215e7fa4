"""MR cards: YAML files validated against ``kit/schemas/mr_card.schema.json``.

A card records a candidate relation before any execution: its source category and level,
basis, source-case schema, transformation, preconditions, boundary compatibility, output
mapping, metric, tolerance with its provenance, expected verdicts, exclusion rules,
artifact schema and what a violation would mean.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator

from kit.errors import ConfigError

SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "mr_card.schema.json"
CARDS = Path(__file__).with_name("cards")


def validate_card(card: Any, source: Path) -> dict[str, Any]:
    """The card if it satisfies the schema; ConfigError naming the file and field if not."""
    validator = Draft202012Validator(json.loads(SCHEMA.read_text()))
    errors = sorted(validator.iter_errors(card), key=lambda e: list(e.absolute_path))
    if errors:
        where = "/".join(str(p) for p in errors[0].absolute_path) or "(top)"
        raise ConfigError(f"{source}: {where}: {errors[0].message}")
    assert isinstance(card, dict)
    return card


def load_card(path: Path) -> dict[str, Any]:
    """Read and validate one MR card."""
    try:
        card = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read the MR card ({exc})") from exc
    card = validate_card(card, path)
    if card["id"] != path.stem:
        raise ConfigError(f"{path}: card id {card['id']!r} must match the file name")
    return card


def load_cards(folder: Path = CARDS) -> dict[str, dict[str, Any]]:
    """Every card of a folder by id."""
    return {path.stem: load_card(path) for path in sorted(folder.glob("*.yaml"))}
