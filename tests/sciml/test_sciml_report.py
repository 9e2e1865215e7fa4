"""The SciML report rendered from the shipped evidence: its tables count what the records
hold, its figures draw it, and it refuses to write where verify accounts for every file."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from kit.errors import KitError
from kit.paths import ROOT
from kit.sciml import report

SHIPPED = ROOT / "claims" / "sciml" / "evidence" / "kit"


def _rows(path: Path) -> list[list[str]]:
    lines = path.read_text().splitlines()[2:]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines]


def test_the_report_of_the_shipped_run_counts_every_verdict(tmp_path: Path) -> None:
    page = report.write_report(SHIPPED, tmp_path / "report")
    ledger = json.loads((SHIPPED / "ledger.json").read_text())
    rows = _rows(tmp_path / "report" / "table1.md")
    header = (tmp_path / "report" / "table1.md").read_text().splitlines()[0]
    kinds = [c.strip() for c in header.strip("|").split("|")][2:-1]
    per_card: Counter[tuple[str, str]] = Counter()
    for card, _subject, *counts, total in rows:
        assert sum(map(int, counts)) == int(total)
        for kind, count in zip(kinds, counts, strict=True):
            per_card[(card, kind)] += int(count)
    # the table's counts, summed over subjects, are the ledger's own per-card counts
    assert {k: v for k, v in per_card.items() if v} == {
        (card, kind): n for card, found in ledger["counts"].items() for kind, n in found.items()}
    assert sum(int(r[-1]) for r in rows) == len(ledger["verdicts"])
    text = page.read_text()
    for name in ("figure1-operator-floor.png", "figure2-verdict-reading.png",
                 "figure3-detection-heatmap.png"):
        assert f"src='{name}'" in text
        with Image.open(tmp_path / "report" / name) as image:
            assert min(image.size) > 300


def test_the_floor_figure_draws_the_recorded_resolutions_and_slope() -> None:
    floor = json.loads((SHIPPED / "operator_floor.json").read_text())
    fig = report.floor_figure(floor)
    lines = {line.get_gid(): line for line in fig.axes[0].get_lines()}
    assert set(lines) == {"measured", "closed-form", "fit", "bound"}
    assert list(lines["measured"].get_ydata()) == [r["measured"] for r in floor["resolutions"]]
    assert list(lines["bound"].get_ydata()) == [r["bound"] for r in floor["resolutions"]]
    assert f"slope {floor['slope']:.4f}" in lines["fit"].get_label()
    report.pyplot().close(fig)


def test_the_heatmap_holds_each_entrys_detection_rate() -> None:
    unified = json.loads((SHIPPED / "unified.json").read_text())
    fig = report.heatmap_figure(unified)
    (image,) = fig.axes[0].get_images()
    rates = np.asarray(image.get_array())
    assert rates.shape[0] == len(unified["entries"]) == 60
    detectors = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    entry = unified["entries"][0]
    for d, rate in zip(detectors, rates[0], strict=True):
        if d in entry["detections"]:
            assert rate == entry["detections"][d] / report.trials(entry)
    report.pyplot().close(fig)


def test_the_subject_of_a_case() -> None:
    assert report.subject("mgn-seed0-train-f39-p0") == "mgn"
    assert report.subject("fno-heat-seed0-case0") == "fno-heat"
    assert report.subject("airfoil-subject5-p4") == "airfoil"
    assert report.subject("grid-256") == "grid-256"


def test_the_report_refuses_claims_and_names_a_missing_record(tmp_path: Path) -> None:
    with pytest.raises(KitError, match="never written under"):
        report.write_report(SHIPPED)
    folder = tmp_path / "run"
    shutil.copytree(SHIPPED, folder)
    (folder / "unified.json").unlink()
    with pytest.raises(KitError, match=r"unified\.json: missing"):
        report.write_report(folder)
    assert not (folder / "report").exists()
