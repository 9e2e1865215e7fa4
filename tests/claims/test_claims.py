"""The decision function, one rule kind at a time; the grading of decided rules into
statuses; every agreement the shipped ledgers claim can fail; ledger args bound at load;
every registered recompute function named by a ledger.

Also covers ``kit.claims.ledger`` and ``kit.claims.rules`` (no test file of their own)."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from kit.claims.ledger import (
    AGREEMENT,
    FUNCTIONS,
    GRADES,
    STUDIES,
    _decide_claim,
    _evidence,
    _specs,
    call,
    decide,
    effect,
    evaluate,
    grade,
    load_ledger,
    status,
    weakest,
)
from kit.errors import KitError
from kit.paths import ROOT

LEDGERS = sorted((ROOT / "claims").glob("*.yaml"))


def const(value: Any) -> dict[str, Any]:
    return {"function": "drift.constant", "args": {"value": value}}


# (rule, recomputed, published, passes): every kind both passing and failing
CASES = [
    ({"rule": "exact"}, 3, 3, True),
    ({"rule": "exact"}, 4, 3, False),
    ({"rule": "exact"}, "1.20.1", "1.20.1", True),
    ({"rule": "exact"}, "1.29.0", "1.20.1", False),
    ({"rule": "rounds_to", "decimals": 2}, 75.4815, 75.48, True),
    ({"rule": "rounds_to", "decimals": 2}, 75.4861, 75.48, False),
    ({"rule": "rounds_to", "decimals": 2}, [74.648, 76.754], [74.65, 76.75], True),
    ({"rule": "rounds_to", "decimals": 2}, [74.648, 76.744], [74.65, 76.75], False),
    ({"rule": "rounds_to", "decimals": 0}, 2.6, 3, True),
    ({"rule": "rounds_to", "decimals": 0}, 2.4, 3, False),
    ({"rule": "abs_tol", "tol": 0.5}, 9.6, 10, True),
    ({"rule": "abs_tol", "tol": 0.5}, 9.4, 10, False),
    ({"rule": "sign", "sign": "negative"}, -52.25, -7.27, True),
    ({"rule": "sign", "sign": "negative"}, 0.0, -7.27, False),
    ({"rule": "sign", "sign": "positive"}, 1e-9, 1, True),
    ({"rule": "sign", "sign": "nonnegative"}, -1e-9, 1, False),
    ({"rule": "sign", "sign": "zero"}, 0, 0, True),
    ({"rule": "compare", "op": "lt", "than": const(82.75)}, 75.48, None, True),
    ({"rule": "compare", "op": "lt", "than": const(82.75)}, 82.75, None, False),
    ({"rule": "compare", "op": "ge", "than": const(1)}, 1, None, True),
    ({"rule": "compare", "op": "gt", "than": const(10)}, 6.46, None, False),
    ({"rule": "compare", "op": "eq", "than": const(2)}, 2.0, None, True),
    ({"rule": "true"}, True, None, True),
    ({"rule": "true"}, False, None, False),
    ({"rule": "true"}, 1, None, False),
    ({"rule": "agrees", "than": const([1.0, 2.0])}, [1.0, 2.0 + 1e-12], None, True),
    ({"rule": "agrees", "than": const([1.0, 2.0])}, [1.0, 2.001], None, False),
    ({"rule": "agrees", "than": const(True)}, 1, None, False),
    ({"rule": "within", "interval": const([0.5, 1.5])}, 1.0, None, True),
    ({"rule": "within", "interval": const([0.5, 1.5])}, 1.6, None, False),
    ({"rule": "describe"}, 99.33, 72.83, True),
]


@pytest.mark.parametrize(("rule", "value", "published", "passes"), CASES)
def test_each_rule_kind_decides(rule: dict[str, Any], value: Any, published: Any,
                                passes: bool) -> None:
    passed, shown = decide(rule, value, published, evidence=None)
    assert passed is passes
    assert shown


def test_every_rule_kind_has_a_passing_and_a_failing_case() -> None:
    kinds = {kind for kind in GRADES if kind != "describe"}
    assert {c[0]["rule"] for c in CASES if c[3]} >= kinds
    assert {c[0]["rule"] for c in CASES if not c[3]} >= kinds


def test_compare_refuses_lists_instead_of_ordering_them() -> None:
    """Python orders lists lexicographically; a comparison of two ranges is an error."""
    with pytest.raises(KitError, match="expected a number"):
        decide({"rule": "compare", "op": "lt", "than": const([1.0, 9.0])},
               [0.5, 10.0], None, evidence=None)


@pytest.mark.parametrize(("rule_grade", "passed", "paper", "expected"), [
    ("value", True, True, "reproduced"),
    ("value", True, False, "reproduced"),
    ("value", False, False, "differs"),
    ("value", False, True, "differs"),
    ("direction", True, False, "direction reproduced"),
    ("direction", False, False, "direction reversed"),
    ("direction", True, True, "direction reproduced"),
    ("direction", False, True, "differs"),
    ("consistency", True, False, "consistent"),
    ("consistency", False, False, "differs"),
    ("description", True, False, "described"),
    ("description", False, True, "described"),
    ("design", True, False, "by design"),
    ("design", True, True, "by design"),
    ("design", False, False, "differs"),
    ("hypothesis", True, False, "hypothesis holds"),
    ("hypothesis", False, False, "hypothesis fails"),
])
def test_status_says_what_kind_of_agreement(rule_grade: str, passed: bool, paper: bool,
                                            expected: str) -> None:
    assert status(rule_grade, passed, paper) == expected


def test_grade_by_kind_and_by_what_an_interval_is() -> None:
    assert grade({"rule": "rounds_to"}) == "value"
    assert grade({"rule": "compare"}) == "direction"
    assert grade({"rule": "agrees"}) == "consistency"
    own = {"function": "drift.boot", "args": {}}
    assert grade({"rule": "within", "interval": own}) == "consistency"
    assert grade({"rule": "within", "interval": const([0, 1])}) == "direction"
    assert grade({"rule": "within", "interval": own, "compute": const(1.0)}) == "direction"
    assert grade({"rule": "rounds_to", "grade": "direction"}) == "direction"


def test_a_hypothesis_that_is_not_a_finding_is_graded_as_consistency() -> None:
    rule = {"rule": "true", "grade": "hypothesis", "not_a_finding": "follows from the rule"}
    assert grade(rule) == "not a finding"
    assert status(grade(rule), True, False) == "consistent"
    assert status(grade(rule), False, False) == "hypothesis fails"


# A claim graded on both halves of a printed pair (0.75/0.5 printed; the kit measures
# 0.75 and 0.25), decided on a stand-in substrate.
PAIR = {"id": "T-001", "statement": "precision/recall", "published": "0.75/0.50",
        "value": 0.75, "kind": "pair", "compute": const(0.75), "evidence": ["x"]}


def _pair_outcome(rule: dict[str, Any]) -> Any:
    return _decide_claim(PAIR, rule, None, False, {"claim": "T-001", "study": "drift",
                                                   "section": "", "statement": "",
                                                   "published": "0.75/0.50",
                                                   "evidence": ()},
                         {"substrate": "digits", "evidence_folder": ""})


def test_every_half_of_a_printed_pair_is_graded_and_the_weakest_decides() -> None:
    recall = {"label": "recall", "value": 0.5, "compute": const(0.25), "rule": "rounds_to",
              "decimals": 2, "reason": "the recall as printed"}
    both = _pair_outcome({"rule": "rounds_to", "decimals": 2, "reason": "precision",
                          "parts": [recall]})
    assert both.status == "differs"
    assert "recall 0.25 (paper 0.5): rounds_to rounds to 0.5 at 2 decimals (not met)" \
        in both.rule
    direction = {**recall, "rule": "compare", "op": "lt", "than": const(1.0),
                 "threshold": {"source": "boundary", "why": "a recall of one misses nothing"}}
    weaker = _pair_outcome({"rule": "rounds_to", "decimals": 2, "reason": "precision",
                            "parts": [direction]})
    assert weaker.status == "direction reproduced"
    assert weaker.thresholds == ("boundary: a recall of one misses nothing",)
    alone = _pair_outcome({"rule": "rounds_to", "decimals": 2, "reason": "precision"})
    assert alone.status == "reproduced"


def test_a_design_or_described_half_neither_lends_nor_takes_a_measured_status() -> None:
    assert weakest(["reproduced", "by design"]) == "reproduced"
    assert weakest(["direction reproduced", "described"]) == "direction reproduced"
    assert weakest(["by design", "described"]) == "described"
    assert weakest(["by design", "by design"]) == "by design"
    assert weakest(["reproduced", "differs"]) == "differs"
    assert weakest(["direction reproduced", "direction reversed", "by design"]) == \
        "direction reversed"


def test_a_revised_hypothesis_rule_is_shown_beside_the_frozen_one_that_decides() -> None:
    frozen = {"rule": "compare", "op": "ge", "than": const(1.0), "grade": "hypothesis",
              "reason": "frozen", "threshold": {"source": "kit", "why": "the frozen rule"},
              "revised": {"rule": "compare", "op": "ge", "than": const(0.5),
                          "grade": "hypothesis", "reason": "revised",
                          "threshold": {"source": "kit", "why": "the revised rule"},
                          "revision": {"commit": "02e59e2", "date": "2026-11-20",
                                       "why": "a looser rule", "evidence_existed": True}}}
    outcome = _pair_outcome(frozen)
    assert outcome.status == "hypothesis fails"
    assert "revised rule (02e59e2, 2026-11-20; evidence existed: yes)" in outcome.rule
    assert "-> hypothesis holds (shown beside; the frozen rule decides)" in outcome.rule
    assert outcome.thresholds == ("kit: the frozen rule", "kit: the revised rule")


def test_the_schema_requires_a_threshold_source_on_every_deciding_comparison(
        tmp_path: Path) -> None:
    ledger = yaml.safe_load((ROOT / "claims" / "drift.yaml").read_text())
    target = next(c for c in ledger["claims"] if c["id"] == "A-114")
    del target["rules"]["digits"]["threshold"]
    path = tmp_path / "drift.yaml"
    path.write_text(yaml.safe_dump(ledger))
    with pytest.raises(KitError, match=r"claims/\d+/rules/digits: 'threshold' is a required"):
        load_ledger(path)
    target["rules"]["digits"]["threshold"] = {"source": "paper"}
    path.write_text(yaml.safe_dump(ledger))
    with pytest.raises(KitError, match=r"threshold: 'line' is a required property"):
        load_ledger(path)


def test_effect_sets_the_kits_number_beside_the_papers() -> None:
    assert effect(-7.27, -52.25) == {"paper": -7.27, "kit": -52.25, "ratio": 7.1871}
    assert effect(0, 3.0) == {"paper": 0, "kit": 3.0, "ratio": None}
    assert effect([1.0, 2.0], [1.5, 2.5]) == {"paper": [1.0, 2.0], "kit": [1.5, 2.5],
                                              "ratio": None}
    assert effect("three", 3) is None
    assert effect(1.0, True) is None


# -- every agreement the shipped ledgers claim can fail ---------------------------------


def _mutations(value: Any, rule: dict[str, Any]) -> list[Any]:
    """Sign flip, scale (x10, /10, x100), one unit off in the last printed digit, and a
    hundred units off (which moves a zero count across a threshold)."""
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, str):
        return [value + "x"]
    if isinstance(value, list):
        return [[*value[:i], m, *value[i + 1:]]
                for i, v in enumerate(value) for m in _mutations(v, rule)]
    step = 10.0 ** -int(rule["decimals"]) if "decimals" in rule else 1
    found = [-value, value * 10, value / 10, value * 100, value + step, value - step,
             value + 100 * step]
    if isinstance(value, int):
        found = [int(m) for m in found if float(m).is_integer()]
    return [m for m in found if m != value and math.isfinite(m)]


def _agreements() -> list[tuple[str, str, dict[str, Any], Any, Any, Any]]:
    """(claim, substrate, deciding rule, decided value, published, evidence) of every
    shipped claim whose status claims agreement with the paper."""
    found = []
    for path in LEDGERS:
        ledger = load_ledger(path)
        outcomes = {(o.claim, o.substrate): o.status for o in evaluate(ledger, ROOT)}
        reader, _ = STUDIES[ledger["study"]]
        for claim in ledger["claims"]:
            for substrate, rule in claim.get("rules", {}).items():
                if outcomes.get((claim["id"], substrate)) not in AGREEMENT:
                    continue
                evidence = _evidence(ROOT / ledger["substrates"][substrate]["evidence"],
                                     reader)
                deciding = rule.get("finding", rule)
                value = call(deciding.get("compute", claim["compute"]), evidence)
                found.append((claim["id"], substrate, deciding, value, claim.get("value"),
                               evidence))
                # every half of a printed pair that grants agreement must be able to fail
                found += [(f"{claim['id']}:{part['label']}", substrate, part,
                           call(part["compute"], evidence), part["value"], evidence)
                          for part in rule.get("parts", ())
                          if grade(part) != "description"]
    return found


def test_every_agreement_rule_of_the_shipped_ledgers_can_fail() -> None:
    """A value rule must fail under every mutation of its recomputed value; a direction
    rule under at least one. A rule that no mutation moves could never have failed."""
    agreements = _agreements()
    assert len(agreements) > 150
    cannot_fail = [f"{cid}/{substrate}" for cid, substrate, rule, value, published, evidence
                   in agreements if not _can_fail(rule, value, published, evidence)]
    assert cannot_fail == []


def _can_fail(rule: dict[str, Any], value: Any, published: Any, evidence: Any) -> bool:
    outcomes = [decide(rule, m, published, evidence)[0] for m in _mutations(value, rule)]
    assert outcomes, f"no mutation of {value!r}"
    return not any(outcomes) if grade(rule) == "value" else not all(outcomes)


def test_the_mutation_check_finds_a_rule_that_cannot_fail() -> None:
    vacuous = {"rule": "within", "interval": const([-1e300, 1e300])}
    assert not _can_fail(vacuous, 5.0, None, None)
    assert _can_fail({"rule": "within", "interval": const([0, 10])}, 5.0, None, None)
    # a value rule must fail under every mutation: a tolerance that swallows them is caught
    assert not _can_fail({"rule": "abs_tol", "tol": 1e9}, 3, 3, None)
    assert _can_fail({"rule": "exact"}, 3, 3, None)


# -- ledgers ----------------------------------------------------------------------------


def test_ledger_args_are_bound_to_the_function_signature(tmp_path: Path) -> None:
    ledger = yaml.safe_load((ROOT / "claims" / "drift.yaml").read_text())
    broken = copy.deepcopy(ledger)
    target = next(c for c in broken["claims"] if c["id"] == "A-073")
    target["compute"]["args"]["detecotr"] = target["compute"]["args"].pop("detector")
    path = tmp_path / "drift.yaml"
    path.write_text(yaml.safe_dump(broken))
    with pytest.raises(KitError, match=r"claim A-073: drift\.rate: arguments .*detecotr"):
        load_ledger(path)


def test_every_registered_recompute_function_is_named_by_a_ledger() -> None:
    named = {spec["function"] for path in LEDGERS
             for claim in load_ledger(path)["claims"] for spec in _specs(claim)}
    assert sorted(set(FUNCTIONS) - named) == []
    assert named <= set(FUNCTIONS)


def test_every_substrate_says_whether_it_is_the_papers() -> None:
    for path in LEDGERS:
        substrates = load_ledger(path)["substrates"]
        expected = {"drift": {"cifar100": True, "digits": False}, "sciml": {"kit": False},
                    "realdrift": {"digits": False},
                    "corpus": {"kit": False, "detectors": False}}[load_ledger(path)["study"]]
        assert {name: s["paper"] for name, s in substrates.items()} == expected


def test_claims_on_physicsnemo_are_not_run_here_when_the_run_left_it_out(
        tmp_path: Path) -> None:
    """A SciML run without the PhysicsNeMo environment (``--without-physicsnemo``) records
    why in ``mgn.json`` and holds no PhysicsNeMo subject: the claims that need it are not
    run here, and none of the others differs."""
    import json
    import shutil

    evidence = tmp_path / "claims" / "sciml" / "evidence" / "kit"
    shutil.copytree(ROOT / "claims" / "sciml" / "evidence" / "kit", evidence)
    shutil.copytree(ROOT / "claims" / "sciml" / "evidence" / "null",
                    evidence.with_name("null"))  # the null subjects the ledger names
    record = json.loads((evidence / "mgn.json").read_text())
    record["physicsnemo"] = "not run: no PhysicsNeMo environment given"
    record["subjects"] = [s for s in record["subjects"] if s["arch"] != "physicsnemo"]
    (evidence / "mgn.json").write_text(json.dumps(record))
    ledger = load_ledger(ROOT / "claims" / "sciml.yaml")
    outcomes = evaluate(ledger, tmp_path)
    needing = {c["id"] for c in ledger["claims"]
               if "requires" in c.get("rules", {}).get("kit", {})}
    assert needing == {"B-033", "B-094", "B-192", "B-234", "K-106", "K-107", "K-108"}
    assert {o.claim for o in outcomes if o.status == "not run here" and o.substrate == "kit"
            } == needing
    assert [o.claim for o in outcomes if o.status == "differs"] == []
    shipped = {o.claim: o.status for o in evaluate(ledger, ROOT)}
    assert all(shipped[c] != "not run here" for c in needing)


def test_a_yaml_alias_bomb_in_a_ledger_is_refused_and_flat_aliases_kept(
        tmp_path: Path) -> None:
    """A ledger may keep the flat aliases ``yaml.safe_dump`` writes for a shared list (the
    shipped ones do), but a 'billion laughs' is refused before anything builds or walks it:
    no YAML document is constructed and no schema is consulted."""
    from kit.errors import FileFormatError
    from tests.test_files import billion_laughs, nothing_walked

    text = (ROOT / "claims" / "drift.yaml").read_text()
    assert "*id001" in text
    assert load_ledger(ROOT / "claims" / "drift.yaml")["study"] == "drift"
    path = tmp_path / "drift.yaml"
    path.write_text(text + billion_laughs())
    with nothing_walked() as walked, pytest.raises(
            FileFormatError, match=r"drift\.yaml: YAML aliases expand the file's \d+ nodes "
                                   r"to \d+ .*an alias bomb"):
        load_ledger(path)
    assert not walked


def test_claims_failing_on_one_unreadable_file_are_named_together(tmp_path: Path) -> None:
    import shutil

    evidence = tmp_path / "claims" / "drift" / "evidence" / "digits"
    shutil.copytree(ROOT / "claims" / "drift" / "evidence" / "digits", evidence)
    record = evidence / "score" / "score.json"
    record.write_bytes(record.read_bytes() + b"\xff")
    problems: list[str] = []
    ledger = load_ledger(ROOT / "claims" / "drift.yaml")
    outcomes = evaluate(ledger, tmp_path, problems)
    assert len(problems) == 1
    count, rest = problems[0].split(" claims (digits: ", 1)
    assert int(count) > 100
    assert rest.endswith(f"): {record}: not UTF-8 text (byte 0xff at offset "
                         f"{record.stat().st_size - 1}, line 947)")
    # the claims that do not read the record are still decided
    decided = [o for o in outcomes if o.substrate == "digits"]
    assert "A-001" in {o.claim for o in decided}
    assert len(decided) + int(count) == sum("digits" in c.get("rules", {})
                                            for c in ledger["claims"])


def test_a_hypothesis_row_shows_the_quantities_it_was_decided_on() -> None:
    ledger = load_ledger(ROOT / "claims" / "corpus.yaml")
    found = {o.claim: o for o in evaluate(ledger, ROOT)}
    assert "decided on corpus.rate(stat=reproduced, rule_version=1) = 21, " \
        "corpus.rate(stat=listed, rule_version=1) = 22" in found["C-001"].rule
    assert "corpus.pooled_rate(detector=metamorphic, rate=tpr) = " in found["C-029"].rule
