"""The real-drift sweep's report (``<sweep run>/report/``, outside the run manifest):

- the drift map: one heatmap per model and export, release (rows) x graph optimisation
  level (columns), colour log10 max |d logit| against the reference cell at one thread
  (white where the logits are bit-identical, grey where a release lacks the level);
- the alarm-rate table: per cell and export, each calibrated detector's clean held-out
  alarm rate pooled over the models, beside Polygraphy's.

``python -m kit sweep`` writes it after the evidence; it reads only ``sweep/cells.json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from kit.drift.detectors import DETECTORS
from kit.files import read_json, write_atomic
from kit.reporting import csv_text, html_page, markdown, pyplot, save_png

LEVEL_ORDER = ("disable_all", "enable_basic", "enable_extended", "enable_layout", "enable_all")


def _key(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


def drift_map(rows: list[dict[str, Any]], out: Path) -> str:
    """The heatmaps (one panel per model and export) as ``drift-map.png``."""
    plt = pyplot()
    releases = sorted({r["release"] for r in rows}, key=_key)
    levels = [lv for lv in LEVEL_ORDER if any(r["level"] == lv for r in rows)]
    models = sorted({r["model"] for r in rows})
    exports = sorted({r["export"] for r in rows})
    fig, axes = plt.subplots(len(exports), len(models), squeeze=False,
                             figsize=(3.2 * len(models), 0.28 * len(releases) * len(exports) + 2))
    panels = [(ei, export, mi, model) for ei, export in enumerate(exports)
              for mi, model in enumerate(models)]
    image = None
    for ei, export, mi, model in panels:
        grid = np.full((len(releases), len(levels)), np.nan)
        for r in rows:
            if r["model"] == model and r["export"] == export and r["threads"] == 1:
                value = r["max_abs_logit"]
                grid[releases.index(r["release"]), levels.index(r["level"])] = \
                    np.log10(value) if value > 0 else -9.0
        ax = axes[ei][mi]
        identical = grid == -9.0  # NaN (no such level) shows the grey face colour
        image = ax.imshow(np.where(identical, np.nan, grid), vmin=-7, vmax=-4,
                          cmap="viridis", aspect="auto")
        ax.imshow(np.where(identical, 0.0, np.nan), cmap="Greys", vmin=0, vmax=1,
                  aspect="auto")  # bit-identical cells in white
        ax.set_facecolor("#bbbbbb")
        ax.set_xticks(range(len(levels)), [lv.replace("enable_", "") for lv in levels],
                      rotation=45, fontsize=7)
        ax.set_yticks(range(len(releases)), releases if mi == 0 else [], fontsize=7)
        ax.set_title(f"{model}, BN {export}", fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.6, label="log10 max |d logit| (white: identical)")
    save_png(fig, out / "drift-map.png")
    plt.close(fig)
    return "drift-map.png"


def alarm_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Per cell and export: pooled clean alarm rate of each detector and of Polygraphy."""
    header = ["release", "level", "threads", "export", *DETECTORS, "polygraphy"]
    cells: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        cells.setdefault((r["release"], r["level"], r["threads"], r["export"]), []).append(r)
    body = []
    for (release, level, threads, export), found in sorted(
            cells.items(), key=lambda item: (_key(item[0][0]), LEVEL_ORDER.index(item[0][1]),
                                             item[0][2], item[0][3])):
        n = sum(r["alarms"]["direct"]["n"] for r in found)
        rates = [sum(r["alarms"][d]["alarms"] for r in found) / n for d in DETECTORS]
        poly = sum(r["polygraphy"]["alarms"] for r in found) / n
        body.append([release, level, str(threads), export,
                     *(f"{100 * v:.1f}%" for v in rates), f"{100 * poly:.1f}%"])
    return header, body


def write_report(run_root: Path) -> Path:
    """The report of a finished sweep folder; returns its page."""
    evidence = read_json(run_root / "sweep" / "cells.json", f"rerun the sweep in {run_root}")
    out = run_root / "report"
    header, body = alarm_table(evidence["rows"])
    write_atomic(out / "alarm-rates.md", markdown(header, body).encode())
    write_atomic(out / "alarm-rates.csv", csv_text(header, body).encode())
    figure = drift_map(evidence["rows"], out)
    provenance = {"reference cell": evidence["reference_cell"],
                  "pair (calibration)": " vs ".join(evidence["pair"]),
                  "polygraphy": evidence["polygraphy"],
                  "held-out images": evidence["heldout_images"]}
    page = html_page("real-drift sweep", "Real drift across onnxruntime releases", provenance,
                     {"Clean alarm rates (pooled over models)": (header, body)}, [figure])
    write_atomic(out / "index.html", page.encode())
    return out / "index.html"
