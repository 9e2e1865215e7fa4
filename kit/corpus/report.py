"""The corpus report (``<run>/report/``, outside the run manifest), from ``corpus/cases.json``:

- the per-case table (``cases.md``/``.csv``): issue, PR, op, level, declared affected and
  fixed releases, reproduced or not, the largest deviation of an affected release and the
  fixed releases' envelope, the releases that deviate but are not declared (and the
  reverse), Polygraphy's verdict, the ground-truth node;
- the deviation map (``deviation-map.png``): case (rows) x release (columns), colour
  log10 d at the case's level (white where a release matches the reference exactly, magenta
  marked "inf" where d is infinite: a wrong shape or a NaN; black where the release could not
  load or run the model), declared affected releases outlined;
- the crash-only table (``crashes.md``/``.csv``, from ``corpus/crashes.json``): each case's
  issue, declared affected and fixed releases, the releases where it failed to run, whether
  that is as declared, and the first line of the error; never counted in the rate;
- ``index.html`` with all of them, and the issue-level rate beside the paper's 10/14.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from kit.corpus import rule
from kit.files import read_json, write_atomic
from kit.reporting import PageFigure, PageTable, html_page, pyplot, save_png, write_table

CRASH_HEADER = ["case", "issue", "op", "level", "affected", "fixed", "fails on", "as declared",
                "error (first affected release)"]
HEADER = ["case", "issue", "pr", "op", "level", "affected", "fixed", "reproduced",
          "max d affected", "envelope", "extra", "missing", "polygraphy", "ground truth"]


def _span(releases: list[str]) -> str:
    return f"{releases[0]}..{releases[-1]}" if len(releases) > 2 else ", ".join(releases)


def _number(value: float | None) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) \
        else f"{value:.3g}"


def table_rows(evidence: dict[str, Any]) -> list[list[str]]:
    rows = []
    for case in evidence["cases"]:
        d = [case["deviations"].get(r, {}).get(case["level"]) for r in case["affected"]]
        worst = max((v for v in d if v is not None), default=None)
        poly = case["polygraphy"]
        rows.append([case["id"], str(case["issue"] or "-"), str(case["pr"] or "-"), case["op"],
                     case["level"], _span(case["affected"]), _span(case["fixed"]),
                     "yes" if case["decision"]["reproduced"] else "no", _number(worst),
                     _number(case["decision"]["envelope"]),
                     ", ".join(case["range"]["extra"]) or "-",
                     ", ".join(case["range"]["missing"]) or "-",
                     "-" if poly is None else "mismatch" if poly["mismatch"] else "passes",
                     ", ".join(case["ground_truth"])])
    return rows


def crash_rows(crashes: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for case in crashes:
        first = next((r for r in case["affected"] if r in case["errors"]), None)
        error = case["errors"][first][case["level"]].splitlines()[0][:160] if first else "-"
        rows.append([case["id"], str(case["issue"] or "-"), case["op"], case["level"],
                     _span(case["affected"]), _span(case["fixed"]),
                     _span(case["decision"]["fails"]) if case["decision"]["fails"] else "-",
                     "yes" if case["decision"]["reproduced"] else "no", error])
    return rows


def deviation_map(evidence: dict[str, Any], out: Path) -> str:
    plt = pyplot()
    releases, cases = evidence["releases"], evidence["cases"]
    grid = np.full((len(cases), len(releases)), np.nan)
    for i, case in enumerate(cases):
        for j, release in enumerate(releases):
            d = case["deviations"].get(release, {}).get(case["level"])
            grid[i, j] = np.nan if d is None else -99.0 if d == 0 else 99.0 \
                if math.isinf(d) else np.log10(d)
    fig, ax = plt.subplots(figsize=(0.45 * len(releases) + 3, 0.45 * len(cases) + 2))
    cmap = plt.get_cmap("viridis").with_extremes(bad="black", under="white", over="magenta")
    masked = np.ma.masked_invalid(grid)  # type: ignore[no-untyped-call]
    image = ax.imshow(masked, cmap=cmap, vmin=-8, vmax=1, aspect="auto")
    for i, case in enumerate(cases):
        for j, release in enumerate(releases):
            if grid[i, j] == 99.0:
                ax.text(j, i, "inf", ha="center", va="center", fontsize=6)
            if release in case["affected"]:
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False,
                                           edgecolor="red", linewidth=1.2))
    ax.set_xticks(range(len(releases)), releases, rotation=90, fontsize=7)
    ax.set_yticks(range(len(cases)), [f"{c['id']} ({c['level']})" for c in cases], fontsize=7)
    ax.set_title("log10 max |output - reference| per release (red: declared affected; "
                 "white: exact; magenta: inf, a wrong shape or NaN; black: did not load or run)",
                 fontsize=8)
    fig.colorbar(image, ax=ax, label="log10 d")
    fig.tight_layout()
    save_png(fig, out / "deviation-map.png")
    return "deviation-map.png"


MAP_NOTE = ("Rows: the cases at their level; columns: onnxruntime releases. Colour: log10 of "
            "the largest |output - reference|; white: exactly the reference; magenta, marked "
            "inf: a wrong shape or a NaN; black: the release could not load or run the model. "
            "Red outline: a release the issue declares affected.")


RULE_SHOWN = (f"version {rule.REVISED} (02e59e2: a NaN on both sides, or the same infinity, "
              "agrees), as the pipeline records it; every count and the table below use it")


def first_rule(run: Path) -> str:
    """The count under the deviation rule as first committed (``rule.FROZEN``), recomputed
    from the run's outputs: the rule the claims page decides the hypotheses K1-K5 under,
    with the cases the two rules decide apart."""
    from kit.corpus.recompute import CorpusEvidence

    evidence = CorpusEvidence(run)
    first, shown = evidence.reproduced(rule.FROZEN), evidence.reproduced(rule.REVISED)
    apart = sorted(set(first) ^ set(shown))
    return (f"{len(first)} of {len(evidence.decisions_under(rule.FROZEN))}: the rule as first "
            "committed, under which the claims page decides the hypotheses K1-K5"
            + (f"; the rules decide apart on {', '.join(apart)}" if apart else ""))


def write_report(run: Path, out: Path | None = None) -> Path:
    """Write the report of a corpus run (or the shipped evidence) from its
    ``corpus/cases.json`` into ``out`` (default ``<run>/report/``); returns the page."""
    evidence = read_json(run / "corpus" / "cases.json")
    out = out or run / "report"
    rows = table_rows(evidence)
    write_table(out, "cases", HEADER, rows)
    sections: list[PageTable | PageFigure] = []
    if evidence["cases"]:
        sections.append(PageFigure("Deviation from the reference per case and release",
                                   deviation_map(evidence, out), MAP_NOTE))
    sections.append(PageTable("Per case: declared releases, reproduced or not, the largest "
                              "deviation and Polygraphy's verdict", HEADER, rows))
    s = evidence["summary"]
    low, high = s["wilson95"]
    provenance = {"cases": s["listed"],
                  "deviation rule shown": RULE_SHOWN,
                  "reproduced": s["reproduced"],
                  "reproduced under version 1": first_rule(run),
                  "rate (Wilson 95%)": f"{_number(s['rate'])} [{_number(low)}, {_number(high)}]",
                  "paper": f"{s['paper']['reproduced']}/{s['paper']['listed']} (unnamed issues)",
                  "releases": ", ".join(evidence["releases"]),
                  "protocol sha256": evidence["protocol_sha256"]}
    if (run / "corpus" / "crashes.json").is_file():
        crashes = crash_rows(read_json(run / "corpus" / "crashes.json")["crashes"])
        write_table(out, "crashes", CRASH_HEADER, crashes)
        sections.append(PageTable("Crash-only defects: where each fails to run (not counted "
                                  "in the rate)", CRASH_HEADER, crashes))
    page = html_page("Real-defect corpus", "Real-defect corpus: onnxruntime CPU defects",
                     provenance, sections)
    write_atomic(out / "index.html", page.encode())
    return out / "index.html"
