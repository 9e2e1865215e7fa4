"""The frozen protocol: it validates, and malformed copies are refused by field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from kit.errors import ConfigError
from kit.protocol import PROTOCOL, SCHEMA, load_protocol


def _write(tmp_path: Path, protocol: dict[str, Any]) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(protocol))
    return path


def test_schema_is_valid_2020_12() -> None:
    Draft202012Validator.check_schema(json.loads(SCHEMA.read_text()))


def test_shipped_protocol_validates_and_matches_the_design() -> None:
    protocol = load_protocol()
    assert protocol["sample"]["size"] == 600
    assert protocol["rotation"]["primary"] == {"degrees": 10, "interpolation": "bilinear"}
    assert len(protocol["rotation"]["grid"]) == 4
    assert protocol["calibration"]["quantile"] == 0.99
    assert len(protocol["models"]) * 3 * len(protocol["faults"]["families"]) * 2 == 54


def test_schema_violation_names_file_and_field(tmp_path: Path) -> None:
    protocol = yaml.safe_load(PROTOCOL.read_text())
    protocol["rotation"]["primary"]["interpolation"] = "lanczos"
    with pytest.raises(ConfigError, match=r"p\.yaml: rotation/primary/interpolation: 'lanczos'"):
        load_protocol(_write(tmp_path, protocol))


def test_sizes_must_add_up(tmp_path: Path) -> None:
    protocol = yaml.safe_load(PROTOCOL.read_text())
    protocol["sample"]["heldout"] = 299
    with pytest.raises(ConfigError, match="calibration \\+ heldout must equal size"):
        load_protocol(_write(tmp_path, protocol))


def test_seeds_must_differ_and_grids_be_monotone(tmp_path: Path) -> None:
    protocol = yaml.safe_load(PROTOCOL.read_text())
    protocol["seeds"]["faults"] = protocol["seeds"]["sample"]
    with pytest.raises(ConfigError, match="seeds must be distinct"):
        load_protocol(_write(tmp_path, protocol))
    protocol = yaml.safe_load(PROTOCOL.read_text())
    protocol["faults"]["severity_grids"]["quantise"] = [16, 20, 24]
    with pytest.raises(ConfigError, match="quantise must decrease strictly"):
        load_protocol(_write(tmp_path, protocol))


def test_unknown_keys_are_refused(tmp_path: Path) -> None:
    protocol = yaml.safe_load(PROTOCOL.read_text())
    protocol["tuned_on_heldout"] = True
    with pytest.raises(ConfigError, match="Additional properties are not allowed"):
        load_protocol(_write(tmp_path, protocol))
