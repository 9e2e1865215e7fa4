"""The SciML report rendered from the shipped evidence: its tables count what the records
hold, its figures draw it, and it refuses to write where verify accounts for every file.
Also covers ``kit.sciml.report_records``: each record the report reads is validated
before use, a bad one a one-line error naming the file and the field."""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

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


@pytest.mark.parametrize("name", ["ledger.json", "unified.json", "mgn_faults.json",
                                  "second_task.json", "operator_floor.json"])
@pytest.mark.parametrize(("text", "said"), [
    ("[]", "(top): [] is not of type 'object'"), ("{}", "(top): '"),
    ("null", "(top): None is not of type 'object'"), ("NaN", "(top): nan is not of type")])
def test_a_record_that_is_not_the_runs_is_one_line_naming_the_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str,
        said: str) -> None:
    """``[]``, ``{}``, ``null`` or ``NaN`` in place of a record gave a KeyError or a
    TypeError from the table that read it."""
    from kit.__main__ import main

    folder = tmp_path / "run"
    shutil.copytree(SHIPPED, folder, ignore=shutil.ignore_patterns("weights"))
    (folder / name).write_text(text)
    assert main(["sciml-report", "--evidence", str(folder), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kit: error: {folder / name}: {said}")
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("name", ["ledger.json", "unified.json"])
def test_a_record_that_is_a_link_is_refused_by_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    """A record linked to a file of the host (here the shipped record itself, kept
    outside the folder named) was read through the link and its tables rendered."""
    from kit.__main__ import main

    folder = tmp_path / "run"
    shutil.copytree(SHIPPED, folder, ignore=shutil.ignore_patterns("weights"))
    (folder / name).unlink()
    (folder / name).symlink_to(SHIPPED / name)
    assert main(["sciml-report", "--evidence", str(folder), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kit: error: {folder / name}: a symbolic link (to {SHIPPED / name})"
                          ", and the kit reads no file through a link; ")
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "o").exists()


def _edited(tmp_path: Path, name: str, edit: Any) -> Path:
    folder = tmp_path / "run"
    shutil.copytree(SHIPPED, folder, ignore=shutil.ignore_patterns("weights"))
    record = json.loads((folder / name).read_text())
    edit(record)
    (folder / name).write_text(json.dumps(record))
    return folder


@pytest.mark.parametrize(("name", "edit", "said"), [
    ("unified.json", lambda r: r["entries"][0].pop("kind"), "entries/0: 'kind' is a required"),
    ("unified.json", lambda r: r["entries"][0].update(n_trials=0), "entries/0/n_trials: 0 is"),
    ("unified.json", lambda r: r["labelled"]["permutation"].pop("recall"),
     "labelled/permutation: 'recall' is a required property"),
    ("mgn_faults.json", lambda r: r["scale_sweep"]["2"].pop("mirror"),
     "scale_sweep/2: no rate of mirror"),
    ("mgn_faults.json", lambda r: r["fraction_sweep"].update(x=r["fraction_sweep"]["0.5"]),
     "fraction_sweep: 'x' does not match"),
    ("second_task.json", lambda r: r.update(permutation_violations=[]),
     "permutation_violations: [] should be non-empty"),
    ("operator_floor.json", lambda r: r["resolutions"][0].update(h=0),
     "resolutions/0/h: 0 is less than the minimum of 1e-12"),
    ("ledger.json", lambda r: r["verdicts"][0].pop("case"), "verdicts/0: 'case' is a required"),
    ("ledger.json", lambda r: r.update(verdicts=[]), "ledger.json: no verdicts"),
])
def test_a_record_lacking_a_field_the_report_reads_names_it(
        tmp_path: Path, name: str, edit: Any, said: str) -> None:
    folder = _edited(tmp_path, name, edit)
    with pytest.raises(KitError, match=re.escape(said)) as caught:
        report.write_report(folder, tmp_path / "out")
    assert str(caught.value).startswith(f"{folder / name}: ")
    assert not (tmp_path / "out").exists()


def _ledger() -> dict[str, Any]:
    from kit.claims.ledger import load_ledger

    return load_ledger(report.LEDGER)


def _by_id(ledger: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in ledger["claims"]}


def test_the_verdict_figure_marks_the_papers_figure3_points_from_the_ledger() -> None:
    ledger, verdicts = _ledger(), json.loads((SHIPPED / "ledger.json").read_text())
    claims = _by_id(ledger)
    number = {i: report.paper_number(ledger, i) for i in ("B-016", "B-021", "B-041")}
    # each number is the one the Figure 3 caption prints for its point (P1, P3, P4)
    for claim_id, quoted in (("B-016", "V={:g}"), ("B-021", "V={:g}"), ("B-041", "V/floor={:g}")):
        assert quoted.format(number[claim_id]) in claims[claim_id]["where"]
    tolerance = report.paper_number(ledger, "B-012")
    expected = [(claims["B-004"]["value"], number["B-016"] / tolerance),
                (report.paper_number(ledger, "B-003"), number["B-021"] / tolerance),
                (claims["B-002"]["value"], number["B-041"])]
    fig = report.verdict_figure(verdicts, report.paper_points(ledger))
    (stars,) = [c for c in fig.axes[0].collections if c.get_gid() == "paper"]
    assert np.allclose(np.asarray(stars.get_offsets()), expected)
    assert stars.get_label().startswith("paper")
    assert "B-041" in stars.get_label()
    assert "paper" in fig.axes[0].get_title()
    report.pyplot().close(fig)


def test_the_paper_points_follow_the_ledger_not_the_code(monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = _ledger()
    claims = _by_id(ledger)
    monkeypatch.setitem(claims["B-041"], "published", "median V/floor 7.25")
    assert report.paper_points(ledger)[-1]["ratio"] == 7.25
    monkeypatch.setitem(claims["B-041"], "published", "no number")
    with pytest.raises(KitError, match="B-041"):
        report.paper_points(ledger)


def test_the_heatmap_sets_each_detectors_precision_recall_beside_the_papers() -> None:
    ledger, unified = _ledger(), json.loads((SHIPPED / "unified.json").read_text())
    claims = _by_id(ledger)
    paper = report.paper_pr(ledger)
    recall = [p["value"] for p in claims["B-077"]["rules"]["kit"]["parts"]
              if p["label"] == "recall"]
    assert paper == {"permutation": (*claims["B-076"]["value"], "B-076"),
                     "conservation": (claims["B-077"]["value"], *recall, "B-077")}
    fig = report.heatmap_figure(unified, paper)
    ax = fig.axes[0]
    assert ax.xaxis.label.get_gid() == "paper"
    for detector, (p, r, claim_id) in paper.items():
        kit = unified["labelled"][detector]
        assert (f"{detector}: kit {kit['precision']['value']:.2f}/{kit['recall']['value']:.2f}, "
                f"paper {p:.2f}/{r:.2f} ({claim_id})") in ax.get_xlabel()
    report.pyplot().close(fig)


def test_the_report_command_keeps_a_users_files_in_its_out_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``sciml-report --out D`` follows the kit's folder rule (``kit.owned``): a D holding a
    user's ``index.html`` is refused and left as it was; in a D the kit wrote, a second
    run keeps a file the user added."""
    from kit.__main__ import main

    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "index.html").write_text("mine")
    assert main(["sciml-report", "--evidence", str(SHIPPED), "--out", str(theirs)]) == 2
    assert "holds files the kit did not write (index.html)" in capsys.readouterr().err
    assert sorted(p.name for p in theirs.iterdir()) == ["index.html"]
    assert (theirs / "index.html").read_text() == "mine"
    ours = tmp_path / "ours"
    assert main(["sciml-report", "--evidence", str(SHIPPED), "--out", str(ours)]) == 0
    (ours / "notes.txt").write_text("mine")
    assert main(["sciml-report", "--evidence", str(SHIPPED), "--out", str(ours)]) == 0
    assert (ours / "notes.txt").read_text() == "mine"
    assert "Operator floor" in (ours / "index.html").read_text()


def test_the_report_into_its_run_folder_keeps_a_users_report_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without ``--out`` the report goes to ``<evidence>/report`` by the same rule: a
    user's files there (their own ``index.html``, mode 0600) are refused and kept."""
    import shutil

    from kit.__main__ import main

    evidence = tmp_path / "run"
    shutil.copytree(SHIPPED, evidence)
    mine = evidence / "report" / "index.html"
    mine.parent.mkdir()
    mine.write_text("mine")
    mine.chmod(0o600)
    assert main(["sciml-report", "--evidence", str(evidence)]) == 2
    assert "report: holds files the kit did not write (index.html)" in \
        capsys.readouterr().err
    assert mine.read_text() == "mine"
    assert mine.stat().st_mode & 0o777 == 0o600
    mine.unlink()
    assert main(["sciml-report", "--evidence", str(evidence)]) == 0
    assert "Operator floor" in mine.read_text()
