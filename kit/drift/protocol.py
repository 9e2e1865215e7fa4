"""The frozen protocol (YAML) of the drift study, validated against its JSON Schema.

``kit/protocols/drift.yaml`` holds every choice with its reason; ``load_protocol``
validates it (``kit/schemas/protocol.schema.json``, draft 2020-12) and then checks what a
schema cannot say (sizes that must add up, distinct seeds, monotone severity grids, an
epoch count for every model, an interval that matches alpha). Every field is used by what
runs or refused (the schema's description lists how); ``session_threads`` carries the
runtimes' thread counts into every inference job.
A protocol is read through ``kit.files.read_yaml``: bytes that are not UTF-8, malformed
YAML and any anchor or alias are refused naming the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kit import schema
from kit.errors import ConfigError
from kit.files import read_yaml, write_atomic

PROTOCOL = Path(__file__).resolve().parents[1] / "protocols" / "drift.yaml"
SCHEMA = schema.SCHEMAS / "protocol.schema.json"


def _cross_checks(protocol: dict[str, Any], source: Path) -> None:
    sample = protocol["sample"]
    if sample["calibration"] + sample["heldout"] != sample["size"]:
        raise ConfigError(f"{source}: sample: calibration + heldout must equal size")
    for role in ("calibration", "heldout"):
        if sample["reduced"][role] > sample[role]:
            raise ConfigError(f"{source}: sample/reduced/{role} exceeds sample/{role}")
    missing = [m for m in protocol["models"] if m not in protocol["training"]["epochs"]]
    if missing:
        raise ConfigError(f"{source}: training/epochs: no epoch count for {missing}")
    boot = protocol["bootstrap"]
    if abs(boot["interval"] - (1 - boot["alpha"])) > 1e-9:
        raise ConfigError(f"{source}: bootstrap/interval: {boot['interval']} is not "
                          f"1 - alpha ({1 - boot['alpha']:g}); the intervals are read from alpha")
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


def session_threads(protocol: dict[str, Any]) -> dict[str, int]:
    """The onnxruntime session's thread counts every inference job of the drift study runs
    with (``runtimes.intra_op_threads`` / ``inter_op_threads``)."""
    runtimes = protocol["runtimes"]
    return {"intra_op_threads": int(runtimes["intra_op_threads"]),
            "inter_op_threads": int(runtimes["inter_op_threads"])}


def load_protocol(path: Path = PROTOCOL) -> dict[str, Any]:
    """Read, validate and cross-check a protocol; errors name the file and the field."""
    protocol = read_yaml(path)
    schema.check(protocol, SCHEMA.name, path, ConfigError)
    assert isinstance(protocol, dict)
    _cross_checks(protocol, path)
    return protocol


def write_small_protocol(path: Path, substrate: str = "digits", size: int | None = None
                         ) -> Path:
    """The frozen protocol cut down to a configuration that runs in minutes on two cores:
    three severities per family and a small sample, ``size`` images (default 20 on
    ``digits``, 200 on ``cifar100``: two per class, the fewest the class-balanced split
    allows over 100 classes), half calibration, half held-out, the reduced split half of
    each role. On ``digits`` one model (ResNet-20, one training epoch); on ``cifar100`` the
    three published models, since that substrate's claims name each of them. The tests'
    tiny runs and ``verify --replay --small`` use it; nothing of it is a result of the
    study."""
    protocol: dict[str, Any] = read_yaml(PROTOCOL)
    if substrate not in protocol["substrates"]:
        raise ConfigError(f"{PROTOCOL}: no substrate {substrate!r} for the small protocol")
    protocol["substrate_default"] = substrate
    if substrate == "digits":
        protocol["models"] = ["resnet20"]
        protocol["training"]["epochs"] = {"resnet20": 1}
    n = size or {"digits": 20, "cifar100": 200}[substrate]
    half = n // 2
    protocol["sample"].update(size=n, calibration=half, heldout=n - half,
                              reduced={"calibration": (half + 1) // 2,
                                       "heldout": (n - half + 1) // 2})
    protocol["faults"]["severity_grids"] = {"scale": [1e-7, 1e-5, 1e-3],
                                            "noise": [1e-7, 1e-5, 1e-3], "quantise": [22, 12, 6]}
    protocol["faults"]["severity_rule"]["high_step"] = 1
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, yaml.safe_dump(protocol).encode())
    load_protocol(path)
    return path
