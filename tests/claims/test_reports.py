"""Every study's report from the shipped evidence (``python -m kit reports``): written in the
reviewer's environment (``.venv-verify`` when it is built from the current lock, else this
Python) with onnx, onnxruntime and torch unimportable; each page links only files that
exist and every figure it draws; headings say what they show; the drift map is labelled
and marked; long tables are folded below their figure; the paper's values are drawn from
the ledgers; a failure leaves no folder behind.

Also covers ``kit.reporting`` (the page, its sections and the fold)."""

from __future__ import annotations

import html
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kit.claims import reports
from kit.claims.ledger import load_ledger
from kit.errors import KitError
from kit.owned import MARK
from kit.paths import ROOT
from kit.reporting import FOLD_ROWS, PageFigure, PageTable, html_page
from kit.runtime import venvs

NAMES = {"drift", "sciml", "sweep", "corpus", "detectors"}
BLOCKED = ("torch", "onnx", "onnxruntime")


# Run first in the child: importing a blocked module (or a submodule) fails as if it were
# not installed.
BLOCKER = """import sys
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Blocked())
"""


def _python() -> str:
    current = venvs.is_current(venvs.VERIFY_VENV, venvs.VERIFY_LOCK, ROOT)
    return str(venvs.venv_python(venvs.VERIFY_VENV)) if current else sys.executable


def _run(out: Path, blocked: tuple[str, ...] = BLOCKED) -> subprocess.CompletedProcess[str]:
    code = BLOCKER.format(blocked=blocked) + (
        f"from kit.__main__ import main\nsys.exit(main(['reports', '--out', {str(out)!r}]))\n")
    return subprocess.run([_python(), "-c", code], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, check=False)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("reports") / "out"
    proc = _run(out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(out / "index.html")
    return out


def _pages(out: Path) -> list[Path]:
    return sorted(out.rglob("*.html"))


def test_every_report_is_written_with_its_figures(rendered: Path) -> None:
    assert {p.name for p in rendered.iterdir() if p.is_dir()} == NAMES
    assert len(_pages(rendered)) == 1 + len(NAMES)
    for folder in (rendered / name for name in NAMES):
        pngs = sorted(folder.glob("*.png"))
        assert pngs, folder
        for png in pngs:
            data = png.read_bytes()
            assert data[:8] == b"\x89PNG\r\n\x1a\n", png
            assert len(data) > 10_000, png
        page = next(folder.glob("*.html")).read_text()
        assert set(re.findall(r"<img src='([^']+)'", page)) == {p.name for p in pngs}


def test_every_link_leads_to_a_file_that_exists(rendered: Path) -> None:
    """Relative links only; every report links back to the index, and every page names
    the claims page (outside the checkout, as here, by its place in the checkout: a link
    would spell the local path; inside it, by a link)."""
    links = 0
    for page in _pages(rendered):
        text = page.read_text()
        targets = re.findall(r"(?:src|href)='([^']+)'", text)
        assert targets.count("../index.html") == (page.parent != rendered), page
        assert "the claims page: <code>runs/verify/index.html</code> in the checkout" in text
        for target in targets:
            assert not re.match(r"[a-z]+:", target), (page, target)  # nothing outside
            assert (page.parent / target).is_file(), (page, target)
            links += 1
    # the index, then each report's figures, then the index from each report
    assert links == 5 + 4 + 3 + 1 + 1 + 1 + 5
    inside = ROOT / "runs" / "reports"  # the default: a relative link to the claims page
    assert "<a href='../../verify/index.html'>the claims page</a>" in \
        reports.navigation(inside / "drift" / "index.html", inside)


def test_headings_say_what_they_show(rendered: Path) -> None:
    for page in _pages(rendered):
        text = page.read_text()
        headings = re.findall(r"<h[12]>([^<]*)</h[12]>", text)
        assert len(headings) >= 1
        stems = {p.stem for p in page.parent.iterdir()} | {p.name for p in page.parent.iterdir()}
        for heading in headings:
            assert heading not in stems, (page, heading)
            assert not re.fullmatch(r"(table|figure)\d.*|.*\.(png|csv|md)", heading), heading
        assert "{&#x27;state&#x27;" not in text, page  # no condition printed as a dict
    drift = (rendered / "drift" / "index.html").read_text()
    assert "<h2>Table 1: held-out detection per detector" in drift
    for number in (1, 2, 3, 4):  # each of the paper's tables follows the kit's, as printed
        assert f"<h2>Table {number} as the paper printed it (CIFAR-100" in drift
    # each number kept on one line (a span of class n)
    assert "<td>Direct L2 (plain comparison)</td><td><span class='n'>82.75%</span></td>" \
        in drift
    assert "<td><span class='n'>5</span>°, bilinear</td>" in drift
    sciml = (rendered / "sciml" / "index.html").read_text()
    assert "Section 5.2 MR-card-to-verdict map, as the paper printed it" in sciml
    assert "<th>Interpretation boundary</th>" in sciml
    assert str(ROOT) not in sciml + drift  # no absolute local path on a page


def test_every_report_says_which_rule_its_figures_use(rendered: Path,
                                                     tmp_path: Path) -> None:
    """Each report names the rule or revision its figures use, in the claims page's terms:
    the corpus its own (kit.corpus.report.RULE_SHOWN), the others ``rules_shown``, whose
    words follow the protocol's revisions record."""
    from kit.reporting import rules_shown

    for name, study in (("drift/index.html", "drift"), ("sciml/index.html", "sciml"),
                        ("sweep/index.html", "realdrift"),
                        ("detectors/detectors.html", "corpus-detectors")):
        text = html.unescape((rendered / name).read_text())
        assert rules_shown(study) in text, name
    assert "first committed in 4ecbca9 and never revised" in rules_shown("realdrift")
    assert "one revision (corpus-detectors.revisions.yaml), none after its evidence existed" \
        in rules_shown("corpus-detectors")
    record = {"first_committed": {"commit": "abc1234"},
              "revisions": [{"evidence_existed": False}, {"evidence_existed": True}]}
    (tmp_path / "x.revisions.yaml").write_text(yaml.safe_dump(record))
    assert rules_shown("x", tmp_path) == (
        "kit/protocols/x.yaml, first committed in abc1234; 2 revisions (x.revisions.yaml), "
        "1 after its evidence existed: the claims page decides under the rules as first "
        "committed, the figures show the evidence as recorded")


def test_the_sweeps_alarm_table_is_folded_below_the_drift_map(rendered: Path) -> None:
    text = (rendered / "sweep" / "index.html").read_text()
    cells = json.loads((ROOT / "claims/realdrift/evidence/digits/sweep/cells.json").read_text())
    rows = {(r["release"], r["level"], r["threads"], r["export"]) for r in cells["rows"]}
    assert text.count("<tr><td>") >= len(rows) > FOLD_ROWS
    assert text.index("<img src='drift-map.png'") < text.index("<details>") \
        < text.index("<tr><td><span class='n'>1.15.1</span>")
    assert "graph optimisation levels" in text
    assert "two-thread" in text


def test_the_drift_map_has_axis_titles_and_marks_the_reference_and_the_pair() -> None:
    from kit.drift import sweep_report
    from kit.reporting import pyplot

    cells = json.loads((ROOT / "claims/realdrift/evidence/digits/sweep/cells.json").read_text())
    fig = pyplot().figure()
    ax = fig.add_subplot()
    releases = sorted({r["release"] for r in cells["rows"]}, key=sweep_report._key)
    levels = list(sweep_report.LEVEL_ORDER)
    rows = [r for r in cells["rows"] if r["model"] == "resnet20" and r["export"] == "folded"]
    sweep_report._panel(ax, rows, releases, levels)
    for cell, letter in zip(cells["pair"], "RC", strict=True):
        sweep_report._mark(ax, releases, levels, cell, letter)
    marks = {p.get_gid(): p.get_xy() for p in ax.patches}
    assert marks == {"mark-R": (levels.index("disable_all") - 0.5, releases.index("1.20.1") - 0.5),
                     "mark-C": (levels.index("enable_all") - 0.5, releases.index("1.29.0") - 0.5)}
    dots = [c for c in ax.collections if c.get_gid() == "threads"]
    moved = [r for r in rows if r["threads"] == 2 and r["vs_one_thread"]]
    assert len(dots) == 1
    assert len(dots[0].get_offsets()) == len(moved) > 0
    pyplot().close(fig)


def test_the_floor_figure_draws_the_papers_slope_from_the_ledger() -> None:
    from kit.reporting import pyplot
    from kit.sciml import report

    ledger = load_ledger(ROOT / "claims" / "sciml.yaml")
    paper = report.paper_slope(ledger)
    assert paper["slope"] == next(c["value"] for c in ledger["claims"] if c["id"] == "B-072")
    floor = json.loads((ROOT / "claims/sciml/evidence/kit/operator_floor.json").read_text())
    fig = report.floor_figure(floor, paper)
    (line,) = [ln for ln in fig.axes[0].get_lines() if ln.get_gid() == "paper"]
    h, y = line.get_xdata(), line.get_ydata()
    slope = math.log(y[-1] / y[0]) / math.log(h[-1] / h[0])
    assert slope == pytest.approx(paper["slope"])
    assert "paper: slope" in line.get_label()
    pyplot().close(fig)


def _tmp_siblings(out: Path) -> list[Path]:
    """Temporaries left beside or inside ``out`` (the kit's staging folders)."""
    return sorted([*out.parent.glob(f".{out.name}.*"), *out.glob(".kit-staging.*")])


def test_a_missing_evidence_folder_is_named_and_nothing_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kit.__main__ import main

    gone = reports.Report("gone", "a study", "claims/nowhere/evidence/x", reports._sciml)
    monkeypatch.setattr(reports, "REPORTS", (*reports.REPORTS, gone))
    out = tmp_path / "out"
    assert main(["reports", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kit: error: claims/nowhere/evidence/x: missing")
    assert not out.exists()
    assert _tmp_siblings(out) == []


def test_a_failure_midway_leaves_no_folder_and_keeps_an_earlier_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(evidence: Path, out: Path) -> Path:
        raise KitError(f"{evidence}: broken")

    out = tmp_path / "out"
    drift, _, _, corpus, _ = reports.REPORTS
    broken = reports.Report("broken", "a study", "claims/sciml/evidence/kit", fail)
    monkeypatch.setattr(reports, "REPORTS", (corpus, broken))
    with pytest.raises(KitError, match="broken"):
        reports.write_reports(out)
    assert not out.exists()
    assert _tmp_siblings(out) == []

    monkeypatch.setattr(reports, "REPORTS", (corpus,))
    page = reports.write_reports(out)
    assert (out / "corpus" / "index.html").is_file()
    assert (out / MARK).is_file()
    assert "href='corpus/index.html'" in page.read_text()
    monkeypatch.setattr(reports, "REPORTS", (drift, broken))
    with pytest.raises(KitError, match="broken"):
        reports.write_reports(out)
    assert (out / "corpus" / "index.html").is_file()
    assert _tmp_siblings(out) == []


def test_a_folder_that_is_not_an_earlier_output_or_under_claims_is_refused(
        tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("keep")
    with pytest.raises(KitError, match="holds files the kit did not write"):
        reports.write_reports(tmp_path)
    assert (tmp_path / "mine.txt").read_text() == "keep"
    with pytest.raises(KitError, match="never written under"):
        reports.write_reports(ROOT / "claims" / "reports")


def test_a_missing_matplotlib_is_a_kit_error_naming_the_environment(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = _run(out, (*BLOCKED, "matplotlib"))
    assert proc.returncode == 2
    assert proc.stderr.startswith("kit: error: python -m kit reports needs the module "
                                  "'matplotlib'")
    assert "python3 -m kit.runtime.venvs verify" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()
    assert _tmp_siblings(out) == []


def test_a_page_folds_a_long_table_and_heads_each_section() -> None:
    short = PageTable("Short", ["a"], [["1"]])
    long = PageTable("Long", ["a"], [[str(i)] for i in range(FOLD_ROWS + 1)], note="why")
    text = html_page("t", "Heading", {"k": "v"}, [PageFigure("A figure", "f.png"), short, long])
    assert text.count("<details>") == 1
    assert text.index("<h2>Short</h2>") < text.index("<h2>Long</h2>") < text.index("<details>")
    assert f"show the {FOLD_ROWS + 1} rows" in text
    assert "<p class='note'>why</p>" in text
    assert text.index("<img src='f.png' alt='A figure'>") < text.index("<h2>Short</h2>")
    assert text.index("<h2>Provenance</h2>") > text.index("</details>")


def test_chromium_loads_every_report_at_two_widths(rendered: Path, tmp_path: Path) -> None:
    """Each report page in headless Chromium at 1,024 and 1,400 px: its closing script
    runs (no error before it) and nothing overflows horizontally."""
    from tests.browser import chromium_path, headless

    chromium = chromium_path()
    pages = _pages(rendered)
    assert len(pages) == 6
    for page in pages:
        for width in (1024, 1400):
            dom = headless(chromium, tmp_path / f"home-{width}", f"--window-size={width},900",
                           "--dump-dom", page.as_uri()).stdout
            assert '<body data-overflow="no" data-ready="yes">' in dom, (page, width)
            assert '<html data-split="0">' in dom, (page, width)  # no number cut by a wrap


def test_a_file_the_user_added_is_kept_and_the_folders_mode_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule of ``kit.owned``: a second run replaces only what the first wrote."""
    out = tmp_path / "out"
    out.mkdir(mode=0o700)
    _, _, _, corpus, _ = reports.REPORTS
    monkeypatch.setattr(reports, "REPORTS", (corpus,))
    reports.write_reports(out)
    (out / "notes.txt").write_text("mine")
    (out / "corpus" / "mine.md").write_text("also mine")
    reports.write_reports(out)
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "corpus" / "mine.md").read_text() == "also mine"
    assert out.stat().st_mode & 0o777 == 0o700
    (out / "index.html").write_text("edited")
    with pytest.raises(KitError, match=r"index\.html: changed since the kit wrote it"):
        reports.write_reports(out)
    assert (out / "index.html").read_text() == "edited"


def test_every_number_in_a_cell_is_kept_on_one_line() -> None:
    from kit.reporting import numbers

    assert numbers("Direct L2, rot5") == "Direct L2, rot5"  # a name, not a number
    assert numbers("0.997 [0.975, 0.992] & 5/15 (33%), 1.2e-07, -3") == (
        "<span class='n'>0.997</span> [<span class='n'>0.975</span>, <span class='n'>0.992"
        "</span>] &amp; <span class='n'>5</span>/<span class='n'>15</span> (<span "
        "class='n'>33%</span>), <span class='n'>1.2e-07</span>, <span class='n'>-3</span>")


def test_the_page_counts_a_number_a_line_break_cuts(tmp_path: Path) -> None:
    """The browser check behind ``data-split``: a narrow table of long numbers, with the
    rule that keeps them whole and without it."""
    from kit import reporting
    from tests.browser import chromium_path, headless

    table = PageTable("T", ["h"] * 12, [["0.99712345 26708.25"] * 12] * 3)
    kept = html_page("t", "h", {}, [table])
    cut = kept.replace("span.n{white-space:nowrap}", "")
    assert cut != kept
    chromium = chromium_path()
    for name, text in (("kept", kept), ("cut", cut)):
        page = tmp_path / f"{name}.html"
        page.write_text(text)
        dom = headless(chromium, tmp_path / f"home-{name}", "--window-size=1024,900",
                       "--dump-dom", page.as_uri()).stdout
        found = re.search(r'<html data-split="(\d+)">', dom)
        assert found, dom[:300]
        assert (int(found[1]) == 0) == (name == "kept"), (name, found[1])
    assert f"/{reporting.NUMBER.pattern}/g" in reporting.MEASURE  # one pattern for both
