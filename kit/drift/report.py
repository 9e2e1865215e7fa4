"""Tables 1-4 (markdown and CSV), figures (PNG) and one HTML page from a run's summaries.

Every number shown comes from the run's ``score``, ``bootstrap`` and ``sensitivity``
summaries; nothing here computes a result. Beside each bar or point that the paper
publishes, a figure draws the paper's value, read by claim id from ``claims/drift.yaml``
(``PAPER_CLAIMS``, ``paper_values``). The HTML page adds the provenance: substrate,
runtime versions, lock hashes, image IDs, machine fingerprint and wall time per stage.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kit.drift.evidence import ROLE_CODES, read_table, table_name
from kit.errors import KitError
from kit.files import read_json, write_atomic
from kit.reporting import PageFigure, PageTable, html_page, pyplot, save_png, write_table
from kit.runfolder import Run

Array = np.ndarray[Any, Any]
NAMES = {"metamorphic": "Metamorphic contrast (subtracted)", "direct": "Direct L2 (plain)",
         "mixed": "Mixed absolute/relative tolerance", "maximum": "Two-input direct maximum"}


def pct(value: float) -> str:
    return f"{100 * value:.2f}%"


def interval(entry: dict[str, float]) -> str:
    return f"[{entry['p2_5']:.2f}, {entry['p97_5']:.2f}]"


Table = tuple[list[str], list[list[str]]]


def _detection_table(p: dict[str, Any]) -> Table:
    """Table 1: held-out TPR, FPR, AUROC and AUPRC of the metamorphic, direct and mixed."""
    return (["Detector", "TPR", "detected", "FPR", "false alarms", "AUROC", "AUPRC"],
            [[NAMES[d], pct(p[d]["tpr"]["rate"]),
              f"{p[d]['tpr']['count']}/{p[d]['tpr']['n']}", pct(p[d]["fpr"]["rate"]),
              f"{p[d]['fpr']['count']}/{p[d]['fpr']['n']}", f"{p[d]['auroc']:.3f}",
              f"{p[d]['auprc']:.3f}"] for d in ("metamorphic", "direct", "mixed")])


def _two_input_table(p: dict[str, Any], loc: dict[str, Any], matched: dict[str, Any]) -> Table:
    """Table 2: the metamorphic contrast against the two-input maximum, also at matched FPR."""
    return (["Method", "Inputs", "TPR", "FPR", "Top-1 localisation"], [
        [NAMES["metamorphic"], "source + rotated", pct(p["metamorphic"]["tpr"]["rate"]),
         pct(p["metamorphic"]["fpr"]["rate"]), pct(loc["metamorphic"]["top1"])],
        [NAMES["maximum"], "source + rotated", pct(p["maximum"]["tpr"]["rate"]),
         pct(p["maximum"]["fpr"]["rate"]), pct(loc["maximum"]["top1"])],
        [NAMES["metamorphic"] + ", matched calibration FPR", "source + rotated",
         pct(matched["metamorphic"]["tpr"]["rate"]), pct(matched["metamorphic"]["fpr"]["rate"]),
         ""],
        [NAMES["maximum"] + ", matched calibration FPR", "source + rotated",
         pct(matched["maximum"]["tpr"]["rate"]), pct(matched["maximum"]["fpr"]["rate"]), ""]])


def _localisation_table(loc: dict[str, Any]) -> Table:
    """Table 3: top-1, top-3 and MRR of the true layer per scoring method."""
    return (["Scoring method", "Top-1", "Top-3", "MRR", "cases"], [
        [name, pct(loc[k]["top1"]), pct(loc[k]["top3"]), f"{loc[k]['mrr']:.3f}", str(loc[k]["n"])]
        for k, name in (("metamorphic", "Metamorphic activation contrast"),
                        ("direct", "Direct activation scoring"),
                        ("maximum", "Two-input activation maximum"))])


def _rotation_table(sens: dict[str, Any]) -> Table:
    """Table 4: detection, localisation and reference stability per rotation condition."""
    rows = []
    for row in sens.values():
        top1 = row.get("top1", {})
        rows.append([f"{row['condition']} ({row['split']})", pct(row["metamorphic"]["tpr"]["rate"]),
                     pct(row["direct"]["tpr"]["rate"]), f"{row['difference_pts']:.2f} pts",
                     pct(row["metamorphic"]["fpr"]["rate"]), pct(row["direct"]["fpr"]["rate"]),
                     pct(top1["metamorphic"]) if top1 else "",
                     pct(top1["direct"]) if top1 else "",
                     pct(row["reference_stability"]["rate"])])
    return (["Rotation condition", "Metamorphic TPR", "Direct TPR", "Difference",
             "Metamorphic FPR", "Direct FPR", "Metamorphic top-1", "Direct top-1",
             "Reference stability"], rows)


def _bootstrap_table(boot: dict[str, Any]) -> Table:
    """The bootstrap table: mean, spread and interval of each nested or fixed quantity."""
    nested = boot["nested"]
    brows = []
    for label, entry in (("nested metamorphic - direct TPR (pts)",
                          nested["differences"]["metamorphic-direct/tpr"]),
                         ("nested metamorphic - direct FPR (pts)",
                          nested["differences"]["metamorphic-direct/fpr"]),
                         ("nested metamorphic - mixed TPR (pts)",
                          nested["differences"]["metamorphic-mixed/tpr"]),
                         ("nested metamorphic TPR (%)", nested["rates"]["metamorphic/tpr"]),
                         ("nested direct TPR (%)", nested["rates"]["direct/tpr"]),
                         ("fixed metamorphic - direct TPR (pts)",
                          boot["fixed"]["differences"]["metamorphic-direct/tpr"]),
                         ("nested matched-FPR metamorphic - maximum TPR (pts)",
                          nested["differences"]["matched/metamorphic-maximum/tpr"])):
        brows.append([label, f"{entry['mean']:.2f}", f"{entry['median']:.2f}",
                      f"{entry['sd']:.2f}", interval(entry), f"{entry['min']:.2f}",
                      f"{entry['max']:.2f}", f"{entry['share_negative']:.4f}"])
    return (["Quantity", "mean", "median", "sd", "95% interval", "min", "max",
             "share negative"], brows)


def _per_model_table(p: dict[str, Any], loc: dict[str, Any]) -> Table:
    """The per-model table: each detector's TPR and each scoring method's top-1."""
    per = []
    for model in p["direct"]["per_model"]:
        per.append([model] + [pct(p[d]["per_model"][model]["tpr"]["rate"])
                              for d in ("metamorphic", "direct", "mixed", "maximum")]
                   + [pct(loc[k]["per_model"][model]["top1"]) for k in ("metamorphic", "direct")])
    return (["Model", "Metamorphic TPR", "Direct TPR", "Mixed TPR", "Maximum TPR",
             "Metamorphic top-1", "Direct top-1"], per)


def tables(score: dict[str, Any], boot: dict[str, Any], sens: dict[str, Any]
           ) -> dict[str, tuple[list[str], list[list[str]]]]:
    """Every report table as (header, rows) of strings."""
    p, loc = score["primary"], score["localisation"]
    found: dict[str, tuple[list[str], list[list[str]]]] = {}
    found["table1"] = _detection_table(p)
    found["table2"] = _two_input_table(p, loc, score["matched_fpr"])
    found["table3"] = _localisation_table(loc)
    found["table4"] = _rotation_table(sens)
    found["bootstrap"] = _bootstrap_table(boot)
    found["per_model"] = _per_model_table(p, loc)
    return found


# The claim of claims/drift.yaml whose published value each figure draws beside the kit's,
# as figure -> series -> x (detector, kind or grid condition) -> claim id. The values are
# read from the ledger by id (``paper_values``); no published number is written here.
PAPER_CLAIMS: dict[str, dict[str, dict[str, str]]] = {
    "detection": {  # Table 1; the two-input maximum from Table 2
        "tpr": {"metamorphic": "A-114", "direct": "A-118", "mixed": "A-122", "maximum": "A-129"},
        "fpr": {"metamorphic": "A-115", "direct": "A-119", "mixed": "A-123", "maximum": "A-130"},
    },
    "localisation": {  # Table 3; the maximum's top-1 from Table 2 (the paper has no more)
        "top1": {"metamorphic": "A-132", "direct": "A-135", "maximum": "A-131"},
        "top3": {"metamorphic": "A-133", "direct": "A-136"},
        "mrr": {"metamorphic": "A-134", "direct": "A-137"},
    },
    "rotation": {  # Table 4 (primary = the full split); the paper prints one stability
        "metamorphic/tpr": {"primary": "A-138", "rot5-bilinear": "A-142",
                            "rot20-bilinear": "A-146", "rot10-nearest": "A-150",
                            "rot10-bicubic": "A-154"},
        "direct/tpr": {"primary": "A-139", "rot5-bilinear": "A-143", "rot20-bilinear": "A-147",
                       "rot10-nearest": "A-151", "rot10-bicubic": "A-155"},
        "metamorphic/fpr": {"primary": "A-141", "rot5-bilinear": "A-145",
                            "rot20-bilinear": "A-149", "rot10-nearest": "A-153",
                            "rot10-bicubic": "A-157"},
        "stability": {"rot20-bilinear": "A-092"},
    },
    "geometry": {"spearman_rho": {"primary": "A-095"}},
}
# The ledger holds rates in percent, as printed; the figures draw MRR x 100.
PAPER_SCALE = {"mrr": 100.0}
PAPER_LABEL = "paper (CIFAR-100)"
PaperValues = dict[str, dict[str, dict[str, float]]]


def paper_values(ledger: dict[str, Any]) -> PaperValues:
    """The published value of every ``PAPER_CLAIMS`` entry, read from the ledger by id and
    put in the figure's units; shaped like ``PAPER_CLAIMS``."""
    by_id = {claim["id"]: claim for claim in ledger["claims"]}
    found: PaperValues = {}
    for figure, series in PAPER_CLAIMS.items():
        for name, ids in series.items():
            for x, claim_id in ids.items():
                value = by_id.get(claim_id, {}).get("value")
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise KitError(f"claims/drift.yaml: claim {claim_id} (figure {figure}, "
                                   f"{name}, {x}) needs a numeric value, has {value!r}")
                found.setdefault(figure, {}).setdefault(name, {})[x] = \
                    PAPER_SCALE.get(name, 1.0) * float(value)
    return found


def _paper(ax: Any, xs: Sequence[float], values: Sequence[float | None], **style: Any) -> None:
    """The paper's values beside the kit's bars or points (none where it prints none);
    the artist carries gid "paper". Default style: an open diamond, a shape no whisker or
    cap has."""
    shown = [(x, v) for x, v in zip(xs, values, strict=True) if v is not None]
    if shown:
        style = {"marker": "D", "markersize": 8, "markeredgewidth": 1.6, "color": "black",
                 "markerfacecolor": "white", "zorder": 4, "label": PAPER_LABEL, **style}
        ax.plot(*zip(*shown, strict=True), linestyle="none", gid="paper", **style)


def detection_figure(score: dict[str, Any], boot: dict[str, Any], paper: PaperValues) -> Any:
    """Figure 1: held-out TPR and FPR per detector, nested intervals, the paper's values."""
    detectors = ("metamorphic", "direct", "mixed", "maximum")
    fig, axes = pyplot().subplots(1, 2, figsize=(10, 4))
    for ax, what, label in ((axes[0], "tpr", "fault detection rate (TPR)"),
                            (axes[1], "fpr", "clean false-alarm rate (FPR)")):
        point = [100 * score["primary"][d][what]["rate"] for d in detectors]
        nested = [boot["nested"]["rates"][f"{d}/{what}"] for d in detectors]
        lower = [pt - n["p2_5"] for pt, n in zip(point, nested, strict=True)]
        upper = [n["p97_5"] - pt for pt, n in zip(point, nested, strict=True)]
        ax.bar(range(4), point, yerr=[np.maximum(lower, 0), np.maximum(upper, 0)], capsize=0,
               ecolor="#444444", color=["#c44e52", "#4c72b0", "#8c8c8c", "#55a868"])
        _paper(ax, list(range(4)), [paper["detection"][what].get(d) for d in detectors])
        ax.set_xticks(range(4), ["metamorphic", "direct L2", "mixed tol.", "two-input max"])
        ax.set_ylabel(f"{label}, %")
        ax.set_title(f"{label}\n(bars: held-out; whiskers: nested 95% interval)", fontsize=9)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def localisation_figure(score: dict[str, Any], paper: PaperValues) -> Any:
    """Figure 2: top-1, top-3 and MRR per scoring method, the paper's values as open diamonds."""
    loc = score["localisation"]
    kinds = ("metamorphic", "direct", "maximum")
    fig, ax = pyplot().subplots(figsize=(7, 4))
    xs: list[float] = []
    published: list[float | None] = []
    for i, stat in enumerate(("top1", "top3", "mrr")):
        at = list(np.arange(3) + 0.27 * (i - 1))
        ax.bar(at, [100 * loc[k][stat] for k in kinds], width=0.27,
               label={"top1": "top-1 %", "top3": "top-3 %", "mrr": "MRR x 100"}[stat])
        xs += at
        published += [paper["localisation"][stat].get(k) for k in kinds]
    _paper(ax, xs, published, markersize=6)
    ax.set_xticks(range(3), ["metamorphic contrast", "direct", "two-input maximum"])
    ax.set_ylabel("held-out fault cases")
    ax.set_title("Layer localisation from activation sketches", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _at(entry: dict[str, Any], path: list[str]) -> dict[str, Any]:
    for key in path:
        entry = entry[key]
    return entry


def rotation_figure(sens: dict[str, Any], paper: PaperValues) -> Any:
    """Figure 3: the rotation grid; the paper's Table 4 values as hollow markers."""
    keys = list(sens)
    x = list(range(len(keys)))
    series = (("metamorphic/tpr", "o-", "#c44e52", "metamorphic TPR"),
              ("direct/tpr", "s-", "#4c72b0", "direct TPR"),
              ("metamorphic/fpr", "^--", "#c44e52", "metamorphic FPR"),
              ("stability", "d:", "#555555", "reference top-1 stability"))
    fig, ax = pyplot().subplots(figsize=(10, 4))
    for field, style, colour, label in series:
        path = ["reference_stability"] if field == "stability" else field.split("/")
        ax.plot(x, [100 * _at(sens[k], path)["rate"] for k in keys], style, color=colour,
                label=label)
    for i, (field, style, colour, _) in enumerate(series):
        _paper(ax, x, [paper["rotation"][field].get(k) for k in keys], marker=style[0],
               markersize=11, markeredgewidth=1.5, markerfacecolor="none", color=colour,
               label=f"{PAPER_LABEL}, hollow" if i == 0 else "_")
    ax.set_xticks(x, [f"{sens[k]['condition']}\n({sens[k]['split']})" for k in keys], fontsize=8)
    ax.set_ylabel("%")
    ax.set_title("Rotation sensitivity grid", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig


def geometry_figure(score: dict[str, Any], table: dict[str, Array], paper: PaperValues) -> Any:
    """Figure 4: cosine against cancellation ratio; the title gives both Spearman rhos."""
    held = (table["role"] == ROLE_CODES["heldout"]) & (table["fault"] >= 0) \
        & np.isfinite(table["cosine"])
    fig, ax = pyplot().subplots(figsize=(6, 5))
    ax.scatter(table["cosine"][held], table["ratio"][held], s=3, alpha=0.3, color="#4c72b0")
    ax.set_xlabel("cos(e_o, e_t)")
    ax.set_ylabel("||e_t - e_o|| / (||e_o|| + ||e_t||)")
    rho = score["geometry"]["spearman_rho"]
    published = paper["geometry"]["spearman_rho"]["primary"]
    ax.set_title(f"Error geometry of held-out fault cases\n(Spearman rho {rho:.3f}; "
                 f"{PAPER_LABEL} {published:.3f})", fontsize=10)
    fig.tight_layout()
    return fig


def figures(out: Path, score: dict[str, Any], boot: dict[str, Any], sens: dict[str, Any],
            table: dict[str, Array], paper: PaperValues) -> list[str]:
    """The four figures, each with the paper's values (``paper_values``) beside the kit's;
    returns their file names."""
    drawn: dict[str, Callable[[], Any]] = {
             "figure1-detection.png": lambda: detection_figure(score, boot, paper),
             "figure2-localisation.png": lambda: localisation_figure(score, paper),
             "figure3-rotation-grid.png": lambda: rotation_figure(sens, paper),
             "figure4-geometry.png": lambda: geometry_figure(score, table, paper)}
    for name, draw in drawn.items():
        fig = draw()
        save_png(fig, out / name)
    return list(drawn)


# What each table and figure shows, as its heading on the page (the key is its file stem).
HEADINGS = {
    "table1": "Table 1: held-out detection per detector (TPR, FPR, AUROC, AUPRC)",
    "figure1-detection.png": "Detection and false-alarm rates per detector, the paper's beside",
    "table2": "Table 2: the metamorphic contrast against the two-input maximum",
    "table3": "Table 3: localisation of the faulty layer per scoring method",
    "figure2-localisation.png": "Localisation (top-1, top-3, MRR) per scoring method, "
                                "the paper's beside",
    "table4": "Table 4: detection, localisation and reference stability per rotation",
    "figure3-rotation-grid.png": "Rotation sensitivity grid, the paper's Table 4 beside",
    "figure4-geometry.png": "Error geometry: cosine of e_o and e_t against the cancellation "
                            "ratio",
    "bootstrap": "Bootstrap: mean, spread and 95% interval of each difference and rate",
    "per_model": "Per model: each detector's TPR and each scoring method's top-1",
}
NOTES = {"figure1-detection.png": "Bars: the kit's held-out rates on the digits substrate; "
                                  "whiskers (grey, no caps): the nested bootstrap's 95% "
                                  "interval; open diamonds: the paper's values (CIFAR-100), "
                                  "read from claims/drift.yaml.",
         "figure2-localisation.png": "Bars: the kit's top-1, top-3 and MRR x 100; open "
                                     "diamonds: the paper's values.",
         "figure3-rotation-grid.png": "Lines: the kit's rates per rotation condition; hollow "
                                      "markers: the paper's Table 4 values."}


Printed = dict[str, tuple[list[str], list[list[str]]]]  # "table1" -> the paper's table


def page(found: dict[str, tuple[list[str], list[list[str]]]], figure_names: list[str],
         provenance: dict[str, Any], printed: Printed | None = None) -> str:
    """The HTML page: the tables and figures in the order of the paper (``HEADINGS``),
    each of the paper's tables followed by the paper's own, as printed (``printed``: from
    ``claims/papers/tables.yaml``, on CIFAR-100), then the provenance."""
    sections: list[PageTable | PageFigure] = []
    for key in HEADINGS:
        if key in found:
            sections.append(PageTable(HEADINGS[key], *found[key]))
            if printed and key in printed:
                sections.append(PageTable(
                    f"{HEADINGS[key].split(':')[0]} as the paper printed it (CIFAR-100, the "
                    "paper's models; beside the kit's above, on the digits stand-in)",
                    *printed[key]))
        elif key in figure_names:
            sections.append(PageFigure(HEADINGS[key], key, NOTES.get(key, "")))
    return html_page("Drift study report", "Drift study: detection, localisation and "
                     "rotation sensitivity", provenance, sections)


def write_report(run: Run, out: Path, paper: PaperValues, provenance: dict[str, Any],
                 printed: Printed | None = None) -> dict[str, Any]:
    """Tables, figures and ``index.html`` of a run folder (a run, or the shipped evidence
    under claims/) into ``out``, from its score, bootstrap and sensitivity summaries."""
    score_record = run.record("score")
    load = {name: read_json(run.listed(name, run.record(name)["summary"]["path"],
                                       "summary.path"),
                            f"delete {run.stage(name)} and rerun the {name} stage")
            for name in ("score", "bootstrap", "sensitivity")}
    found = tables(load["score"], load["bootstrap"], load["sensitivity"])
    for name, (header, rows) in found.items():
        write_table(out, name, header, rows)
    name = table_name("cand", score_record["primary_condition"])
    table = read_table(run.listed("score", score_record["tables"][name]["path"],
                                  f"tables.{name}.path"), score_record["tables"][name])
    figure_names = figures(out, load["score"], load["bootstrap"], load["sensitivity"], table,
                           paper)
    write_atomic(out / "index.html", page(found, figure_names, provenance, printed).encode())
    return {"tables": sorted(found), "figures": figure_names, "page": "report/index.html"}
