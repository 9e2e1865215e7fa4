"""The drift study's null (``kit.drift.shipped.ControlNull``, ``null_from: controls`` in the
ledger): every injected fault undone, each fault case scored as its unmutated control (the
held-out clean case of the same model and image). A detector or fault rule the null passes
too is ``by design`` at most, with "the null passes too" and the controls' value, unless it
compares two detectors and the finding exceeds the null (``kit.drift.beyond``); a rule
the null fails keeps its status and says so; a localisation rule ranks each fault's layer
among its control's layer scores (``score/control-layers.npz``), and on evidence made
before that file existed keeps its status and says the null could not be decided; a claim
whose evidence is the null already names why (``no_null``)."""

from __future__ import annotations

import numpy as np
import pytest

from kit.claims.ledger import evaluate, load_ledger
from kit.drift import analysis
from kit.drift.analysis import CALIBRATION, CLEAN, HELDOUT
from kit.drift.localise import KINDS, normalisers, true_layer_rank
from kit.drift.shipped import (
    RANKS,
    SCORES,
    ControlNull,
    Evidence,
    controls_in_layers,
    controls_in_place,
)
from kit.errors import KitError
from kit.files import load_npz
from kit.paths import ROOT
from kit.runfolder import Run
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


def _control_layers(table: dict[str, np.ndarray], seed: int = 7) -> dict[str, np.ndarray]:
    """Random per-layer scores of every clean held-out row, as the score stage keeps them."""
    rng = np.random.default_rng(seed)
    out = {}
    for m in np.unique(table["model"]):
        rows = np.flatnonzero((table["model"] == m) & (table["fault"] == CLEAN)
                              & (table["role"] == HELDOUT))
        out[f"m{m}/rows"] = rows.astype(np.int32)
        for kind in KINDS:
            out[f"m{m}/{kind}"] = rng.exponential(size=(len(rows), 5)).astype(np.float32)
    return out


def test_each_fault_row_takes_its_controls_layer_scores_and_its_rank_among_them() -> None:
    table, layers = synthetic_table(seed=3)
    controls = _control_layers(table)
    null = controls_in_layers(table, layers, controls, ["m0", "m1"], "t")
    for m in (0, 1):
        rows = layers[f"m{m}/rows"]
        fault = table["fault"][rows] != CLEAN
        held = controls[f"m{m}/rows"]
        for i in np.flatnonzero(fault)[:20]:
            [at] = np.flatnonzero(table["image"][held] == table["image"][rows[i]])
            for kind in KINDS:
                np.testing.assert_array_equal(null[f"m{m}/{kind}"][i], controls[f"m{m}/{kind}"][at])
        for kind in KINDS:  # the calibration rows (the normalisers) are as they were
            np.testing.assert_array_equal(null[f"m{m}/{kind}"][~fault],
                                          layers[f"m{m}/{kind}"][~fault])
    ranks = analysis.ranks_from_layers(table, null, ["m0", "m1"])
    real = analysis.ranks_from_layers(table, layers, ["m0", "m1"])
    ranked = controls_in_place(table, "t", ranks)
    held = (table["fault"] != CLEAN) & (table["role"] == HELDOUT)
    assert np.mean(ranked["rank_direct"][held] == 1) < 0.5 < np.mean(real["direct"][held] == 1)
    np.testing.assert_array_equal(ranked["rank_maximum"], ranks["maximum"])


def test_layer_scores_without_a_faults_control_are_refused() -> None:
    table, layers = synthetic_table(seed=3)
    controls = _control_layers(table)
    controls["m1/rows"] = controls["m1/rows"][1:]
    with pytest.raises(KitError, match="t: a fault case's control of m1 has no layer scores"):
        controls_in_layers(table, layers, controls, ["m0", "m1"], "t")
    controls = _control_layers(table)
    controls["m0/maximum"] = controls["m0/maximum"][:, :4]
    with pytest.raises(KitError, match=r"the controls' m0/maximum scores have shape \(30, 4\)"):
        controls_in_layers(table, layers, controls, ["m0", "m1"], "t")
    del controls["m0/direct"]
    with pytest.raises(KitError, match="the controls' layer scores have no array 'm0/direct'"):
        controls_in_layers(table, layers, controls, ["m0", "m1"], "t")


def test_a_run_ranks_every_faults_layer_among_its_controls_layer_scores(
        tiny_run: tuple[Run, object]) -> None:
    """The score stage keeps every localised table's clean held-out rows' layer scores;
    the run's null ranks each fault's layer among its control's, with the normalisers of
    the table's calibration rows, on the primary table and on the grid's."""
    run, _ = tiny_run
    null = ControlNull(run.root)
    assert null.ranked
    controls = load_npz(run.root / "score" / "control-layers.npz")
    record = run.record("score")
    primary = f"cand-{record['primary_condition']}"
    for name, described in record["tables"].items():
        table = null.table(described["cell"], described["condition"])
        if not described["localisation"]:
            with pytest.raises(KitError, match="has no layer ranks"):
                table["rank_direct"]
            continue
        base = Evidence(run.root).table(described["cell"], described["condition"])
        held = np.flatnonzero((base["fault"] == CLEAN) & (base["role"] == HELDOUT))
        np.testing.assert_array_equal(controls[f"{name}/resnet20/rows"], held)
        fault = np.flatnonzero(base["fault"] != CLEAN)
        row = int(fault[len(fault) // 2])
        [control] = held[base["image"][held] == base["image"][row]]
        scores = controls[f"{name}/resnet20/direct"][held == control][0].astype(np.float64)
        layers = load_npz(run.root / "score" / ("layers.npz" if name == primary
                                                else "grid-layers.npz"))
        prefix = "" if name == primary else f"{name}/"
        rows = layers[f"{prefix}resnet20/rows"]
        cal = rows[(base["fault"][rows] == CLEAN) & (base["role"][rows] == CALIBRATION)]
        norms = normalisers(layers[f"{prefix}resnet20/direct"][
            np.isin(rows, cal)].astype(np.float64), null.quantile)
        expected = true_layer_rank(scores[None], norms, base["layer"][[row]])[0]
        assert table["rank_direct"][row] == expected
        assert (table["rank_direct"][fault] >= 1).all()
    assert set(null.localisation) == set(KINDS)


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
    capped, kept, localised = drift["A-061"], drift["A-071"], drift["A-085"]
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
    assert localised.status == "direction reproduced"  # type: ignore[attr-defined]
    assert "the faults lift direct above metamorphic on top-1 hits more than the image's " \
        "control does" in localised.note  # type: ignore[attr-defined]
    fewer = drift["A-087"]  # VGG's 8 layers above MobileNetV2's 52: chance does that too
    assert fewer.status == "by design"  # type: ignore[attr-defined]
    assert fewer.note.startswith(  # type: ignore[attr-defined]
        "the null passes too: the unmutated controls give 15.")
    grid = drift["A-140"]  # the rotation grid, on the controls of its own table
    assert grid.status == "direction reproduced"  # type: ignore[attr-defined]
    assert "on 888 of 900 held-out images" in grid.note  # type: ignore[attr-defined]
    assert "no null: a false-alarm count is measured on the unmutated held-out controls" \
        in drift["A-050"].note  # type: ignore[attr-defined]
    agreeing = [o for o in drift.values()
                if o.status in ("reproduced", "direction reproduced")]  # type: ignore
    assert all("null" in o.note for o in agreeing)  # type: ignore[attr-defined]
    assert not [o.claim for o in agreeing  # type: ignore[attr-defined]
                if "could not be decided" in o.note]  # type: ignore[attr-defined]
