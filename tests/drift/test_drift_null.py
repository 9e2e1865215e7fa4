"""The drift study's null (``kit.drift.shipped.ControlNull``, ``null_from: controls`` in the
ledger): every injected fault undone, each fault case scored as its unmutated control (the
held-out clean case of the same model and image). A detector or fault rule the null passes
too is ``by design`` at most, with "the null passes too" and the controls' value, unless it
compares two detectors' detection rates and the finding exceeds the null
(``kit.drift.beyond``); a rule
the null fails keeps its status and says so; a localisation rule, whose layer ranks the
controls never had, keeps its status and says the null could not be decided; a claim
whose evidence is the null already names why (``no_null``)."""

from __future__ import annotations

import numpy as np
import pytest

from kit.claims.ledger import evaluate, load_ledger
from kit.drift.analysis import CLEAN, HELDOUT
from kit.drift.shipped import RANKS, SCORES, controls_in_place
from kit.errors import KitError
from kit.paths import ROOT
from tests.conftest import synthetic_table


def test_each_fault_case_takes_its_controls_scores_and_nothing_else() -> None:
    table, _ = synthetic_table(seed=3)
    null = controls_in_place(table, "t")
    fault = table["fault"] != CLEAN
    controls = (table["fault"] == CLEAN) & (table["role"] == HELDOUT)
    for row in np.flatnonzero(fault)[:25]:
        [control] = np.flatnonzero(controls & (table["model"] == table["model"][row])
                                   & (table["image"] == table["image"][row]))
        for column in SCORES:
            np.testing.assert_array_equal(null[column][row], table[column][control])
    for column in SCORES:  # the clean rows are as they were, and a score did move
        np.testing.assert_array_equal(null[column][~fault], table[column][~fault])
    assert not np.array_equal(null["e_o_norm"], table["e_o_norm"])
    for column in ("fault", "layer", "label", "role", "image"):
        np.testing.assert_array_equal(null[column], table[column])
    for column in RANKS:
        with pytest.raises(KitError, match="has no layer ranks"):
            null[column]


def test_a_fault_case_without_its_control_is_refused() -> None:
    table, _ = synthetic_table(seed=3)
    orphan = int(np.flatnonzero(table["fault"] != CLEAN)[0])
    table = {k: v.copy() for k, v in table.items()}
    table["image"][orphan] = 10 ** 6
    with pytest.raises(KitError, match="t: a fault case has no unmutated control"):
        controls_in_place(table, "t")


@pytest.fixture(scope="module")
def drift() -> dict[str, object]:
    return {o.claim: o for o in evaluate(load_ledger(ROOT / "claims" / "drift.yaml"), ROOT)
            if o.substrate == "digits"}


def test_the_shipped_rows_stand_behind_the_null_or_say_why(drift: dict[str, object]) -> None:
    capped, kept, undecided = drift["A-061"], drift["A-071"], drift["A-085"]
    assert capped.status == "by design"  # type: ignore[attr-defined]
    assert capped.note.startswith(  # type: ignore[attr-defined]
        "the null passes too: the unmutated controls give ")
    exceeding = drift["A-048"]  # the controls' 126 false alarms against 18 pass it too
    assert exceeding.status == "direction reproduced"  # type: ignore[attr-defined]
    assert "the null passes too: the unmutated controls give 126 (direction reproduced), " \
        "but the finding exceeds it: on 888 of 900 held-out images the faults lift direct " \
        "above metamorphic" in exceeding.note  # type: ignore[attr-defined]
    assert kept.status == "direction reproduced"  # type: ignore[attr-defined]
    assert "the null fails this rule (the unmutated controls: " in kept.note  # type: ignore
    assert undecided.status == "direction reproduced"  # type: ignore[attr-defined]
    assert "the null could not be decided (the null (unmutated controls) has no layer" \
        in undecided.note  # type: ignore[attr-defined]
    assert "no null: a false-alarm count is measured on the unmutated held-out controls" \
        in drift["A-050"].note  # type: ignore[attr-defined]
    agreeing = [o for o in drift.values()
                if o.status in ("reproduced", "direction reproduced")]  # type: ignore
    assert all("null" in o.note for o in agreeing)  # type: ignore[attr-defined]
