"""The real-drift sweep's report (``<sweep run>/report/``, outside the run manifest):

- the drift map: one heatmap per model and export, release (rows) x graph optimisation
  level (columns), colour log10 max |d logit| against the reference cell at one thread
  (white where the logits are bit-identical, grey where a release lacks the level), axis
  titles, the reference cell (R) and the calibration pair's other cell (C) outlined, a dot
  where the two-thread logits differ from the one-thread ones;
- the alarm-rate table below it (folded): per cell and export, each calibrated detector's
  clean held-out alarm rate pooled over the models and its highest model's rate with the
  nested-bootstrap 95% interval the evidence records, beside Polygraphy's pooled rate.

``python -m kit sweep`` writes it after the evidence, ``python -m kit reports`` from the
shipped evidence; it reads only ``sweep/cells.json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from kit.drift.detectors import DETECTORS
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

LEVEL_ORDER = ("disable_all", "enable_basic", "enable_extended", "enable_layout", "enable_all")


def _key(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


def _cell(name: str) -> tuple[str, str, int]:
    """``1.20.1/disable_all-t1`` -> (release, level, threads)."""
    release, rest = name.split("/", 1)
    level, threads = rest.rsplit("-t", 1)
    return release, level, int(threads)


def _mark(ax: Any, releases: list[str], levels: list[str], cell: str, letter: str) -> None:
    release, level, _ = _cell(cell)
    if release in releases and level in levels:
        y, x = releases.index(release), levels.index(level)
        ax.add_patch(pyplot().Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, edgecolor="red",
                               linewidth=1.5, gid=f"mark-{letter}"))
        ax.text(x, y, letter, ha="center", va="center", fontsize=7, color="red",
                fontweight="bold")


def _panel(ax: Any, rows: list[dict[str, Any]], releases: list[str], levels: list[str]) -> Any:
    """One model and export: colour at one thread; a dot where two threads differ."""
    grid = np.full((len(releases), len(levels)), np.nan)
    for r in rows:
        if r["threads"] == 1:
            value = r["max_abs_logit"]
            grid[releases.index(r["release"]), levels.index(r["level"])] = \
                np.log10(value) if value > 0 else -9.0
    identical = grid == -9.0  # NaN (no such level) shows the grey face colour
    image = ax.imshow(np.where(identical, np.nan, grid), vmin=-7, vmax=-4, cmap="viridis",
                      aspect="auto")
    ax.imshow(np.where(identical, 0.0, np.nan), cmap="Greys", vmin=0, vmax=1,
              aspect="auto")  # bit-identical cells in white
    ax.set_facecolor("#bbbbbb")
    moved = [(levels.index(r["level"]), releases.index(r["release"])) for r in rows
             if r["threads"] != 1 and r.get("vs_one_thread")]
    if moved:
        xs, ys = zip(*moved, strict=True)  # at the right edge, clear of the R and C letters
        ax.scatter(np.array(xs) + 0.32, ys, s=6, color="black", gid="threads")
    return image


def drift_map(rows: list[dict[str, Any]], out: Path, pair: list[str]) -> str:
    """The heatmaps (one panel per model and export) as ``drift-map.png``; the reference
    cell (R) and the calibration pair's other cell (C) outlined in red."""
    plt = pyplot()
    releases = sorted({r["release"] for r in rows}, key=_key)
    levels = [lv for lv in LEVEL_ORDER if any(r["level"] == lv for r in rows)]
    models = sorted({r["model"] for r in rows})
    exports = sorted({r["export"] for r in rows})
    fig, axes = plt.subplots(len(exports), len(models), squeeze=False,
                             figsize=(3.2 * len(models), 0.28 * len(releases) * len(exports) + 2))
    image = None
    for ei, export in enumerate(exports):
        for mi, model in enumerate(models):
            ax = axes[ei][mi]
            image = _panel(ax, [r for r in rows if r["model"] == model and r["export"] == export],
                           releases, levels)
            for cell, letter in zip(pair, "RC", strict=False):
                _mark(ax, releases, levels, cell, letter)
            ax.set_xticks(range(len(levels)), [lv.replace("enable_", "") for lv in levels],
                          rotation=45, fontsize=7)
            ax.set_yticks(range(len(releases)), releases if mi == 0 else [], fontsize=7)
            ax.set_title(f"{model}, BN {export}", fontsize=9)
            if ei == len(exports) - 1:
                ax.set_xlabel("graph optimisation level", fontsize=8)
            if mi == 0:
                ax.set_ylabel("onnxruntime release", fontsize=8)
    fig.colorbar(image, ax=axes, shrink=0.6, label="log10 max |d logit| vs R, 1 thread "
                                                   "(white: identical)")
    save_png(fig, out / "drift-map.png")
    plt.close(fig)
    return "drift-map.png"


def alarm_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Per cell and export: each calibrated detector's clean alarm rate pooled over the
    models, and its highest per-model rate with that model's nested-bootstrap 95% interval
    (the protocol's, from the evidence); Polygraphy's pooled rate."""
    header = ["release", "level", "threads", "export",
              *(f"{d}: pooled; highest model [95%]" for d in DETECTORS), "polygraphy"]
    cells: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        cells.setdefault((r["release"], r["level"], r["threads"], r["export"]), []).append(r)
    body = []
    for (release, level, threads, export), found in sorted(
            cells.items(), key=lambda item: (_key(item[0][0]), LEVEL_ORDER.index(item[0][1]),
                                             item[0][2], item[0][3])):
        n = sum(r["alarms"]["direct"]["n"] for r in found)
        poly = sum(r["polygraphy"]["alarms"] for r in found) / n
        body.append([release, level, str(threads), export,
                     *(_rates([r["alarms"][d] for r in found]) for d in DETECTORS),
                     f"{100 * poly:.1f}%"])
    return header, body


def _rates(per_model: list[dict[str, Any]]) -> str:
    pooled = sum(m["alarms"] for m in per_model) / sum(m["n"] for m in per_model)
    top = max(per_model, key=lambda m: m["rate"])
    low, high = top["interval"]
    return f"{100 * pooled:.1f}%; {100 * top['rate']:.1f}% [{100 * low:.1f}, {100 * high:.1f}]"


MAP_NOTE = ("One panel per model and BatchNorm export; rows: onnxruntime releases, columns: "
            "graph optimisation levels. Colour: log10 of the largest |logit difference| against "
            "the reference cell R, at one intra-op thread (white: bit-identical; grey: the "
            "release lacks the level). A black dot at a cell's right edge: its two-thread "
            "logits differ from its one-thread ones. R ({r}): the reference cell; C ({c}): "
            "the other side of the calibration pair, on which the detectors are calibrated "
            "before they are applied unchanged to every cell.")


def write_report(run_root: Path, out: Path | None = None) -> Path:
    """The report of a finished sweep folder (or the shipped evidence) into ``out``
    (default ``<run>/report``); returns its page."""
    evidence = read_json(run_root / "sweep" / "cells.json", f"rerun the sweep in {run_root}")
    out = out or run_root / "report"
    header, body = alarm_table(evidence["rows"])
    write_table(out, "alarm-rates", header, body)
    figure = drift_map(evidence["rows"], out, evidence["pair"])
    provenance = {"reference cell": evidence["reference_cell"],
                  "pair (calibration)": " vs ".join(evidence["pair"]),
                  "polygraphy": evidence["polygraphy"],
                  "held-out images": evidence["heldout_images"],
                  "rules": rules_shown("realdrift")}
    pair = [" / ".join(str(x) for x in _cell(c)[:2]) for c in evidence["pair"]]
    sections: list[PageTable | PageFigure] = [
        PageFigure("Drift map: max |logit difference| per release and optimisation level",
                   figure, MAP_NOTE.format(r=pair[0], c=pair[-1])),
        PageTable("Clean held-out alarm rate per cell and export: pooled over the models, "
                  "and the highest model's with its 95% interval", header, body)]
    page = html_page("real-drift sweep", "Real drift across onnxruntime releases", provenance,
                     sections)
    write_atomic(out / "index.html", page.encode())
    return out / "index.html"
