"""The detector study's report (``<run>/report/``, outside the run manifest), from
``detectors/hosts.json``:

- the per-host table (``detectors.md``/``.csv``): case, model, placement, pair, the host's
  clean accuracy, the release control, max |d logit| and flips of the positive cell, each
  detector's TPR and realised FPR at matched FPR (Polygraphy's uncalibrated), the paired
  direct-minus-metamorphic interval, the weakest positive's score over each threshold,
  localisation top-1 per localiser;
- the figure (``detectors-tpr.png``): per host, every detector's TPR (bar, nested 95%
  interval as a whisker) with its realised FPR marked on the bar;
- ``detectors.html`` with both; the cases no model hosts, with the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from kit.files import read_json, write_atomic
from kit.reporting import (
    PageFigure,
    PageTable,
    html_page,
    pyplot,
    rules_shown,
    save_png,
    write_table,
)

SHOWN = ("direct", "metamorphic", "maximum", "mixed", "polygraphy")
HEADER = ["case", "model", "placement", "affected / fixed", "accuracy", "release control",
          "max d", "flips", *[f"{d} TPR / FPR" for d in SHOWN], "direct - metamorphic (95%)",
          "weakest positive / threshold: direct / metamorphic / maximum / mixed",
          "top-1 direct / metamorphic / maximum"]


def _host_row(row: dict[str, Any]) -> list[str]:
    pair = f"{row['pair']['affected']} / {row['pair']['fixed']}"
    if not row["hosted"]:
        return [row["case"], row["model"], f"not hosted: {row['placement']}", pair,
                *["-"] * (len(HEADER) - 4)]
    det, loc = row["detection"], row["localisation"]
    diff = det["direct_minus_metamorphic"]
    return [row["case"], row["model"], row["placement"], pair, f"{row['accuracy']:.3f}",
            f"{row['release_control']:.3g}", f"{row['max_abs_logit']:.3g}", str(row["flips"]),
            *[f"{det[d]['tpr']['rate']:.3f} / {det[d]['fpr']['rate']:.3f}" for d in SHOWN],
            f"{diff['value']:.3f} [{diff['interval'][0]:.3f}, {diff['interval'][1]:.3f}]",
            " / ".join("-" if det[d]["margin"] is None else f"{det[d]['margin']:.3g}"
                       for d in SHOWN[:4]),
            " / ".join(f"{loc[k]['top1']:.2f}" for k in ("direct", "metamorphic", "maximum"))]


def tpr_figure(hosts: list[dict[str, Any]], out: Path) -> str:
    """TPR per host and detector as horizontal bars (hosts down the page, so the labels
    keep a readable size at page width whatever the number of hosts), each with its
    interval as a whisker and the realised FPR as a cross."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.62 * max(len(hosts), 1) + 1.6))
    height = 0.8 / len(SHOWN)
    for i, name in enumerate(SHOWN):
        y = np.arange(len(hosts)) + (i - (len(SHOWN) - 1) / 2) * height
        tpr = [h["detection"][name]["tpr"] for h in hosts]
        rates = np.array([t["rate"] for t in tpr])
        below = [float(r - t["interval"][0]) for r, t in zip(rates, tpr, strict=True)]
        above = [float(t["interval"][1] - r) for r, t in zip(rates, tpr, strict=True)]
        ax.barh(y, rates, height, xerr=[below, above], capsize=0, ecolor="#444444",
                label=name)
        ax.scatter([h["detection"][name]["fpr"]["rate"] for h in hosts], y, marker="x",
                   color="black", s=14, linewidths=1, zorder=3,
                   label="realised FPR" if i == 0 else None)
    ax.set_yticks(range(len(hosts)), [f"{h['case']} / {h['model']}" for h in hosts],
                  fontsize=9)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.05)
    ax.set_xlabel("TPR (bars, with 95% interval); crosses: realised FPR", fontsize=9)
    ax.set_title("Real defects in the digits models: TPR per detector\n(Polygraphy "
                 "uncalibrated)", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    save_png(fig, out / "detectors-tpr.png")
    return "detectors-tpr.png"


def write_detector_report(run: Path, out: Path | None = None) -> Path:
    """Write the study's report pages of a run (or the shipped evidence) into ``out``
    (default ``<run>/report/``); returns the page."""
    evidence = read_json(run / "detectors" / "hosts.json")
    out = out or run / "report"
    rows = [_host_row(row) for row in evidence["hosts"]]
    write_table(out, "detectors", HEADER, rows)
    figure = tpr_figure([row for row in evidence["hosts"] if row["hosted"]], out)
    provenance = {"hosts": sum(1 for row in evidence["hosts"] if row["hosted"]),
                  "not hosted": evidence["not_hosted"], "polygraphy": evidence["polygraphy"],
                  "protocol sha256": evidence["protocol_sha256"],
                  "rules": rules_shown("corpus-detectors")}
    sections: list[PageTable | PageFigure] = [
        PageFigure("True-positive rate per detector and host, at matched FPR", figure,
                   "Bars: TPR; whiskers: nested 95% interval; black dash: the realised FPR. "
                   "Polygraphy runs uncalibrated (its default tolerances)."),
        PageTable("Per host: accuracy, release control, detection at matched FPR and "
                  "localisation", HEADER, rows)]
    page = html_page("Corpus detector study", "Real defects in the digits models: detectors "
                     "at matched FPR and localisation", provenance, sections)
    write_atomic(out / "detectors.html", page.encode())
    return out / "detectors.html"
