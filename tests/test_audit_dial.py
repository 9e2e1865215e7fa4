"""``kit audit --dial`` (``kit.audit.dial``): each step of the dial moves the ``from`` side's
outputs by a known size at their clean scale; the audit's verdict and Polygraphy's default
comparison judge every step. The two differ where ``docs/audit.md`` says: an output whose
scale is far under Polygraphy's absolute tolerance is never flagged by Polygraphy, and a
change between Polygraphy's tolerance and a hundred times the clean drift is flagged by
Polygraphy only."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml

from kit.audit.calibrate import output_scale
from kit.audit.dial import KINDS, SIZES, changed, dial, smallest
from kit.paths import ROOT
from tests.test_audit import PAIR, audit


def _alarm() -> dict[str, float]:
    """The frozen protocol's alarm rule (margin, floor, matched false-alarm rate)."""
    return yaml.safe_load((ROOT / "kit" / "protocols" / "audit.yaml").read_text())["alarm"]


def _pairs(truth: np.ndarray, drift: float) -> list[tuple[np.ndarray, np.ndarray]]:
    """Four clean pairs whose largest score is ``drift`` at the output's scale."""
    return [(truth, changed(truth, "every element", drift, output_scale(truth)))
            for _ in range(4)]


@pytest.mark.parametrize("kind", KINDS)
def test_each_change_moves_what_it_says_by_its_size(kind: str) -> None:
    truth = np.random.default_rng(0).standard_normal((16, 10)).astype(np.float64)
    moved = changed(truth, kind, 1e-3, 2.0)
    delta = np.abs(moved - truth)
    assert np.allclose(delta[delta > 0], 2e-3)
    rows = (delta > 0).any(axis=1)
    expected = {"every element": (16, 160), "one element per input": (16, 16),
                "one input": (1, 10)}[kind]
    assert (int(rows.sum()), int((delta > 0).sum())) == expected


def test_polygraphy_misses_an_output_far_under_its_tolerance_the_audit_does_not() -> None:
    truth = (1e-6 * np.random.default_rng(1).standard_normal((16, 10))).astype(np.float32)
    rows = dial(_pairs(truth, 1e-7), truth, 8, _alarm(), "y")
    assert len(rows) == len(KINDS) * len(SIZES)
    first = smallest(rows)["y: every element"]
    assert first == {"audit": 1e-4, "polygraphy": None}


def test_between_polygraphys_tolerance_and_a_hundred_times_clean_drift_only_polygraphy_flags(
        ) -> None:
    truth = (6 * np.random.default_rng(2).standard_normal((16, 10))).astype(np.float32)
    rows = dial(_pairs(truth, 4e-7), truth, 8, _alarm(), "y")
    first = smallest(rows)["y: every element"]
    assert first["audit"] == 1e-4  # a hundred times the clean drift, the next step up
    assert first["polygraphy"] is not None
    assert first["polygraphy"] < first["audit"]
    # a step below float32's rounding at this scale changes nothing, and neither flags it
    [tiny] = [r for r in rows if r["kind"] == "every element" and r["size"] == 1e-8]
    assert tiny["elements_changed"] < tiny["elements"]


def test_an_integer_output_has_no_dial() -> None:
    truth = np.arange(32, dtype=np.int64).reshape(16, 2)
    assert dial([(truth, truth)], truth, 8, _alarm(), "k") == []


def test_the_audit_reports_its_dial(convnet_onnx: Path, tmp_path: Path) -> None:
    inputs = tmp_path / "x.npz"
    x = np.random.default_rng(0).standard_normal((8, 3, 32, 32)).astype(np.float32)
    np.savez(inputs, **{onnx.load(str(convnet_onnx)).graph.input[0].name: x})
    out = tmp_path / "report"
    proc = audit(str(convnet_onnx), "--inputs", str(inputs), "--from", PAIR[0], "--to",
                 PAIR[1], "--out", str(out), "--workers", "1", "--dial")
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads((out / "audit.json").read_text())
    [name] = record["outputs"]
    assert len(record["dial"]) == len(KINDS) * len(SIZES)
    assert {r["output"] for r in record["dial"]} == {name}
    biggest = [r for r in record["dial"] if r["size"] == SIZES[-1]]
    assert {r["audit"] for r in biggest} == {"beyond clean drift"}
    assert "How large a change each judge sees (--dial)" in (out / "index.html").read_text()


def test_with_a_hundred_inputs_a_change_on_one_is_polygraphys_alone() -> None:
    truth = (6 * np.random.default_rng(3).standard_normal((100, 10))).astype(np.float32)
    rows = dial(_pairs(truth, 4e-7), truth, 50, _alarm(), "y")
    first = smallest(rows)
    assert first["y: one input"]["audit"] is None  # 1 of 100 is the matched 1%, not above
    assert first["y: one input"]["polygraphy"] is not None
    assert first["y: every element"]["audit"] == 1e-4
