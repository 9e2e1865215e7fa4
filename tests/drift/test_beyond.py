"""A comparison of two detectors' detection rates that the control null passes too is asked
whether the finding exceeds the null (``kit.drift.beyond``): kept when the faults lift the
first detector above the second on far more held-out images than the controls do, ``by
design`` when the faults change nothing the controls do not already give; which rules are
such comparisons; and a comparison of two values equal to the last bits is a tie
(``kit.claims.rules.TIE``)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from kit.claims.null import against_null
from kit.claims.rules import decide
from kit.drift.analysis import CLEAN
from kit.drift.beyond import Pair, exceeds, pair, upper_tail
from kit.drift.shipped import SCORES, controls_in_place
from tests.conftest import synthetic_table

RATE = {"function": "drift.rate", "args": {"detector": "direct"}}
META = {"function": "drift.rate", "args": {"detector": "metamorphic"}}


@pytest.mark.parametrize(("rule", "compute", "expected"), [
    ({"rule": "compare", "op": "gt", "than": META}, RATE, Pair("direct", "metamorphic")),
    ({"rule": "compare", "op": "lt", "than": RATE}, META, Pair("direct", "metamorphic")),
    ({"rule": "compare", "op": "gt", "than": {**META, "args": {**META["args"], "model": "m1"}}},
     {**RATE, "args": {**RATE["args"], "model": "m1", "count": True}},
     Pair("direct", "metamorphic", model="m1")),
    ({"rule": "compare", "op": "lt", "than": {"function": "drift.geometry",
                                              "args": {"field": "stable/maximum"}}},
     {"function": "drift.geometry", "args": {"field": "stable/metamorphic"}},
     Pair("maximum", "metamorphic", group="stable")),
    ({"rule": "compare", "op": "gt", "than": {"function": "drift.cell_rate", "args": {
        "detector": "metamorphic", "position": "late", "family": "scale", "level": "low"}}},
     {"function": "drift.cell_rate", "args": {
         "detector": "direct", "position": "late", "family": "scale", "level": "low"}},
     Pair("direct", "metamorphic", cell=("late", "scale", "low"))),
    ({"rule": "sign", "sign": "negative"},
     {"function": "drift.rate_difference", "args": {"a": "metamorphic", "b": "direct"}},
     Pair("direct", "metamorphic")),
    ({"rule": "sign", "sign": "negative"},
     {"function": "drift.boot", "args": {"which": "fixed", "quantity": "metamorphic-direct/tpr",
                                         "stat": "p97_5"}}, Pair("direct", "metamorphic")),
    ({"rule": "sign", "sign": "negative"},  # Table 4: metamorphic minus direct TPR
     {"function": "drift.grid", "args": {"condition": "rot5-bilinear", "field": "difference"}},
     Pair("direct", "metamorphic", condition="rot5-bilinear")),
    ({"rule": "compare", "op": "lt", "than": {"function": "drift.grid", "args": {
        "condition": "primary", "field": "direct/tpr"}}},
     {"function": "drift.grid", "args": {"condition": "primary", "field": "metamorphic/tpr"}},
     Pair("direct", "metamorphic", condition="primary")),
    ({"rule": "compare", "op": "gt", "than": {"function": "drift.grid", "args": {
        "condition": "rot5-bilinear", "field": "top1/metamorphic"}}},
     {"function": "drift.grid", "args": {"condition": "rot5-bilinear", "field": "top1/direct"}},
     Pair("direct", "metamorphic", condition="rot5-bilinear", stat="top1")),
    ({"rule": "compare", "op": "lt", "than": {"function": "drift.localisation", "args": {
        "kind": "maximum", "stat": "mrr"}}},
     {"function": "drift.localisation", "args": {"kind": "metamorphic", "stat": "mrr"}},
     Pair("maximum", "metamorphic", stat="mrr")),
    ({"rule": "sign", "sign": "positive"},
     {"function": "drift.localisation_difference", "args": {"a": "direct", "b": "metamorphic"}},
     Pair("direct", "metamorphic", stat="top1")),
])
def test_a_comparison_of_two_detection_rates_is_read_as_its_pair(
        rule: dict[str, Any], compute: dict[str, Any], expected: Pair) -> None:
    assert pair(rule, compute) == expected


@pytest.mark.parametrize(("rule", "compute"), [
    ({"rule": "compare", "op": "gt", "than": {"function": "drift.auc", "args": {
        "detector": "metamorphic", "which": "auprc"}}},
     {"function": "drift.auc", "args": {"detector": "direct", "which": "auprc"}}),
    ({"rule": "compare", "op": "gt", "than": {**META, "args": {**META["args"], "what": "fpr"}}},
     {**RATE, "args": {**RATE["args"], "what": "fpr"}}),
    ({"rule": "compare", "op": "gt", "than": {**META, "args": {**META["args"], "model": "m1"}}},
     RATE),  # not the same cases
    ({"rule": "compare", "op": "le", "than": {"function": "drift.constant",
                                              "args": {"value": 27}}}, META),
    ({"rule": "sign", "sign": "negative"},  # a lower end below zero says no direction
     {"function": "drift.boot", "args": {"which": "fixed", "quantity": "metamorphic-direct/tpr",
                                         "stat": "p2_5"}}),
    ({"rule": "compare", "op": "gt", "than": {"function": "drift.localisation", "args": {
        "kind": "direct", "stat": "top1", "model": "mobilenetv2_x0_5"}}},  # two models
     {"function": "drift.localisation", "args": {"kind": "direct", "stat": "top1",
                                                 "model": "vgg11_bn"}}),
    ({"rule": "compare", "op": "gt", "than": {"function": "drift.grid", "args": {
        "condition": "primary-reduced", "field": "metamorphic/tpr"}}},  # a restricted table
     {"function": "drift.grid", "args": {"condition": "primary-reduced",
                                         "field": "direct/tpr"}}),
    ({"rule": "compare", "op": "le", "than": {"function": "drift.grid", "args": {
        "condition": "rot20-bilinear", "field": "metamorphic/fpr"}}},
     {"function": "drift.grid", "args": {"condition": "rot20-bilinear", "field": "direct/fpr"}}),
])
def test_anything_else_is_left_to_the_plain_rule(rule: dict[str, Any],
                                                 compute: dict[str, Any]) -> None:
    assert pair(rule, compute) is None


def _sides(lift: float) -> tuple[Any, Any]:
    """An evidence whose fault cases are their controls' scores, with direct L2 lifted by
    ``lift`` on every fault case, and its control null."""
    table, _ = synthetic_table(seed=5, n_held=60)
    table = controls_in_place(table, "t")
    fault = table["fault"] != CLEAN
    table = {k: np.array(v) for k, v in table.items()}
    table["e_o_norm"][fault] += lift
    codes = {"models": ["m0", "m1"], "positions": ["a", "b", "c"],
             "families": ["x", "y", "z"], "levels": ["low"]}
    evidence = SimpleNamespace(table=lambda *_: table, quantile=0.99, record={"codes": codes})
    null_table = controls_in_place(table, "t")
    return evidence, SimpleNamespace(table=lambda *_: null_table)


def test_faults_that_lift_direct_exceed_the_null() -> None:
    evidence, null = _sides(lift=50.0)
    found, words = exceeds(Pair("direct", "metamorphic"), evidence, null)  # type: ignore
    assert found
    up = int(words.split()[1])
    assert up >= 100
    assert words.startswith(f"on {up} of 120 held-out images the faults lift "
                                          "direct above metamorphic")
    assert "on 0 less" in words
    assert not exceeds(Pair("metamorphic", "direct"), evidence, null)[0]  # type: ignore
    one = exceeds(Pair("direct", "metamorphic", model="m1"), evidence, null)  # type: ignore
    assert one[0]
    assert " of 60 held-out images" in one[1]


def test_layers_the_faults_rank_first_under_direct_scoring_exceed_the_null() -> None:
    """A localisation comparison counts top-1 hits, top-3 hits or reciprocal ranks of the
    faulted layer: the finding ranks it first under direct scoring and fifth under
    metamorphic; the null ranks it third under both."""
    evidence, null = _sides(lift=0.0)
    table, controls = evidence.table(), null.table()
    fault = table["fault"] != CLEAN
    for column, rank in (("rank_direct", 1), ("rank_metamorphic", 5), ("rank_maximum", 2)):
        table[column] = np.where(fault, rank, 0).astype(np.int16)
        controls[column] = np.where(fault, 3, 0).astype(np.int16)
    for stat in ("top1", "top3", "mrr"):
        found, words = exceeds(Pair("direct", "metamorphic", stat=stat),  # type: ignore
                               evidence, null)
        assert found
        assert "on 120 of 120 held-out images the faults lift direct above metamorphic on " \
            f"{ {'top1': 'top-1 hits', 'top3': 'top-3 hits', 'mrr': 'reciprocal ranks'}[stat]}" \
            in words
        assert not exceeds(Pair("metamorphic", "direct", stat=stat),  # type: ignore
                           evidence, null)[0]
    # maximum (2) above metamorphic (5) on reciprocal ranks, but neither is top-1
    assert exceeds(Pair("maximum", "metamorphic", stat="mrr"), evidence, null)[0]  # type: ignore
    assert not exceeds(Pair("maximum", "metamorphic", stat="top1"),  # type: ignore
                       evidence, null)[0]


def test_faults_that_change_nothing_do_not_exceed_the_null() -> None:
    evidence, null = _sides(lift=0.0)
    found, words = exceeds(Pair("direct", "metamorphic"), evidence, null)  # type: ignore
    assert not found
    assert "on 0 of 120 held-out images" in words
    assert "p = 1" in words


def test_a_null_that_passes_caps_the_row_unless_the_finding_exceeds_it() -> None:
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Row:
        status: str
        note: str
        recomputed: str = "88"

    row = Row("direction reproduced", "finding 1")
    null = Row("direction reproduced", "", "0.78")
    kept = against_null(row, lambda: null, "the controls", lambda: (True, "on 888 of 900"))
    assert kept.status == "direction reproduced"
    assert kept.note == ("finding 1; the null passes too: the controls give 0.78 (direction "
                         "reproduced), but the finding exceeds it: on 888 of 900")
    capped = against_null(row, lambda: null, "the controls", lambda: (False, "on 3 of 900"))
    assert capped.status == "by design"
    assert capped.note.startswith("the null passes too: the controls give 0.78 (direction "
                                  "reproduced), and the finding does not exceed it: on 3 of 900")
    asked = []
    failed = Row("direction reversed", "", "-1")
    against_null(row, lambda: failed, "the controls", lambda: asked.append(1) or (True, ""))
    assert not asked  # a null that fails the plain rule is not asked more


def test_values_equal_to_the_last_bits_are_tied() -> None:
    def rule(op: str) -> dict[str, Any]:
        return {"rule": "compare", "op": op,
                "than": {"function": "drift.constant", "args": {"value": 0.9473684210526316}}}

    low = 0.9473684210526315
    assert decide(rule("lt"), low, None, None)[0] is False
    assert "tied" in decide(rule("lt"), low, None, None)[1]
    assert decide(rule("le"), low, None, None)[0] is True
    assert decide(rule("lt"), 0.94736842, None, None)[0] is True  # a real difference
    assert "tied" not in decide(rule("lt"), 0.94736842, None, None)[1]


def test_the_synthetic_sides_differ_only_where_lifted() -> None:
    evidence, null = _sides(lift=1.0)
    table, controls = evidence.table(), null.table()
    fault = table["fault"] != CLEAN
    assert np.all(table["e_o_norm"][fault] - controls["e_o_norm"][fault] == pytest.approx(1.0))
    for column in set(SCORES) - {"e_o_norm"}:
        np.testing.assert_array_equal(table[column], controls[column])


@pytest.mark.parametrize(("k", "n"), [(0, 0), (0, 5), (7, 8), (6, 6), (3, 16), (888, 898),
                                      (720, 722)])
def test_the_sign_test_is_scipys(k: int, n: int) -> None:
    from scipy.stats import binomtest

    expected = binomtest(k, n, 0.5, alternative="greater").pvalue if n else 1.0
    assert upper_tail(k, n) == pytest.approx(expected, rel=1e-9, abs=0)
