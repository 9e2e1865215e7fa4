"""Recount, never read, for the drift studies: the sweep's alarm rates and its quantiles
and flips against what they summarise (``kit.drift.recompute_realdrift.recount``), its rows
of the drift study's four clean cells against the drift evidence's logits of those cells
(``recount_pair``), and the
fetch record's layer count against the layer scores (``kit.drift.recompute.conv_layers``);
each edited alone is named."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kit.drift.recompute import conv_layers
from kit.drift.recompute_realdrift import recount
from kit.errors import KitError
from kit.paths import ROOT

CELLS = ROOT / "claims/realdrift/evidence/digits/sweep/cells.json"


def _rate(row: dict[str, Any]) -> None:
    row["alarms"]["direct"]["rate"] = 0.5


def _polygraphy(row: dict[str, Any]) -> None:
    row["polygraphy"]["rate"] = 1.0


def _quantiles(row: dict[str, Any]) -> None:
    row["norm_quantiles"]["0.5"] = 10.0


def _flips(row: dict[str, Any]) -> None:
    row["max_abs_logit"], row["norm_quantiles"] = 0.0, dict.fromkeys(row["norm_quantiles"], 0.0)
    row["flips"]["orig"] = 3


@pytest.mark.parametrize(("edit", "field"), [
    (_rate, "alarms/direct/rate"), (_polygraphy, "polygraphy/rate"),
    (_quantiles, "norm_quantiles"), (_flips, "flips")])
def test_each_sweep_summary_edited_alone_is_named(edit: Any, field: str) -> None:
    rows = json.loads(CELLS.read_text())["rows"]
    assert recount(rows) == []
    moving = next(i for i, r in enumerate(rows) if r["max_abs_logit"] > 0)
    edited = copy.deepcopy(rows)
    edit(edited[moving])
    [problem] = recount(edited)
    assert problem.startswith(f"rows/{moving}/{field}")


class _Evidence:
    root = Path("evidence")

    def __init__(self, recorded: int) -> None:
        self.layers = {"resnet20/direct": np.zeros((4, 21), np.float32)}
        self.recorded = recorded

    def json(self, name: str) -> Any:
        return {"models": {"resnet20": {"sketch_outputs": self.recorded}}}


def test_the_layer_count_is_the_layer_scores_and_a_recorded_one_that_differs_is_named() -> None:
    assert conv_layers(_Evidence(21), "resnet20") == 21  # type: ignore[arg-type]
    with pytest.raises(KitError, match=r"models/resnet20/sketch_outputs is 20, but "
                                       r"score/layers\.npz scores 21 layers"):
        conv_layers(_Evidence(20), "resnet20")  # type: ignore[arg-type]


@pytest.mark.parametrize(("path", "value"), [
    (("fixed", "rates", "direct/tpr", "mean"), 12.5),
    (("nested", "differences", "metamorphic-direct/tpr", "p97_5"), -1.0),
    (("nested", "decision", "superior"), True),
    (("fixed", "replicates"), 499),
    (("nested", "seed"), 1),
])
def test_each_bootstrap_summary_edited_alone_is_named(tmp_path: Path, path: tuple[str, ...],
                                                      value: object) -> None:
    """``kit.drift.recount``: the stored bootstrap summaries against the replicates drawn
    again from the shipped table; the shipped ones agree, an edited field is named."""
    import shutil

    from kit.drift.recount import SUMMARY, bootstrap_problems
    from kit.drift.shipped import Evidence

    folder = tmp_path / "digits"
    shutil.copytree(ROOT / "claims/drift/evidence/digits", folder)
    assert bootstrap_problems(Evidence(folder)) == []
    stored = json.loads((folder / SUMMARY).read_text())
    here = stored
    for key in path[:-1]:
        here = here[key]
    here[path[-1]] = value
    (folder / SUMMARY).write_text(json.dumps(stored))
    [problem] = bootstrap_problems(Evidence(folder))
    assert problem.startswith(f"{folder / SUMMARY}: /{'/'.join(path)} says {value!r}, its "
                              "replicates give ")


def _fm_rate(m: dict[str, Any]) -> None:
    m["tpr"]["rate"] = 0.5


def _fm_fpr(m: dict[str, Any]) -> None:
    m["fpr"]["alarms"] = 3  # the clean alarms per model still say 0


def _fm_detector(m: dict[str, Any]) -> None:
    m["calibrated_detectors"]["direct"]["tpr"]["count"] -= 1


def _fm_row(m: dict[str, Any]) -> None:
    m["per_fault"][4]["n"] = 200


def _fm_fault(m: dict[str, Any]) -> None:
    m["per_fault"][0]["fault"] = "resnet20-early-scale-low-x"


def _fm_count(m: dict[str, Any]) -> None:
    m["faults"] = 53


@pytest.mark.parametrize(("edit", "field"), [
    (_fm_rate, "tpr/rate"), (_fm_fpr, "fpr/alarms"),
    (_fm_detector, "calibrated_detectors/direct/tpr/count"), (_fm_row, "per_fault/4/n"),
    (_fm_fault, "per_fault: its faults"), (_fm_count, "faults says")])
def test_each_fault_matrix_field_edited_alone_is_named(edit: Any, field: str) -> None:
    from kit.drift.recompute_realdrift import FAULT_MATRIX, recount_fault_matrix
    from kit.drift.shipped import Evidence

    drift = Evidence(ROOT / "claims/drift/evidence/digits")
    matrix = json.loads((ROOT / "claims/realdrift/evidence/digits" / FAULT_MATRIX).read_text())
    assert recount_fault_matrix(matrix, drift) == []
    edited = copy.deepcopy(matrix)
    edit(edited)
    problems = recount_fault_matrix(edited, drift)
    assert problems
    assert problems[0].startswith(field), problems


def test_deep_recounts_the_localisation_summaries_and_names_an_edited_field(
        tmp_path: Path) -> None:
    """``verify --deep``: the layer sketches' bootstrap over the same draws gives every
    stored localisation field; one edited alone is named, and a run without ``deep`` leaves
    those fields out (and says so)."""
    from kit.drift.recount import SUMMARY, bootstrap_problems
    from kit.drift.shipped import Evidence

    folder = tmp_path / "digits"
    shutil.copytree(ROOT / "claims" / "drift" / "evidence" / "digits", folder)
    path = folder / SUMMARY
    summary = json.loads(path.read_text())
    summary["nested"]["localisation"]["direct/top1"]["mean"] += 0.5
    path.write_text(json.dumps(summary))
    ev = Evidence(folder)
    assert bootstrap_problems(ev) == []
    [problem] = bootstrap_problems(ev, deep=True)
    assert problem.startswith(f"{path}: /nested/localisation/direct/top1/mean says ")


def _pair_row(rows: list[dict[str, Any]]) -> int:
    return next(i for i, r in enumerate(rows) if r["release"] == "1.29.0"
                and r["level"] == "enable_all" and r["threads"] == 1
                and r["export"] == "folded" and r["model"] == "resnet20")


@pytest.mark.parametrize(("path", "value"), [
    (("max_abs_logit",), 1e-3), (("alarms", "direct", "interval"), [0.0, 0.5]),
    (("flips", "orig"), 0)])
def test_each_drift_cell_row_of_the_sweep_edited_alone_is_named(
        path: tuple[str, ...], value: Any) -> None:
    """``recount_pair``: the sweep's rows of the drift study's four clean cells against the
    drift evidence's clean logits of the same cells; the shipped rows agree (every measure
    and the folded thresholds), an edited one is named."""
    from kit.drift.recompute_realdrift import recount_pair
    from kit.drift.shipped import Evidence

    record = json.loads(CELLS.read_text())
    drift = Evidence(ROOT / "claims/drift/evidence/digits")
    assert recount_pair(record, drift) == []
    i = _pair_row(record["rows"])
    edited = copy.deepcopy(record)
    here = edited["rows"][i]
    for key in path[:-1]:
        here = here[key]
    if path[-1] == "orig" and here[path[-1]] == value:
        value = 7
    here[path[-1]] = value
    found = recount_pair(edited, drift)
    assert found, "the edit went unseen"
    assert found[0].startswith(f"rows/{i}/{'/'.join(path)}"), found
    edited = copy.deepcopy(record)
    edited["thresholds"]["resnet20.folded"]["direct"] *= 2
    assert recount_pair(edited, drift)[0].startswith("thresholds/resnet20.folded/direct")


def test_deep_recounts_the_drift_cells_polygraphy_alarms() -> None:
    from kit.drift.recompute_realdrift import recount_pair
    from kit.drift.shipped import Evidence

    record = json.loads(CELLS.read_text())
    i = _pair_row(record["rows"])
    record["rows"][i]["polygraphy"] = {"alarms": 3, "n": 300, "rate": 0.01}
    drift = Evidence(ROOT / "claims/drift/evidence/digits")
    assert recount_pair(record, drift) == []  # a plain verify leaves them to --deep
    assert [p.split(" says")[0] for p in recount_pair(record, drift, deep=True)] == [
        f"rows/{i}/polygraphy/alarms", f"rows/{i}/polygraphy/rate"]
