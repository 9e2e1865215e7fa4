"""The three architectures against the checkpoints' key list, and the strict loader."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from kit.drift.models import build_model, conv_names, load_checkpoint
from kit.errors import KitError

KEYS = Path(__file__).resolve().parents[1] / "data" / "chenyaofo_cifar100_state_dict_keys.txt"
NAMES = {"resnet20": "resnet20", "mobilenetv2_x0_5": "mobilenetv2_x0_5",
         "vgg11_bn": "vgg11_bn"}


def reference_keys() -> dict[str, dict[str, list[int]]]:
    """Parse the key list: '# model' headers, then '  key [shape]' lines."""
    tables: dict[str, dict[str, list[int]]] = {}
    current = None
    for line in KEYS.read_text().splitlines():
        if line.startswith("# ") and line[2:].strip() in NAMES:
            current = line[2:].strip()
            tables[current] = {}
        elif current and (match := re.match(r"^\s+(\S+) \[([\d, ]*)\]$", line)):
            dims = match.group(2).replace(" ", "")
            tables[current][match.group(1)] = [int(d) for d in dims.split(",")] if dims else []
    return tables


def learnable(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_reference_key_list_parses() -> None:
    tables = reference_keys()
    assert {name: len(keys) for name, keys in tables.items()} == \
        {"resnet20": 128, "mobilenetv2_x0_5": 314, "vgg11_bn": 62}


@pytest.mark.parametrize("name", sorted(NAMES))
def test_state_dict_keys_and_shapes_match_the_checkpoints(name: str) -> None:
    model = build_model(name, 100)
    ours = {k: list(v.shape) for k, v in model.state_dict().items()}
    assert ours == reference_keys()[name]


@pytest.mark.parametrize(("name", "convs"), [("resnet20", 21), ("mobilenetv2_x0_5", 52),
                                             ("vgg11_bn", 8)])
def test_convolution_counts(name: str, convs: int) -> None:
    model = build_model(name, 10)
    assert len(conv_names(model)) == convs
    out = model.eval()(torch.zeros(2, 3, 32, 32))
    assert out.shape == (2, 10)


def test_parameter_counts_match_the_key_list_header() -> None:
    header = KEYS.read_text().splitlines()[:6]
    for name in NAMES:
        line = next(ln for ln in header if ln.startswith(f"== cifar100_{name}:"))
        published = int(re.search(r"learnable params ([\d,]+)", line).group(1).replace(",", ""))
        assert learnable(build_model(name, 100)) == published


def test_strict_loader_round_trips_and_names_bad_files(tmp_path: Path) -> None:
    torch.manual_seed(0)
    source = build_model("resnet20", 100)
    good = tmp_path / "good.pt"
    torch.save(source.state_dict(), good)
    loaded = load_checkpoint("resnet20", good)
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(loaded(x), source.eval()(x), rtol=0, atol=0)

    state = source.state_dict()
    missing = {k: v for k, v in state.items() if k != "fc.bias"}
    torch.save(missing, tmp_path / "missing.pt")
    with pytest.raises(KitError, match=r"missing\.pt: state_dict does not match resnet20: "
                                       r"missing \['fc\.bias'\]"):
        load_checkpoint("resnet20", tmp_path / "missing.pt")

    torch.save({**state, "fc2.weight": torch.zeros(1)}, tmp_path / "extra.pt")
    with pytest.raises(KitError, match=r"unexpected \['fc2\.weight'\]"):
        load_checkpoint("resnet20", tmp_path / "extra.pt")

    torch.save({**state, "fc.bias": torch.zeros(10)}, tmp_path / "shape.pt")
    with pytest.raises(KitError, match=r"shape\.pt: state_dict shapes do not match"):
        load_checkpoint("resnet20", tmp_path / "shape.pt")

    (tmp_path / "cut.pt").write_bytes(good.read_bytes()[:100])
    with pytest.raises(KitError, match=r"cut\.pt: not a loadable weights-only checkpoint"):
        load_checkpoint("resnet20", tmp_path / "cut.pt")


def test_loader_refuses_pickled_code(tmp_path: Path) -> None:
    class Payload:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (print, ("code ran",))

    torch.save({"x": Payload()}, tmp_path / "evil.pt")
    with pytest.raises(KitError, match=r"evil\.pt: not a loadable weights-only"):
        load_checkpoint("resnet20", tmp_path / "evil.pt")
