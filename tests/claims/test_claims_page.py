"""The claims page: every claim x substrate as an element id, every status word, escaped
text, relative evidence links, and a page that headless Chromium renders (not blank,
every id in the DOM).

Also covers ``kit.claims.page`` (no test file of its own)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kit.claims.page import STATUSES, effect_text, write_page

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


@pytest.fixture
def page(tmp_path: Path) -> Path:
    return write_page(small_report(), tmp_path / "runs" / "verify" / "index.html")


def test_page_has_every_claim_status_and_escapes(page: Path) -> None:
    text = page.read_text()
    report = small_report()
    for anchor in anchors(report):
        assert text.count(f'id="{anchor}"') == 1
    for status in STATUSES:
        assert f">{status}</span>" in text
    assert "<script" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in text
    assert "&lt;0.7 vs 0.5&gt;" in text  # the problem, escaped
    assert ROOT_DIGEST in text
    assert ">failed</span>" in text
    assert "-52.25 vs -7.27 (ratio 7.19x)" in text
    assert 'href="../../claims/drift/evidence/digits/score/cases/cand-rot10-bilinear.npz"' in text
    assert "the CIFAR-100 evidence is not shipped" in text
    # sections in order of first appearance within each study, studies in order
    headings = re.findall(r"<h[23]>([^<]+)</h[23]>", text)
    assert headings[headings.index("Study: drift"):] == [
        "Study: drift", "Table 1", "Results (prose)", "Study: sciml", "Gate", "Verdicts"]
    # no external resource and no script: one self-contained file
    assert not re.search(r"(src|href)=\"https?:", text)
    assert not list(page.parent.glob(".*.tmp"))


def test_counts_table_and_ok_page(tmp_path: Path) -> None:
    report = small_report() | {"ok": True, "problems": []}
    text = write_page(report, tmp_path / "index.html", root_href="..").read_text()
    assert ">ok</span>" in text
    assert "Problems" not in text
    assert 'href="../claims/drift/evidence/digits/score/score.json"' in text
    drift_row = re.search(r"<tr><th>drift</th>(.*?)</tr>", text)
    assert drift_row is not None
    cells = re.findall(r'<td class="num">(\d+)</td>', drift_row.group(1))
    assert cells == ["1", "0", "1", "1", "1", "0", "0", "0", "0", "1", "5"]


def test_effect_text() -> None:
    assert effect_text(None) == ""
    assert effect_text({"paper": 0.5, "kit": 0.25, "ratio": None}) == "0.25 vs 0.5"
    assert effect_text({"paper": -7.2716, "kit": -52.25, "ratio": 7.185}) == \
        "-52.25 vs -7.272 (ratio 7.185x)"


def _chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        if os.environ.get("KIT_REQUIRE_CHROMIUM") == "1":
            pytest.fail("KIT_REQUIRE_CHROMIUM=1 but chromium is not on PATH "
                        "(bash tools/install-host.sh installs it)")
        pytest.skip("chromium is not on PATH (bash tools/install-host.sh installs it)")
    return found


def _headless(chromium: str, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    home.mkdir(exist_ok=True)
    command = [chromium, "--headless", "--no-sandbox", "--disable-gpu",
               "--no-first-run", f"--user-data-dir={home / 'profile'}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=True,
                          env={**os.environ, "HOME": str(home)})


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
