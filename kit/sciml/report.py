"""The SciML study's report: its tables as the kit computes them and three figures, from
the records of one run folder (``runs/sciml``, or the shipped ``claims/sciml/evidence/kit``
with ``--out`` elsewhere), into ``<out>/index.html`` with each table as markdown and CSV.

Tables: verdict counts per relation and subject (counted from the ledger's verdicts), the
admissibility gate's decisions (the second task's ``cmp-*`` cards among them), the unified
fault catalogue's detection matrix, the MeshGraphNet sweeps (double scale, zero-v_y
fraction), the second task's measurements and the operator floor's resolutions.

Figures: the operator floor on log-log axes (measured error, the closed-form remainder,
the a-priori bound and the fitted slope, the paper's slope beside); the two-axis verdict
reading, V / tolerance against the domain score D, one marker per verdict type, the paper's
Figure 3 points beside; the entry x detector detection heatmap of the unified catalogue,
the labelled detectors' precision/recall beside the paper's. The paper's values are read
from claims/sciml.yaml by claim id at runtime. Nothing here computes a result the claims
rest on; the report folder is outside the run manifest.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from kit.errors import KitError
from kit.files import write_atomic
from kit.papers import FILE, load_tables, read_ledger
from kit.paths import ROOT
from kit.reporting import (
    PageFigure,
    PageTable,
    Rows,
    html_page,
    pyplot,
    rules_shown,
    save_png,
    write_table,
)
from kit.sciml.report_records import SWEEPS, read_records

LEDGER = ROOT / "claims" / "sciml.yaml"
VERDICTS = ("pass", "fail", "out-of-relation-domain", "inconclusive")
MARKERS = {"pass": "o", "fail": "x", "out-of-relation-domain": "^", "inconclusive": "s"}
# V / tolerance below this is drawn on the linear part of the symmetric-log axis.
LINEAR_BELOW = 1e-3
Table = tuple[list[str], Rows]


def subject(case: str) -> str:
    """The subject of a verdict's case: ``mgn-seed0-train-f39-p0`` -> ``mgn``,
    ``fno-heat-seed0-case0`` -> ``fno-heat``, ``airfoil-subject5-p4`` -> ``airfoil``."""
    return re.split(r"-(?:seed|subject|case)\d", case)[0]


def verdict_table(ledger: dict[str, Any]) -> Table:
    counts: Counter[tuple[str, str, str]] = Counter(
        (v["card"], subject(v["case"]), v["verdict"]) for v in ledger["verdicts"])
    kinds = [k for k in VERDICTS if any(key[2] == k for key in counts)]
    kinds += sorted({key[2] for key in counts} - set(kinds))
    rows = [[card, subj, *(str(counts[(card, subj, k)]) for k in kinds),
             str(sum(counts[(card, subj, k)] for k in kinds))]
            for card, subj in sorted({(c, s) for c, s, _ in counts})]
    return ["Relation (card)", "Subject", *kinds, "Total"], rows


def condition_text(name: str, condition: Any) -> str:
    """One gate condition in words: ``basis: fails (density variation ...)``."""
    label = name.replace("_", " ")
    if isinstance(condition, dict) and "state" in condition:
        why = condition.get("why")
        return f"{label}: {condition['state']}" + (f" ({why})" if why else "")
    return f"{label}: {condition}"


def gate_table(ledger: dict[str, Any]) -> Table:
    rows = [[d["card"], d["decision"],
             "; ".join(condition_text(k, v) for k, v in sorted(d.get("conditions", {}).items()))]
            for d in sorted(ledger["decisions"], key=lambda d: d["card"])]
    return ["Card", "Gate decision", "Conditions (state and why)"], rows


def trials(entry: dict[str, Any]) -> int:
    """An entry's trial count: MeshGraphNet mutants record ``n_trials``, the closed-form
    probes their ``trials``."""
    return int(entry["n_trials"]) if "n_trials" in entry else len(entry["trials"])


def catalogue_table(unified: dict[str, Any]) -> Table:
    detectors = sorted({d for e in unified["entries"] for d in e["detections"]})
    rows = [[e["name"], e["family"], e.get("fault_class", e["kind"]),
             *(f"{e['detections'][d]}/{trials(e)}" if d in e["detections"] else "-"
               for d in detectors)]
            for e in unified["entries"]]
    return ["Entry", "Family", "Class", *detectors], rows


def _rate(entry: dict[str, Any]) -> str:
    low, high = entry["wilson95"]
    return f"{entry['detected']}/{entry['n']} [{100 * low:.0f}, {100 * high:.0f}]"


def sweep_table(faults: dict[str, Any]) -> Table:
    detectors = sorted(faults["thresholds"])
    rows = [[SWEEPS[sweep], level, *(_rate(at[d]) for d in [*detectors, "any"])]
            for sweep in SWEEPS
            for level, at in sorted(faults[sweep].items(), key=lambda kv: float(kv[0]))]
    return ["Sweep", "Level", *detectors, "any"], rows


def second_task_table(second: dict[str, Any]) -> Table:
    rows = [[k, f"{v:.6g}"] for k, v in sorted(second["measured"].items())]
    rows.append(["max permutation violation", f"{max(second['permutation_violations']):.3g}"])
    return ["Measured", "Value"], rows


def floor_table(floor: dict[str, Any]) -> Table:
    rows = [[str(r["refinements"]), str(r["elements"]), f"{r['h']:.4g}",
             f"{r['measured']:.4g}", f"{r['exact_remainder']:.4g}", f"{r['predicted']:.4g}",
             f"{r['bound']:.4g}"] for r in floor["resolutions"]]
    return ["Refinements", "Elements", "h", "Measured", "Closed form", "Fitted", "Bound"], rows


def _labelled(fig: Any, ax: Any, xlabel: str, ylabel: str, title: str) -> Any:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    return fig


# The claims of claims/sciml.yaml whose published values the operator-floor figure draws
# (read by id at runtime: no published number is written here).
PAPER_SLOPE = {"slope": "B-072", "low": "B-073", "high": "B-073b"}


def paper_slope(ledger: dict[str, Any]) -> dict[str, float]:
    """The paper's operator-floor slope and its 95% interval, from the claim ledger."""
    by_id = {claim["id"]: claim for claim in ledger["claims"]}
    found = {}
    for name, claim_id in PAPER_SLOPE.items():
        value = by_id.get(claim_id, {}).get("value")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise KitError(f"claims/sciml.yaml: claim {claim_id} (the paper's slope, {name}) "
                           f"needs a numeric value, has {value!r}")
        found[name] = float(value)
    return found


def floor_figure(floor: dict[str, Any], paper: dict[str, float] | None = None) -> Any:
    """The operator floor on log-log axes; with ``paper``, the paper's slope as a grey line
    through the kit's coarsest measured point."""
    plt = pyplot()
    rows = floor["resolutions"]
    h = [r["h"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4.5))
    low, high = floor["slope_ci95"]
    ax.loglog(h, [r["measured"] for r in rows], "o", label="measured", gid="measured")
    ax.loglog(h, [r["exact_remainder"] for r in rows], "-", label="closed-form remainder",
              gid="closed-form")
    ax.loglog(h, [r["predicted"] for r in rows], ":", gid="fit",
              label=f"fit: slope {floor['slope']:.4f} [{low:.4f}, {high:.4f}]")
    ax.loglog(h, [r["bound"] for r in rows], "--", label="a-priori bound", gid="bound")
    if paper:
        start = rows[0]["measured"]
        ax.loglog(h, [start * (x / h[0]) ** paper["slope"] for x in h], "-", color="grey",
                  alpha=0.6, linewidth=3, gid="paper", zorder=0,
                  label=f"paper: slope {paper['slope']:.3f} [{paper['low']:.3f}, "
                        f"{paper['high']:.3f}]")
    return _labelled(fig, ax, "mesh size h", "operator floor (discrete L2)",
                     "Operator floor against mesh size")


# The paper's Figure 3 points the verdict reading marks, as (name, V claim, divisor claim,
# D claim): V / tolerance is the V claim over the divisor (the paper's exact-relation
# tolerance, which its caption and Sec 5.3 give P1 too) or, with no divisor, the V claim
# as printed (P4's V/floor). Read by id at runtime: no published number is written here.
PAPER_POINTS = (("P1 node permutation", "B-016", "B-012", "B-004"),
                ("P3 exact mirror-y", "B-021", "B-012", "B-003"),
                ("P4 mirror-y OOD (V/floor)", "B-041", None, "B-002"))
# The detectors whose precision/recall the paper prints, beside the catalogue's heatmap.
PAPER_PR = {"permutation": "B-076", "conservation": "B-077"}
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _claim(ledger: dict[str, Any], claim_id: str) -> dict[str, Any]:
    found = [c for c in ledger["claims"] if c["id"] == claim_id]
    if not found:
        raise KitError(f"claims/sciml.yaml: no claim {claim_id} (a paper value the SciML "
                       "report draws)")
    return dict(found[0])


def paper_number(ledger: dict[str, Any], claim_id: str) -> float:
    """A claim's published number: its ``value`` or, where the ledger holds only the
    paper's text, the last number printed in ``published`` (``rel L2 <x>`` gives x)."""
    claim = _claim(ledger, claim_id)
    value = claim.get("value")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    printed = _NUMBER.findall(str(claim.get("published", "")))
    if value is not None or not printed:
        raise KitError(f"claims/sciml.yaml: claim {claim_id} needs a numeric value or a "
                       f"printed number, has value {value!r}, published "
                       f"{claim.get('published')!r}")
    return float(printed[-1])


def paper_points(ledger: dict[str, Any]) -> list[dict[str, Any]]:
    """The paper's Figure 3 points (``PAPER_POINTS``) on the verdict reading's axes."""
    points = []
    for name, v_id, divisor, d_id in PAPER_POINTS:
        ratio = paper_number(ledger, v_id)
        if divisor is not None:
            ratio /= paper_number(ledger, divisor)
        points.append({"name": name, "claim": v_id, "domain": paper_number(ledger, d_id),
                       "ratio": ratio})
    return points


def paper_pr(ledger: dict[str, Any]) -> dict[str, tuple[float, float, str]]:
    """The paper's (precision, recall, claim id) per detector of ``PAPER_PR``: a claim's
    value is the pair, or the precision with the recall as its part labelled ``recall``."""
    found = {}
    for detector, claim_id in PAPER_PR.items():
        claim = _claim(ledger, claim_id)
        value = claim.get("value")
        parts = claim.get("rules", {}).get("kit", {}).get("parts", [])
        recall = [p.get("value") for p in parts if p.get("label") == "recall"]
        pair = value if isinstance(value, list) else [value, *recall[:1]]
        if len(pair) != 2 or not all(isinstance(x, int | float) and not isinstance(x, bool)
                                     for x in pair):
            raise KitError(f"claims/sciml.yaml: claim {claim_id} needs a precision and a "
                           f"recall, has {value!r} and recall parts {recall!r}")
        found[detector] = (float(pair[0]), float(pair[1]), claim_id)
    return found


def verdict_figure(ledger: dict[str, Any], paper: list[dict[str, Any]] | None = None) -> Any:
    """V / tolerance against D per measured verdict; with ``paper``, the paper's Figure 3
    points as black stars labelled with their claims."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    by_kind: dict[str, list[tuple[float, float]]] = {}
    for v in ledger["verdicts"]:
        if v["violation"] is None:  # not measured (preconditions unmet): no point to draw
            continue
        ratio = v["violation"] / v["tolerance"] if v["tolerance"] > 0 else np.inf
        by_kind.setdefault(v["verdict"], []).append((v["domain"], ratio))
    for kind, points in sorted(by_kind.items()):
        d, r = zip(*points, strict=True)
        ax.scatter(d, np.minimum(r, 1e12), marker=MARKERS.get(kind, "."), gid=kind,
                   label=f"{kind} ({len(points)})", alpha=0.6)
    if paper:
        ax.scatter([p["domain"] for p in paper], [p["ratio"] for p in paper], marker="*",
                   s=220, color="black", gid="paper", zorder=5,
                   label="paper's Figure 3 (" + ", ".join(p["claim"] for p in paper) + ")")
        for p in paper:  # the label below a high star, above a low one
            high = p["ratio"] > 1
            ax.annotate(f"paper {p['name']}: {p['ratio']:.3g}", (p["domain"], p["ratio"]),
                        xytext=(9, -3 if high else 3), textcoords="offset points",
                        fontsize=7, va="top" if high else "bottom")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("symlog", linthresh=LINEAR_BELOW)
    ax.set_ylim(bottom=0)  # V and the tolerance are both non-negative
    _labelled(fig, ax, "domain score D", "V / tolerance (symlog)",
              "Two-axis verdict reading (stars: the paper's values)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.6, 0.88))  # clear of the stars
    return fig


def _two(value: float | None) -> str:
    """A rate to two places; none (nothing flagged, so no precision) as a dash."""
    return "-" if value is None else f"{value:.2f}"


def heatmap_figure(unified: dict[str, Any],
                   paper: dict[str, tuple[float, float, str]] | None = None) -> Any:
    """Detected / trials per entry and detector; with ``paper``, each labelled detector's
    precision/recall, the kit's beside the paper's, under the map."""
    plt = pyplot()
    entries = unified["entries"]
    detectors = sorted({d for e in entries for d in e["detections"]})
    rates = np.array([[e["detections"][d] / trials(e) if d in e["detections"] else np.nan
                       for d in detectors] for e in entries])
    fig, ax = plt.subplots(figsize=(6, 0.18 * len(entries) + 2.4))
    image = ax.imshow(rates, aspect="auto", vmin=0, vmax=1, cmap="viridis", gid="rates")
    ax.set_xticks(range(len(detectors)), detectors, rotation=30, ha="right")
    ax.set_yticks(range(len(entries)), [e["name"] for e in entries], fontsize=6)
    ax.set_title("Detection rate per catalogue entry\n(blank: the detector does not apply)")
    if paper:
        labelled = unified.get("labelled", {})
        ax.set_xlabel("precision/recall, kit vs paper:\n" + "\n".join(
            f"{d}: kit {_two(labelled[d]['precision']['value'])}/"
            f"{_two(labelled[d]['recall']['value'])}, paper {p:.2f}/{r:.2f} ({cid})"
            for d, (p, r, cid) in paper.items() if d in labelled), fontsize=8)
        ax.xaxis.label.set_gid("paper")
    fig.colorbar(image, ax=ax, label="detected / trials")
    fig.tight_layout()
    return fig


def publish_report(evidence: Path, out: Path | None = None) -> Path:
    """``write_report`` into ``out`` (default ``<evidence>/report``) by ``kit.owned``'s rule
    for the folders the kit writes: a folder of the user's is used only while empty, and in
    its own earlier report the kit replaces only what it wrote; returns the page."""
    from kit.owned import publish, staged

    out = out or evidence / "report"
    with staged(out) as staging:
        write_report(evidence, staging)
        publish(staging, out, "python -m kit sciml-report", commit="index.html")
    return out / "index.html"


def write_report(evidence: Path, out: Path | None = None) -> Path:
    """Render the report of the run records in ``evidence`` into ``out`` (default
    ``<evidence>/report``); returns the page. Nothing is written under ``claims/``."""
    out = out or evidence / "report"
    claims = (ROOT / "claims").resolve()
    if out.resolve().is_relative_to(claims):
        raise KitError(f"{out}: the report is never written under {claims} (verify "
                       "accounts for every file there); name another folder with --out")
    records = read_records(evidence)  # each validated first (kit.sciml.report_records)
    ledger = records["ledger.json"]
    found = {"Verdicts per relation and subject": verdict_table(ledger),
             "Admissibility gate: each card's decision and conditions": gate_table(ledger),
             "Unified catalogue: detections per entry and detector": catalogue_table(
                 records["unified.json"]),
             "MeshGraphNet sweeps: detected/n [Wilson 95%] per level": sweep_table(
                 records["mgn_faults.json"]),
             "Second task: measurements": second_task_table(records["second_task.json"]),
             "Operator floor per mesh resolution": floor_table(records["operator_floor.json"])}
    for number, (header, rows) in enumerate(found.values(), 1):
        write_table(out, f"table{number}", header, rows)
    published = read_ledger(LEDGER)  # the claim ledger: the paper's values, by claim id
    figures = {"figure1-operator-floor.png": floor_figure(
                   records["operator_floor.json"], paper_slope(published)),
               "figure2-verdict-reading.png": verdict_figure(ledger, paper_points(published)),
               "figure3-detection-heatmap.png": heatmap_figure(records["unified.json"],
                                                               paper_pr(published))}
    for name, fig in figures.items():
        save_png(fig, out / name)
    shown = evidence.resolve()  # never an absolute local path on the page
    provenance = {"evidence": shown.relative_to(ROOT) if shown.is_relative_to(ROOT)
                  else evidence.name, "study": ledger.get("study", ""),
                  "verdicts": len(ledger["verdicts"]), "subjects": ledger.get("subjects_note"),
                  "rules": rules_shown("sciml")}
    page = out / "index.html"
    write_atomic(page, html_page("SciML study report", "SciML study: verdicts, gate, fault "
                                 "catalogue and operator floor", provenance,
                                 [*sections(found, list(figures)), *printed_tables()]).encode())
    return page


def printed_tables() -> list[PageTable]:
    """The paper's own tables, as printed (``claims/papers/tables.yaml``), after the kit's:
    its values beside the kit's tables above (none where the checkout has no
    transcription)."""
    if not (ROOT / FILE).is_file():
        return []
    return [PageTable(f"{name}, as the paper printed it (the paper's subjects)",
                      table["columns"], [[row["label"], *row["cells"]] for row in table["rows"]])
            for (study, name), table in load_tables(ROOT).items() if study == "sciml"]


# The figures' headings, and the table each is drawn beside: (file, heading, after table).
FIGURES = (("figure2-verdict-reading.png", "Two-axis verdict reading: V / tolerance against "
            "the domain score D, one marker per verdict; black stars: the paper's Figure 3 "
            "values (P1, P3, P4)", "Verdicts per relation and subject"),
           ("figure3-detection-heatmap.png", "Detection rate per catalogue entry and detector; "
            "below it, detector precision/recall beside the paper's",
            "Admissibility gate: each card's decision and conditions"),
           ("figure1-operator-floor.png", "Operator floor against mesh size h, the paper's "
            "slope beside", "Second task: measurements"))


def sections(found: dict[str, Table], figure_names: list[str]) -> list[PageTable | PageFigure]:
    """The page's order: each figure before the table it draws (``FIGURES``)."""
    out: list[PageTable | PageFigure] = []
    for heading, (header, rows) in found.items():
        out.append(PageTable(heading, header, rows))
        out += [PageFigure(title, name) for name, title, after in FIGURES
                if after == heading and name in figure_names]
    return out
