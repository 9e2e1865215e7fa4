"""A null subject behind every rule (``kit.claims.null``): a row that passes on the
trained subjects and on the untrained ones too is ``by design`` at most and says so; a row
the null fails keeps its status and says that too; the shipped SciML ledger names its null
evidence, and no ``reproduced`` or direction row there is one its null also passes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kit.claims.ledger import Outcome, clear_cache, evaluate, load_ledger
from kit.claims.null import against_null
from kit.errors import KitError
from kit.paths import ROOT


def outcome(status: str, value: str = "24") -> Outcome:
    return Outcome("B-034", "sciml", "kit", "", "", "24/24", value, "exact", status,
                   note="as graded")


@pytest.mark.parametrize("status", ["reproduced", "direction reproduced"])
def test_a_rule_the_null_passes_too_is_by_design_at_most(status: str) -> None:
    capped = against_null(outcome(status), lambda: outcome(status))
    assert capped.status == "by design"
    assert capped.note.startswith("the null passes too: untrained subjects give 24 ")
    assert f"{status} without the null" in capped.note


def test_a_rule_the_null_fails_keeps_its_status_and_says_so() -> None:
    kept = against_null(outcome("reproduced"), lambda: outcome("differs", "0"))
    assert kept.status == "reproduced"
    assert kept.note == "as graded; the null fails this rule (untrained subjects: 0, differs)"


def test_only_agreement_is_checked_and_an_undecidable_null_is_named() -> None:
    def never() -> Outcome:
        raise AssertionError("the null is not consulted for a row that does not agree")

    for status in ("direction reversed", "described", "by design", "differs"):
        assert against_null(outcome(status), never) == outcome(status)

    def broken() -> Outcome:
        raise KitError("null.json: no value at 'x'")

    kept = against_null(outcome("reproduced"), broken)
    assert kept.status == "reproduced"
    assert kept.note.endswith("the null could not be decided (null.json: no value at 'x')")


def test_a_value_the_null_leaves_undefined_is_named_never_a_traceback() -> None:
    """The drift study's small configuration: its controls raise no alarm, so the fixed
    interval of the detection difference has zero width and the widening (nested over
    fixed) is undefined on the null; the row keeps its status and says why."""
    from types import SimpleNamespace

    import numpy as np

    from kit.claims.rules import call
    from kit.errors import Undefined

    flat = {"metamorphic-direct/tpr": np.zeros(50)}
    null = SimpleNamespace(root=Path("controls"), bootstrap=lambda which: flat)
    with pytest.raises(Undefined, match=r"controls: drift.boot_widening\(\{\}\) is undefined "
                                        r"on this evidence \(a quotient by zero"):
        call({"function": "drift.boot_widening"}, null)
    kept = against_null(outcome("direction reproduced"),
                        lambda: call({"function": "drift.boot_widening"}, null))
    assert kept.status == "direction reproduced"
    assert "the null could not be decided (controls: drift.boot_widening" in kept.note


@pytest.mark.parametrize("quotient", [False, True])
@pytest.mark.parametrize(("recall", "decided"), [(0.0, "fails"), (0.5, "undecided")])
def test_a_value_the_null_leaves_undefined_fails_only_with_another_half(
        monkeypatch: pytest.MonkeyPatch, recall: float, decided: str, quotient: bool) -> None:
    """A precision of nothing flagged decides nothing alone; a recall half that fails on the
    null makes the null fail the rule (the rule is all of its halves). A recompute function
    that divides by zero (``quotient``) leaves its value undefined in the same way."""
    from types import SimpleNamespace

    from kit.claims import ledger, rules
    from kit.errors import Undefined

    def precision(ev: object) -> float:
        if quotient:
            return 0 / len(())
        raise Undefined("null/unified.json: conservation precision undefined (n = 0)")

    monkeypatch.setitem(rules.FUNCTIONS, "test.precision", precision)
    monkeypatch.setitem(rules.FUNCTIONS, "test.recall", lambda ev: recall)
    above_zero = {"rule": "compare", "op": "gt", "label": "recall", "value": 0.81,
                  "than": {"function": "sciml.constant_value", "args": {"value": 0.0}},
                  "compute": {"function": "test.recall"}}
    rule = {"rule": "rounds_to", "decimals": 2, "reason": "r", "parts": [above_zero]}
    claim = {"value": 1.0, "compute": {"function": "test.precision"}}
    base = {"claim": "B-077", "study": "sciml", "section": "", "statement": "",
            "published": "1.00/0.81"}
    decide = lambda: ledger._decide_null(  # noqa: E731
        claim, rule, SimpleNamespace(root=ROOT / "null"), False, base, {"substrate": "kit"})
    kept = against_null(outcome("direction reproduced"), decide)
    assert kept.status == "direction reproduced"
    undefined = "null: test.precision({}) is undefined on this evidence (a quotient by zero: " \
        "division by zero)" if quotient else \
        "null/unified.json: conservation precision undefined (n = 0)"
    if decided == "fails":
        assert f"the null fails this rule (untrained subjects: {undefined}; recall 0 " \
               "(paper 0.81)" in kept.note
    else:
        assert kept.note.endswith(f"the null could not be decided ({undefined})")


def test_a_null_record_that_contradicts_itself_fails_never_keeps_a_status() -> None:
    from kit.errors import RecountError

    def tampered() -> Outcome:
        raise RecountError("null/ledger.json: counts/x is {'pass': 9}, but its verdicts count")

    with pytest.raises(RecountError, match="counts/x"):
        against_null(outcome("reproduced"), tampered)


def test_a_named_null_that_is_missing_is_a_failed_check(tmp_path: Path) -> None:
    ledger = load_ledger(ROOT / "claims" / "sciml.yaml")
    ledger["substrates"]["kit"]["null_evidence"] = str(tmp_path / "absent")
    ledger["substrates"]["kit"]["evidence"] = str(ROOT / "claims/sciml/evidence/kit")
    ledger["claims"] = [c for c in ledger["claims"] if c["id"] == "B-034"]
    clear_cache()
    problems: list[str] = []
    assert evaluate(ledger, ROOT, problems) == []
    assert problems == [f"claim B-034 (kit): {tmp_path / 'absent'}: the null evidence the kit "
                        "substrate names is missing; restore it with git checkout claims"]


def test_every_shipped_sciml_row_that_agrees_has_a_null_that_fails_it(tmp_path: Path) -> None:
    from kit.claims.verify import verify

    out = tmp_path / "out.json"
    verify(json_out=out)
    every = json.loads(out.read_text())["claims"]
    said = re.search(r"On sciml, (\d+) rows that agreed with the paper are `by design` because "
                     r"the null\s+subjects, untrained, pass the same rule; on drift, (\d+) "
                     r"because the unmutated controls", (ROOT / "README.md").read_text())
    assert said is not None  # the README's counts of rows a passing null made by design
    assert [int(n) for n in said.groups()] == [
        sum(c["study"] == study and c["status"] == "by design"
            and "the null passes too" in c["note"] for c in every)
        for study in ("sciml", "drift")]
    rows = [c for c in every if c["study"] == "sciml"]
    agreeing = [c for c in rows if c["status"] in ("reproduced", "direction reproduced")]
    assert agreeing, "some rows still agree beyond what an untrained subject gives"
    assert all("the null fails this rule" in c["note"] for c in agreeing)
    capped = [c for c in rows if "the null passes too" in c["note"]]
    assert capped, "no row was found structural"
    assert all(c["status"] == "by design" for c in capped)
    assert "B-034" in {c["claim"] for c in capped}  # FNO translation: no position grid


def test_a_null_run_ships_as_the_null_substrate_without_weights(tmp_path: Path) -> None:
    """The null run is recognised by its ledger's note and goes to evidence/null; the
    trained run's folder beside it is left as it was."""
    import shutil

    from kit.claims.ship import ship
    from kit.runfolder import MANIFEST, SHIPPED_MANIFEST

    root = tmp_path / "repo"
    for name in ("claims", "manifests", "locks"):
        shutil.copytree(ROOT / name, root / name)
    shipped = ROOT / "claims/sciml/evidence/null"
    run = tmp_path / "run"
    shutil.copytree(shipped, run)
    (run / SHIPPED_MANIFEST).rename(run / MANIFEST)
    kit_before = sorted(p.name for p in (root / "claims/sciml/evidence/kit").iterdir())
    target = ship(run, "sciml", root)
    assert target == root / "claims/sciml/evidence/null"
    assert sorted(p.name for p in target.iterdir()) == sorted(p.name for p in shipped.iterdir())
    assert not (target / "weights").exists()
    assert sorted(p.name for p in (root / "claims/sciml/evidence/kit").iterdir()) == kit_before


def test_the_null_configuration_trains_nothing() -> None:
    from kit.sciml.config import Config

    null, full = Config.null(), Config()
    assert (null.untrained, full.untrained) == (True, False)
    assert null.fno_recipe is not None
    assert null.pinn_recipe is not None
    assert null.mgn_subject is not None
    assert (null.fno_recipe.steps, null.pinn_recipe.steps, null.mgn_subject.train_steps) == (
        0, 0, 0)
    assert null.identity() != full.identity()
