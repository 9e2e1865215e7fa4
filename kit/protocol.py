"""The frozen protocol (YAML) of the drift study, validated against its JSON Schema.

``kit/protocols/drift.yaml`` holds every choice with its reason; ``load_protocol``
validates it (``kit/schemas/protocol.schema.json``, draft 2020-12) and then checks what a
schema cannot say (sizes that must add up, distinct seeds, monotone severity grids).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator

from kit.errors import ConfigError

PROTOCOL = Path(__file__).with_name("protocols") / "drift.yaml"
SCHEMA = Path(__file__).with_name("schemas") / "protocol.schema.json"


def _where(path: Any) -> str:
    return "/".join(str(part) for part in path) or "(top)"


def _cross_checks(protocol: dict[str, Any], source: Path) -> None:
    sample = protocol["sample"]
    if sample["calibration"] + sample["heldout"] != sample["size"]:
        raise ConfigError(f"{source}: sample: calibration + heldout must equal size")
    for role in ("calibration", "heldout"):
        if sample["reduced"][role] > sample[role]:
            raise ConfigError(f"{source}: sample/reduced/{role} exceeds sample/{role}")
    seeds = list(protocol["seeds"].values())
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"{source}: seeds must be distinct, found {seeds}")
    grids = protocol["faults"]["severity_grids"]
    for family in ("scale", "noise"):
        if grids[family] != sorted(set(grids[family])):
            raise ConfigError(f"{source}: faults/severity_grids/{family} must increase strictly")
    if grids["quantise"] != sorted(set(grids["quantise"]), reverse=True):
        raise ConfigError(f"{source}: faults/severity_grids/quantise must decrease strictly "
                          "(fewer bits is more severe)")
    if protocol["faults"]["severity_rule"]["high_step"] >= min(len(g) for g in grids.values()):
        raise ConfigError(f"{source}: faults/severity_rule/high_step exceeds a severity grid")


def load_protocol(path: Path = PROTOCOL) -> dict[str, Any]:
    """Read, validate and cross-check a protocol; errors name the file and the field."""
    try:
        protocol = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read the protocol ({exc})") from exc
    validator = Draft202012Validator(json.loads(SCHEMA.read_text()))
    errors = sorted(validator.iter_errors(protocol), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        raise ConfigError(f"{path}: {_where(first.absolute_path)}: {first.message}"
                          + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""))
    assert isinstance(protocol, dict)
    _cross_checks(protocol, path)
    return protocol


def write_small_protocol(path: Path) -> Path:
    """The frozen protocol cut down to a configuration that runs in minutes on two cores:
    one model (ResNet-20, one training epoch), 20 images (10 + 10), three severities per
    family. The tests' tiny run and ``verify --replay --small`` use it; nothing of it is a
    result of the study."""
    protocol: dict[str, Any] = yaml.safe_load(PROTOCOL.read_text())
    protocol["models"] = ["resnet20"]
    protocol["sample"].update(size=20, calibration=10, heldout=10,
                              reduced={"calibration": 5, "heldout": 5})
    protocol["training"]["epochs"] = {"resnet20": 1}
    protocol["faults"]["severity_grids"] = {"scale": [1e-7, 1e-5, 1e-3],
                                            "noise": [1e-7, 1e-5, 1e-3], "quantise": [22, 12, 6]}
    protocol["faults"]["severity_rule"]["high_step"] = 1
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(protocol))
    load_protocol(path)
    return path
