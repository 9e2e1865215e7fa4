"""The frozen protocol: it validates, and malformed copies are refused by field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from kit.drift.protocol import PROTOCOL, SCHEMA, load_protocol
from kit.errors import ConfigError


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


def test_a_yaml_alias_bomb_in_a_protocol_is_refused_at_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A user's ``--protocol`` file holding a 'billion laughs' (9**9 scalars from a few
    hundred bytes) is refused before the schema walks it; so is any alias at all."""
    import time

    from kit.__main__ import main
    from kit.errors import FileFormatError
    from tests.test_files import billion_laughs

    path = tmp_path / "bomb.yaml"
    path.write_text(PROTOCOL.read_text() + billion_laughs())
    start = time.monotonic()
    with pytest.raises(FileFormatError, match=r"bomb\.yaml: a YAML alias \(\*\) repeats the "
                                              r"anchored \(&\) node at line \d+"):
        load_protocol(path)
    assert main(["verify", "--replay", "--protocol", str(path)]) == 2
    assert capsys.readouterr().err.startswith(f"kit: error: {path}: a YAML alias")
    assert time.monotonic() - start < 10
    flat = tmp_path / "flat.yaml"
    text = PROTOCOL.read_text()
    protocol = yaml.safe_load(text)
    grids = protocol["faults"]["severity_grids"]
    grids["noise"] = grids["scale"]  # yaml.safe_dump writes the shared list as an alias
    flat.write_text(yaml.safe_dump(protocol))
    assert "*id001" in flat.read_text()
    with pytest.raises(FileFormatError, match="anchors and aliases are refused"):
        load_protocol(flat)


def test_a_protocol_that_is_not_utf8_names_the_file(tmp_path: Path) -> None:
    from kit.errors import FileFormatError

    path = tmp_path / "p.yaml"
    path.write_bytes(PROTOCOL.read_bytes().replace(b"bilinear", b"bil\xefnear", 1))
    with pytest.raises(FileFormatError, match=r"p\.yaml: not UTF-8 text \(byte 0xef"):
        load_protocol(path)
