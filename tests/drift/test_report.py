"""The drift report's figures draw the paper's values: each mapped claim is the one whose
compute recomputes that bar, the values come from the ledger by id (a changed ledger value
moves the marker), and every figure plots them beside the kit's, here on the shipped
digits summaries.

Also covers ``kit.drift.grid`` (no test file of its own)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kit.claims.ledger import load_ledger
from kit.drift import report
from kit.drift.stages.report import LEDGER
from kit.errors import KitError
from kit.paths import ROOT

EVIDENCE = ROOT / "claims" / "drift" / "evidence" / "digits"


@pytest.fixture(scope="module")
def ledger() -> dict[str, Any]:
    return load_ledger(LEDGER)


@pytest.fixture(scope="module")
def summaries() -> dict[str, Any]:
    return {name: json.loads((EVIDENCE / name / "summary.json").read_text())
            for name in ("score", "bootstrap", "sensitivity")}


def _expected_compute(figure: str, series: str, x: str) -> tuple[str, dict[str, Any]]:
    """The compute spec a ledger entry must have to be the paper's value of that bar."""
    if figure == "detection":
        return "drift.rate", {"detector": x, **({"what": "fpr"} if series == "fpr" else {})}
    if figure == "localisation":
        return "drift.localisation", {"kind": x, "stat": series}
    if figure == "rotation":
        return "drift.grid", {"condition": x, "field": series}
    return "drift.geometry", {"field": series}


def test_each_paper_claim_recomputes_its_bar(ledger: dict[str, Any]) -> None:
    by_id = {c["id"]: c for c in ledger["claims"]}
    mapped = [(f, s, x, i) for f, series in report.PAPER_CLAIMS.items()
              for s, ids in series.items() for x, i in ids.items()]
    assert len(mapped) == 8 + 7 + 16 + 1
    for figure, series, x, claim_id in mapped:
        compute = by_id[claim_id]["compute"]
        args = dict(compute.get("args", {}))
        if args.get("what") == "tpr":
            del args["what"]  # the default
        assert (compute["function"], args) == _expected_compute(figure, series, x), claim_id


def test_paper_values_are_the_ledger_values_by_id(ledger: dict[str, Any]) -> None:
    by_id = {c["id"]: c["value"] for c in ledger["claims"]}
    paper = report.paper_values(ledger)
    assert paper["detection"]["tpr"]["direct"] == by_id["A-118"]
    assert paper["detection"]["fpr"]["maximum"] == by_id["A-130"]
    assert paper["localisation"]["mrr"]["direct"] == pytest.approx(100 * by_id["A-137"])
    assert paper["rotation"]["stability"] == {"rot20-bilinear": by_id["A-092"]}
    assert paper["geometry"]["spearman_rho"]["primary"] == by_id["A-095"]

    changed = copy.deepcopy(ledger)
    for claim in changed["claims"]:
        if claim["id"] == "A-118":
            claim["value"] = 12.5
    assert report.paper_values(changed)["detection"]["tpr"]["direct"] == 12.5

    for claim in changed["claims"]:
        if claim["id"] == "A-133":
            claim["value"] = "about a third"
    with pytest.raises(KitError, match="A-133"):
        report.paper_values(changed)


def _paper_lines(ax: Any) -> list[tuple[list[float], list[float]]]:
    return [(list(line.get_xdata()), list(line.get_ydata())) for line in ax.lines
            if line.get_gid() == "paper"]


def test_figures_plot_the_paper_values(ledger: dict[str, Any], summaries: dict[str, Any],
                                       tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    paper = report.paper_values(ledger)
    score, boot, sens = summaries["score"], summaries["bootstrap"], summaries["sensitivity"]

    fig = report.detection_figure(score, boot, paper)
    for ax, what in zip(fig.axes, ("tpr", "fpr"), strict=True):
        assert _paper_lines(ax) == [([0, 1, 2, 3], [paper["detection"][what][d] for d in
                                     ("metamorphic", "direct", "mixed", "maximum")])]
        assert report.PAPER_LABEL in [t.get_text() for t in ax.get_legend().get_texts()]
        # the paper's mark has a shape no whisker has, and the whiskers have no caps
        [mark] = [line for line in ax.lines if line.get_gid() == "paper"]
        assert mark.get_marker() not in ("_", "|", "", "None")
        assert [line for line in ax.lines if line.get_gid() != "paper"
                and line.get_marker() in ("_", "|")] == []
    plt.close(fig)

    fig = report.localisation_figure(score, paper)
    [(_, ys)] = _paper_lines(fig.axes[0])
    loc = paper["localisation"]
    assert ys == [*loc["top1"].values(), *loc["top3"].values(), *loc["mrr"].values()]
    plt.close(fig)

    fig = report.rotation_figure(sens, paper)
    keys = list(sens)
    drawn = [{keys[int(x)]: y for x, y in zip(xs, ys, strict=True)}
             for xs, ys in _paper_lines(fig.axes[0])]
    assert drawn == [paper["rotation"][f] for f in ("metamorphic/tpr", "direct/tpr",
                                                    "metamorphic/fpr", "stability")]
    plt.close(fig)

    # a changed ledger value moves the marker
    changed = copy.deepcopy(ledger)
    for claim in changed["claims"]:
        if claim["id"] == "A-114":
            claim["value"] = 1.5
    fig = report.detection_figure(score, boot, report.paper_values(changed))
    assert _paper_lines(fig.axes[0])[0][1][0] == 1.5
    plt.close(fig)

    table = {"role": np.array([1, 1, 0]), "fault": np.array([0, 1, 0]),
             "cosine": np.array([0.2, 0.9, 0.5]), "ratio": np.array([0.4, 0.1, 0.2])}
    fig = report.geometry_figure(score, table, paper)
    published = paper["geometry"]["spearman_rho"]["primary"]
    assert f"{report.PAPER_LABEL} {published:.3f}" in fig.axes[0].get_title()
    plt.close(fig)

    names = report.figures(tmp_path, score, boot, sens, table, paper)
    assert names == ["figure1-detection.png", "figure2-localisation.png",
                     "figure3-rotation-grid.png", "figure4-geometry.png"]
    assert all((tmp_path / n).read_bytes().startswith(b"\x89PNG") for n in names)
