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
    hundred bytes) is refused before anything builds or walks it (no YAML document is
    constructed, no schema consulted); so is any alias at all."""
    from kit.__main__ import main
    from kit.errors import FileFormatError
    from tests.test_files import billion_laughs, nothing_walked

    path = tmp_path / "bomb.yaml"
    path.write_text(PROTOCOL.read_text() + billion_laughs())
    with nothing_walked() as walked:
        with pytest.raises(FileFormatError, match=r"bomb\.yaml: a YAML alias \(\*\) repeats "
                                                  r"the anchored \(&\) node at line \d+"):
            load_protocol(path)
        assert main(["verify", "--replay", "--protocol", str(path)]) == 2
    assert capsys.readouterr().err.startswith(f"kit: error: {path}: a YAML alias")
    assert not walked
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


BOUNDED = [
    (("seeds", "training"), 2**70, r"seeds/training: 1180591620717411303424 is greater than "
                                   r"the maximum of 4294967295"),
    (("seeds", "sample"), -1, r"seeds/sample: -1 is less than the minimum of 0"),
    (("training", "threads"), 10**12, r"training/threads: 1000000000000 is greater than the "
                                      r"maximum of 256"),
    (("training", "epochs", "resnet20"), 10**9, r"training/epochs/resnet20: 1000000000 is "
                                                r"greater than the maximum of 300"),
    (("training", "batch_size"), 10**6, r"training/batch_size: 1000000 is greater"),
    (("runtimes", "intra_op_threads"), 0, r"runtimes/intra_op_threads: 0 is less than"),
    (("runtimes", "inter_op_threads"), 257, r"runtimes/inter_op_threads: 257 is greater"),
    (("export", "opset"), 1000000, r"export/opset: 1000000 is greater than the maximum of 19"),
    (("rotation", "fill"), 256, r"rotation/fill: 256 is greater than the maximum of 255"),
    (("sample", "size"), 10**7, r"sample/size: 10000000 is greater than the maximum of 10000"),
    (("bootstrap", "nested_replicates"), 10**9, r"bootstrap/nested_replicates: 1000000000 is "
                                                r"greater"),
    (("instrumentation", "max_values"), 10**6, r"instrumentation/max_values: 1000000 is "
                                               r"greater"),
    (("version", ), 2, r"version: 1 was expected"),
]


@pytest.mark.parametrize(("field", "value", "message"), BOUNDED,
                         ids=["/".join(map(str, b[0])) + f"={b[1]}" for b in BOUNDED])
def test_a_value_out_of_bounds_is_refused_naming_file_and_field(
        field: tuple[str, ...], value: int, message: str, tmp_path: Path) -> None:
    protocol = yaml.safe_load(PROTOCOL.read_text())
    parent = protocol
    for key in field[:-1]:
        parent = parent[key]
    parent[field[-1]] = value
    with pytest.raises(ConfigError, match=r"p\.yaml: " + message):
        load_protocol(_write(tmp_path, protocol))


@pytest.mark.parametrize(("command", "made"), [
    (["reproduce"], "run"), (["stage", "fetch"], "run"),
    (["verify", "--replay"], "run-replay")])
def test_an_unbounded_protocol_is_refused_before_any_work(
        command: list[str], made: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``training.epochs: 10**9`` (a run that never ends) exits 2 at once with one line
    naming the file and the field, and no run folder is made."""
    from kit.__main__ import main

    protocol = yaml.safe_load(PROTOCOL.read_text())
    protocol["training"]["epochs"]["resnet20"] = 10**9
    path = _write(tmp_path, protocol)
    run = ["--run", str(tmp_path / "run")] if command[0] != "verify" else []
    assert main([*command, *run, "--protocol", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kit: error: {path}: training/epochs/resnet20: 1000000000 is "
                          "greater than the maximum of 300"), err
    assert "Traceback" not in err
    assert not (tmp_path / made).exists()


def test_every_model_needs_an_epoch_count_and_interval_matches_alpha(tmp_path: Path) -> None:
    protocol = yaml.safe_load(PROTOCOL.read_text())
    del protocol["training"]["epochs"]["vgg11_bn"]
    with pytest.raises(ConfigError, match=r"training/epochs: no epoch count for \['vgg11_bn'\]"):
        load_protocol(_write(tmp_path, protocol))
    protocol = yaml.safe_load(PROTOCOL.read_text())
    protocol["training"]["epochs"]["lenet"] = 3
    with pytest.raises(ConfigError, match=r"training/epochs: 'lenet' is not one of"):
        load_protocol(_write(tmp_path, protocol))
    protocol = yaml.safe_load(PROTOCOL.read_text())
    protocol["bootstrap"]["interval"] = 0.9
    with pytest.raises(ConfigError, match=r"bootstrap/interval: 0\.9 is not 1 - alpha \(0\.95\)"):
        load_protocol(_write(tmp_path, protocol))


def test_session_threads_come_from_the_protocol() -> None:
    from kit.drift.protocol import session_threads

    protocol = yaml.safe_load(PROTOCOL.read_text())
    assert session_threads(protocol) == {"intra_op_threads": 1, "inter_op_threads": 1}
    protocol["runtimes"].update(intra_op_threads=4, inter_op_threads=2)
    assert session_threads(protocol) == {"intra_op_threads": 4, "inter_op_threads": 2}
