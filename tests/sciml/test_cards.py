"""One definition per tolerance: a card that sets a fixed tolerance (``tolerance.value``) is
the only place the number is written; the studies read it from the card and the recompute
side reads the tolerance recorded with each verdict. Covers kit/sciml/cards.py's
``fixed_tolerance``, kit/sciml/stats.py's ``rate`` and ``clopper_pearson`` and
kit/sciml/recompute_mgn.py's ``recorded_tolerance``."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from kit.errors import ConfigError, KitError
from kit.sciml import mgn_faults, mgn_study, pinn, pipeline, probes, recompute_mgn
from kit.sciml.cards import CARDS, fixed_tolerance, load_cards, tolerance_fraction
from kit.sciml.stats import clopper_pearson, rate, wilson

SCIML = Path(mgn_study.__file__).parent


def card_values() -> dict[str, float]:
    return {name: float(c["tolerance"]["value"]) for name, c in load_cards().items()
            if "value" in c["tolerance"]}


def test_the_fixed_tolerances_are_the_cards_values() -> None:
    values = card_values()
    assert values["mgn-node-permutation"] == mgn_study.PERMUTATION_TOLERANCE == 1.0e-5
    assert mgn_faults.PERMUTATION_THRESHOLD == probes.PERMUTATION_THRESHOLD == 1.0e-5
    assert mgn_faults.CONSERVATION_THRESHOLD == 1 + values["mgn-continuity-guard"] == 1.5
    assert pipeline.ABSOLUTE_TOLERANCE == values["p1-divergence-absolute"] == 0.05
    assert values["pinn-collocation-permutation"] == float(np.finfo(np.float64).eps)


def test_the_measured_tolerances_take_their_fraction_from_the_cards() -> None:
    from kit.sciml import second_task

    assert mgn_study.ABSOLUTE_FRACTION == tolerance_fraction("mgn-continuity-absolute") == 0.01
    assert second_task.MASS_FRACTION == tolerance_fraction("cmp-mass-conservation") == 0.01
    with pytest.raises(ConfigError, match=r"mgn-mirror-y\.yaml: tolerance\.fraction is not set"):
        tolerance_fraction("mgn-mirror-y")


def test_pinn_py_keeps_its_copies_equal_to_the_cards() -> None:
    # pinn.py's bytes are the PINN training cache key, so its two constants stay where they
    # were; the study judges with the cards' values, and this keeps the copies honest.
    values = card_values()
    assert values["pinn-boundary-residual"] == pinn.BOUNDARY_FLOOR
    assert values["pinn-reference-conservation"] == pinn.CONSERVATION_TOLERANCE


def _float_literals(path: Path) -> set[float]:
    return {node.value for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, float)}


def test_no_sciml_module_writes_a_card_tolerance_as_a_literal() -> None:
    values = {v for v in card_values().values() if v not in (0.5, 0.05, 1.0e-2)} | {1.0e-5}
    # 0.5, 0.05 and 0.01 are common (fractions, midpoints); 1e-5 and epsilon are not.
    allowed = {"cylinder.py": {1.0e-5},  # phiflow's pressure-solve tolerance, not a card's
               "pinn.py": set()}
    found = {p.name: _float_literals(p) & values for p in sorted(SCIML.glob("*.py"))}
    offenders = {name: hits for name, hits in found.items()
                 if hits - allowed.get(name, set())}
    assert offenders == {}


def test_a_card_without_a_fixed_tolerance_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"mgn-mirror-y\.yaml: tolerance\.value is not set"):
        fixed_tolerance("mgn-mirror-y")
    changed = tmp_path / "mgn-node-permutation.yaml"
    shutil.copy(CARDS / changed.name, changed)
    data = yaml.safe_load(changed.read_text())
    data["tolerance"]["value"] = 3.0e-4
    changed.write_text(yaml.safe_dump(data))
    assert fixed_tolerance("mgn-node-permutation", tmp_path) == 3.0e-4
    data["tolerance"]["value"] = "1e-5"  # PyYAML reads this as a string: the schema refuses it
    changed.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"mgn-node-permutation\.yaml"):
        fixed_tolerance.__wrapped__("mgn-node-permutation", tmp_path)


class FakeEvidence:
    def __init__(self, files: dict[str, Any]) -> None:
        self.root, self.files = Path("/evidence"), files

    def json(self, name: str) -> Any:
        return self.files[name]


def _evidence(tolerances: list[float]) -> FakeEvidence:
    case = {"trajectory": "train", "frame": 1, "permutation_violations": [2.0e-6, 4.0e-6],
            "continuity_ratio": 1.25}
    verdicts = [{"card": "mgn-node-permutation", "tolerance": t} for t in tolerances]
    verdicts.append({"card": "mgn-continuity-guard", "tolerance": 0.5})
    return FakeEvidence({"mgn.json": {"subjects": [{"arch": "mgn", "seed": 0,
                                                   "cases": [case]}]},
                         "ledger.json": {"verdicts": verdicts}})


def test_recompute_divides_by_the_tolerance_recorded_with_the_verdicts() -> None:
    assert recompute_mgn.mgn_metric(_evidence([1.0e-5]), "permutation_v_tol", "max") \
        == pytest.approx(0.4)
    assert recompute_mgn.mgn_metric(_evidence([2.0e-5]), "permutation_v_tol", "max") \
        == pytest.approx(0.2)
    assert recompute_mgn.mgn_metric(_evidence([1.0e-5]), "continuity_v_tol", "max") \
        == pytest.approx(0.5)
    with pytest.raises(KitError, match="verdicts record 2 tolerances"):
        recompute_mgn.mgn_metric(_evidence([1.0e-5, 2.0e-5]), "permutation_v_tol", "max")


def test_rate_records_and_intervals() -> None:
    assert rate(3, 10) == {"count": 3, "n": 10, "value": 0.3, "wilson95": list(wilson(3, 10))}
    assert rate(3, 10, count="detected", value=False) == {
        "detected": 3, "n": 10, "wilson95": list(wilson(3, 10))}
    assert rate(0, 0) == {"count": 0, "n": 0, "value": None, "wilson95": None}
    low, high = clopper_pearson(10, 14)
    assert low < wilson(10, 14)[0]  # the exact interval is the wider one
    assert high > wilson(10, 14)[1]
    assert (round(low, 3), round(high, 3)) == (0.419, 0.916)
