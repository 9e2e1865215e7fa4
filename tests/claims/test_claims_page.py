"""The claims page: every claim x substrate as an element id, every status word, escaped
text, relative evidence links, and a page that headless Chromium renders (not blank,
every id in the DOM).

Also covers ``kit.claims.page``, ``kit.claims.page_cells`` and ``kit.claims.page_style`` (no test
files of their own)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from kit.claims.page import STATUSES, write_page
from kit.claims.page_cells import effect_text, kit_number
from tests.browser import chromium_path as _chromium
from tests.browser import headless as _headless

ROOT_DIGEST = "ab" * 32


def _claim(claim: str, study: str, section: str, substrate: str, status: str,
           **extra: Any) -> dict[str, Any]:
    folder = f"claims/{study}/evidence/{substrate}"
    entry: dict[str, Any] = {
        "claim": claim, "study": study, "section": section,
        "statement": f"statement of {claim}", "substrate": substrate, "published": "1.00%",
        "recomputed": "1.00", "rule": "rounds to 2 decimals", "status": status, "note": "",
        "effect": None, "evidence": ["score/score.json"], "evidence_folder": folder}
    entry.update(extra)
    return entry


def small_report() -> dict[str, Any]:
    """Both studies, every status at least once, a hostile statement and a problem."""
    claims = [
        _claim("A-114", "drift", "Table 1", "cifar100", "reproduced"),
        _claim("A-114", "drift", "Table 1", "digits", "direction reproduced",
               effect={"paper": 75.48, "kit": 91.25, "ratio": 1.209}),
        _claim("A-052", "drift", "Results (prose)", "digits", "direction reversed",
               statement="metamorphic minus direct <script>alert(1)</script> & more",
               published="-7.27 pp", recomputed="-52.25",
               rule="sign negative: the finding is a drop",
               effect={"paper": -7.27, "kit": -52.25, "ratio": 7.19},
               evidence=["score/cases/cand-rot10-bilinear.npz", "score/score.json"]),
        _claim("A-052", "drift", "Results (prose)", "cifar100", "not run here",
               note="the CIFAR-100 evidence is not shipped"),
        _claim("A-010", "drift", "Table 1", "digits", "described"),
        _claim("B-001", "sciml", "Gate", "kit", "consistent"),
        _claim("B-002", "sciml", "Verdicts", "kit", "differs", published="0.5",
               recomputed="0.7"),
    ]
    counts: dict[str, dict[str, int]] = {}
    for c in claims:
        row = counts.setdefault(c["study"], dict.fromkeys(STATUSES, 0))
        row[c["status"]] += 1
    return {"ok": False, "root": ROOT_DIGEST, "strict_findings": False,
            "problems": ["claims/sciml.yaml: B-002 differs <0.7 vs 0.5>"],
            "counts": counts, "claims": claims}


def anchors(report: dict[str, Any]) -> list[str]:
    return [f"{c['claim']}-{c['substrate']}" for c in report["claims"]]


def evidence_root(root: Path) -> Path:
    """A repository holding the evidence files the small report names, but for one."""
    for folder, name in (("claims/drift/evidence/digits", "score/score.json"),
                         ("claims/drift/evidence/digits", "score/cases/cand-rot10-bilinear.npz"),
                         ("claims/sciml/evidence/kit", "score/score.json")):
        (root / folder / name).parent.mkdir(parents=True, exist_ok=True)
        (root / folder / name).write_text("{}\n")
    return root


@pytest.fixture
def page(tmp_path: Path) -> Path:
    return write_page(small_report(), tmp_path / "runs" / "verify" / "index.html",
                      evidence_root(tmp_path))


def test_page_has_every_claim_status_and_escapes(page: Path) -> None:
    text = page.read_text()
    report = small_report()
    for anchor in anchors(report):
        assert text.count(f'id="{anchor}"') == 1
    for status in STATUSES:
        assert f">{status}</span>" in text
    assert text.count("<script") == 1  # the page's own filter script, nothing injected
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in text
    assert "&lt;0.7 vs 0.5&gt;" in text  # the problem, escaped
    assert ROOT_DIGEST in text
    assert ">failed</span>" in text
    assert "-52.25 vs -7.27 (ratio 7.19x)" in text
    assert "the CIFAR-100 evidence is not shipped" in text
    # the papers' sections in the papers' order, each study headed by its paper
    headings = re.findall(r'<h[23] id="[^"]+">([^<]+)</h[23]>', text)
    assert headings == [
        "Counts", "Where the kit has replayed", "Where the papers disagree with themselves",
        "What each status means",
        "Drift paper: When Metamorphic Contrast Hurts",
        "Results (prose)", "Table 1",
        "SciML paper: Domain-Validity-Gated Metamorphic Testing of Scientific ML Surrogates",
        "Gate", "Verdicts"]
    assert '<a href="#s-drift-table-1">Table 1</a>' in text  # one click from the top
    # no external resource: one self-contained file
    assert not re.search(r"(src|href)=\"https?:", text)
    assert not list(page.parent.glob(".*.tmp"))


def test_evidence_links_lead_from_the_page_to_files_that_exist(tmp_path: Path) -> None:
    root = evidence_root(tmp_path / "repo")
    for where in (tmp_path / "runs/verify/index.html", tmp_path / "elsewhere/x.html"):
        text = write_page(small_report(), where, root).read_text()
        hrefs = re.findall(r'<a href="([^"#]+)"', text)
        assert hrefs
        assert all((where.parent / h).resolve().is_file() for h in hrefs)
    assert 'href="../repo/claims/drift/evidence/digits/score/score.json"' in text
    # the ledger names a file the evidence does not ship: named, not linked
    (root / "claims/drift/evidence/digits/score/score.json").unlink()
    text = write_page(small_report(), tmp_path / "x.html", root).read_text()
    assert "score/score.json (not shipped)" in text
    assert 'href="repo/claims/drift/evidence/digits/score/score.json"' not in text


def test_a_table_cell_holds_paper_kit_and_status_and_not_run_here_is_folded(
        tmp_path: Path) -> None:
    report = small_report()
    cell = {"table": "Table 1", "row": "Metamorphic contrast", "column": "TPR"}
    for claim in report["claims"]:
        if claim["claim"] == "A-114":
            claim["cell"] = cell
            claim["published"] = "75.48%"
            claim["effect"] = {"paper": 75.48, "kit": 36.395061, "ratio": 0.48}
    text = write_page(report, tmp_path / "index.html", tmp_path).read_text()
    table = text[text.index("<h4>Table 1, in the paper's layout</h4>"):]
    table = table[:table.index("</table>")]
    assert "<th>Metamorphic contrast</th>" in table
    assert "<th>TPR</th>" in table
    assert "A-114: paper 75.48%" in table
    assert 'id="A-114-digits"' in table
    assert 'id="A-114-cifar100"' in table
    assert '<span title="36.395061">36.40%</span>' in table  # the paper's precision
    folded = re.search(r'<details class="folded"><summary>1 not run here</summary>(.*?)'
                       r"</details>", text, re.S)
    assert folded is not None
    assert 'id="A-052-cifar100"' in folded.group(1)


def test_counts_table_and_ok_page(tmp_path: Path) -> None:
    report = small_report() | {"ok": True, "problems": []}
    text = write_page(report, tmp_path / "index.html", evidence_root(tmp_path)).read_text()
    assert ">ok</span>" in text
    assert "Problems" not in text
    drift_row = re.search(r"<tr><th>drift</th>(.*?)</tr>", text)
    assert drift_row is not None
    cells = re.findall(r'<td class="num">(\d+)</td>', drift_row.group(1))
    assert cells == ["1", "0", "1", "1", "1", "0", "0", "0", "0", "1", "5"]


def test_the_kits_number_at_the_papers_precision_and_no_ratio_on_a_described_row() -> None:
    claim = {"published": "82.75%", "recomputed": "88.6481",
             "effect": {"paper": 82.75, "kit": 88.648148, "ratio": 1.07}}
    assert kit_number(claim) == '<span title="88.648148">88.65%</span>'
    assert kit_number({**claim, "published": "0.954", "effect": {
        "paper": 0.954, "kit": 88.648148, "ratio": 1}}) == '<span title="88.648148">88.648</span>'
    assert kit_number({**claim, "effect": None}) == "88.6481"
    # the paper's printed forms: an interval's confidence level is not its number, a pair
    # and a k/n show the kit's second number, an interval computed as one stays one
    ci = {"published": "95% CI [0.975, 0.992]", "recomputed": "0.995566",
          "effect": {"paper": 0.975, "kit": 0.995566, "ratio": 1.02}}
    assert kit_number(ci) == '<span title="0.995566">0.996</span>'
    pair = {"published": "conservation 1.00/0.81", "recomputed": "1",
            "effect": {"paper": 1.0, "kit": 1, "ratio": 1.0},
            "halves": [{"label": "recall", "kit": 0.875, "paper": 0.81}]}
    assert kit_number(pair) == '<span title="1.0">1.00/0.88</span>'
    count = {"published": "180/180 fail", "recomputed": "168",
             "effect": {"paper": 180, "kit": 168, "ratio": 0.93},
             "halves": [{"label": "n", "kit": 168.0, "paper": 180.0}]}
    assert kit_number(count) == '<span title="168.0">168/168</span>'
    interval = {"published": "Wilson 95% CI [0.80,1.00]", "recomputed": "[0.796117, 1]",
                "effect": {"paper": 0.8, "kit": [0.796117, 1.0], "ratio": None}}
    assert kit_number(interval) == '<span title="[0.796117, 1]">[0.80, 1.00]</span>'
    assert effect_text(claim["effect"], "described") == "88.65 vs 82.75"
    assert effect_text(claim["effect"], "direction reproduced") == \
        "88.65 vs 82.75 (ratio 1.07x)"


def test_effect_text() -> None:
    assert effect_text(None) == ""
    assert effect_text({"paper": 0.5, "kit": 0.25, "ratio": None}) == "0.25 vs 0.5"
    assert effect_text({"paper": -7.2716, "kit": -52.25, "ratio": 7.185}) == \
        "-52.25 vs -7.272 (ratio 7.185x)"


def test_chromium_loads_the_shipped_claims_page_at_two_widths(tmp_path: Path) -> None:
    """The page verify writes from the shipped evidence, in headless Chromium at 1,024 and
    1,400 px: its script runs to the end (no error), nothing overflows horizontally, the
    status and claim filters change what is shown, every link leads to a file, and a cell
    explains itself on a click or on keyboard focus."""
    from kit.claims.verify import verify

    chromium = _chromium()
    page = tmp_path / "runs" / "verify" / "index.html"
    assert verify(page=page) == 0
    text = page.read_text()
    hrefs = re.findall(r'<a href="([^"#]+)"', text)
    assert len(hrefs) > 400
    assert all((page.parent / h).resolve().is_file() for h in hrefs)
    checks = text.count(' class="claim" ')
    assert checks == 631
    for width in (1024, 1400):
        dom = _headless(chromium, tmp_path / f"home-{width}", f"--window-size={width},900",
                        "--dump-dom", page.as_uri()).stdout
        assert '<body data-overflow="no" data-ready="yes">' in dom
        assert f'id="shown">{checks}<' in dom
    reversed_ = _headless(chromium, tmp_path / "home-filter", "--window-size=1024,900",
                          "--dump-dom", page.as_uri() + "?status=direction%20reversed").stdout
    assert 'id="shown">27<' in reversed_
    one = _headless(chromium, tmp_path / "home-claim", "--window-size=1024,900",
                    "--dump-dom", page.as_uri() + "?claim=A-052").stdout
    assert 'id="shown">2<' in one
    assert 'class="claim hidden" data-claim="A-114"' in one
    # a search opens only the folds holding a match and hides the rest; nothing found says so
    assert one.count('<details class="folded hidden"') == text.count('<details class="folded"') - 1
    assert 'id="no-match" class="note hidden"' in one
    nothing = _headless(chromium, tmp_path / "home-none", "--window-size=1024,900",
                        "--dump-dom", page.as_uri() + "?claim=ZZZ").stdout
    assert 'id="shown">0<' in nothing
    assert 'id="no-match" class="note"' in nothing
    assert '<details class="folded"' not in nothing.replace('<details class="folded hidden"', "")
    for anchor in ("study-sciml", "arithmetic"):  # a jump lands below the sticky filter bar
        jumped = _headless(chromium, tmp_path / f"home-{anchor}", "--window-size=1024,900",
                           "--dump-dom", f"{page.as_uri()}#{anchor}").stdout
        assert 'data-jump="clear"' in jumped
    # a link to a cell opens what it explains; three cells in the paper's printed form
    for anchor, shown in (("B-215-kit", "0.996"), ("B-077-kit", "1.00/0.88"),
                          ("B-018-kit", "168/168")):
        dom = _headless(chromium, tmp_path / f"home-{anchor}", "--window-size=1024,900",
                        "--dump-dom", f"{page.as_uri()}#{anchor}").stdout
        cell = dom[dom.index(f'<div id="{anchor}"'):]
        cell = cell[:cell.index("</dl>")]
        assert '<details class="entry" open="">' in cell
        assert f">{shown}</span>" in cell
        for part in ("<dt>rule</dt>", "<dt>threshold from</dt>",
                     "<dt>evidence</dt><dd><a href=", f"verify --claim {anchor[:5]}"):
            assert part in cell
        assert 'data-jump="clear"' in dom
    # keyboard focus shows a cell's explanation and leaving closes it; a click keeps it
    harness = page.with_name("focus.html")
    harness.write_text(text.replace("</body>", FOCUS_SCRIPT + "</body>"))
    dom = _headless(chromium, tmp_path / "home-focus", "--window-size=1024,900",
                    "--dump-dom", harness.as_uri()).stdout
    assert ('data-focused="open" data-left="closed" data-next="open" data-clicked="open" '
            'data-kept="open"') in dom


# Run after the page's own script, as a keyboard user's Tab and Enter would: focus one
# cell, move on to the next, click that one, then move back.
FOCUS_SCRIPT = """<script>
var s=document.querySelector('#B-215-kit details.entry>summary'); s.focus();
document.body.dataset.focused=s.parentElement.open?'open':'closed';
var t=document.querySelector('#B-077-kit details.entry>summary'); t.focus();
document.body.dataset.left=s.parentElement.open?'open':'closed';
document.body.dataset.next=t.parentElement.open?'open':'closed';
t.click();
document.body.dataset.clicked=t.parentElement.open?'open':'closed';
s.focus();
document.body.dataset.kept=t.parentElement.open?'open':'closed';
</script>"""


def test_chromium_renders_the_page(page: Path, tmp_path: Path) -> None:
    from PIL import Image

    chromium = _chromium()
    shot = tmp_path / "page.png"
    _headless(chromium, tmp_path / "home-shot", f"--screenshot={shot}",
              "--window-size=1200,2000", page.as_uri())
    with Image.open(shot) as image:
        rgb = image.convert("RGB")
        assert rgb.size == (1200, 2000)
        colours = rgb.getcolors(maxcolors=1 << 20)
        assert colours is not None
        assert len(colours) > 1
        assert sum(n for n, c in colours if c != (255, 255, 255)) > 1000
    dom = _headless(chromium, tmp_path / "home-dom", "--dump-dom", page.as_uri()).stdout
    for anchor in anchors(small_report()):
        assert f'id="{anchor}"' in dom
    assert "<script>alert(1)</script>" not in dom


def test_the_reports_and_the_replay_page_are_linked_when_present(tmp_path: Path) -> None:
    root = evidence_root(tmp_path / "repo")
    page = root / "runs" / "verify" / "index.html"
    assert "runs/reports" not in write_page(small_report(), page, root).read_text()
    (root / "runs" / "reports").mkdir(parents=True)
    (root / "runs" / "reports" / "index.html").write_text("<html></html>\n")
    text = write_page(small_report(), page, root).read_text()
    assert '<a href="../reports/index.html">every study&#x27;s report' in text
    assert "runs/replay" not in text


def test_the_page_links_the_reports_whichever_command_ran_first(tmp_path: Path) -> None:
    """verify, then reports: the page written first links the reports once they exist
    (``relink``); a page at that path that the kit did not write is left alone."""
    from kit.claims.page import DEFAULT_PAGE, relink

    root = evidence_root(tmp_path)
    page = write_page(small_report() | {"ok": True, "problems": []}, root / DEFAULT_PAGE, root)
    assert "../reports/index.html" not in page.read_text()
    (root / "runs" / "reports").mkdir(parents=True)
    (root / "runs" / "reports" / "index.html").write_text("<html></html>")
    relink(root)
    text = page.read_text()
    assert '<a href="../reports/index.html">every study&#x27;s report' in text
    assert text.count("<!--kit:linked-->") == 1
    theirs = "<html>the user's page</html>"
    page.write_text(theirs)
    relink(root)
    assert page.read_text() == theirs
