"""Ranks judged at their ties: the replay verdict of the drift study's localisation ranks
and of the summaries computed from them.

A true layer's rank (``kit.drift.localise``) counts the layers whose normalised score is at
least the true layer's. Many layers of a fault case score at the clean noise level (about
1e-6, the kernels' own difference between the two runtimes), and their normalisers are
quantiles of that noise, so a layer score that moves within its replay bound can move a
rank by several places. An integer compared exactly then differs on another CPU although
every float it comes from is within its bound.

``rank_range`` gives, for each fault row, the ranks its layer scores allow: every score
and every clean calibration score may move by its bound (``max(atol, rtol * |x|)``, the
bound of ``score/*layers.npz`` in ``kit/protocols/tolerances.yaml``); a normaliser, a
quantile of the calibration scores, then moves at most as far as they do. The lowest rank
counts the layers certainly at least as high as the true layer, the highest those possibly
so. ``revise`` turns a case table's ``differs`` into ``within tolerance`` when every float
array is within the table's bound (its figures are then those of the floats; the ranks'
moves are counted in its detail), every integer array but the ranks is equal, and every
moved rank lies within the range of the fresh run's layer scores (and of the shipped
evidence's, where it ships them: the primary table's ``score/layers.npz``; the grid
tables' ``score/grid-layers.npz``). A summary computed from the tables
(``DERIVED``) that differs is recomputed here from each side's own evidence; when both
recomputations give their side's stored values within the bound and every input file is
within its bound, the summary moved only through its inputs, and the verdict says so.
Anything else stays ``differs``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from kit.drift.analysis import CLEAN
from kit.drift.evidence import table_name
from kit.drift.localise import KINDS, normalisers
from kit.drift.shipped import Evidence
from kit.files import canonical_json, load_npz
from kit.tolerance import (
    Bound,
    Verdict,
    bound_for,
    compare_arrays,
    compare_json,
    through_inputs,
)

Array = np.ndarray[Any, Any]
LAYERS = "score/layers.npz"
GRID_LAYERS = "score/grid-layers.npz"
CASES = "score/cases/"


def rank_range(scores: Array, clean: Array, truth: Array, bound: Bound, quantile: float
               ) -> tuple[Array, Array]:
    """The lowest and highest 1-based pessimistic rank of the true layer of each row
    (``scores`` (N, L), ``clean`` (N_cal, L) calibration scores, ``truth`` (N,)) that
    scores within ``bound`` of these allow."""
    def slack(x: Array) -> Array:
        return np.maximum(bound.atol, bound.rtol * np.abs(x))

    norm_low = normalisers(np.maximum(clean - slack(clean), 0.0), quantile)
    norm_high = normalisers(clean + slack(clean), quantile)
    low, high = np.maximum(scores - slack(scores), 0.0), scores + slack(scores)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio_low = np.where(norm_high > 0, low / np.where(norm_high > 0, norm_high, 1.0),
                             np.where(low > 0, np.inf, 0.0))
        ratio_high = np.where(norm_low > 0, high / np.where(norm_low > 0, norm_low, 1.0),
                              np.where(high > 0, np.inf, 0.0))
    rows = np.arange(len(truth))
    true_low, true_high = ratio_low[rows, truth][:, None], ratio_high[rows, truth][:, None]
    other = np.ones(scores.shape, bool)
    other[rows, truth] = False
    lowest = 1 + np.count_nonzero((ratio_low >= true_high) & other, axis=1)
    highest = 1 + np.count_nonzero((ratio_high >= true_low) & other, axis=1)
    return lowest, highest


def table_ranges(table: dict[str, Array], layers: dict[str, Array], models: list[str],
                 bound: Bound, quantile: float) -> dict[str, tuple[Array, Array]]:
    """Per kind, every row's allowed rank range (0 to 0 on rows that carry no rank), from
    the table's layer scores (``<model>/<kind>`` and ``<model>/rows``, as the score stage
    keeps them)."""
    size = len(table["model"])
    out = {k: (np.zeros(size, np.int64), np.zeros(size, np.int64)) for k in KINDS}
    for name in models:
        rows = layers[f"{name}/rows"]
        fault = table["fault"][rows] != CLEAN
        truth = table["layer"][rows][fault].astype(np.int64)
        for kind in KINDS:
            scores = layers[f"{name}/{kind}"].astype(np.float64)
            lowest, highest = rank_range(scores[fault], scores[~fault], truth, bound, quantile)
            out[kind][0][rows[fault]], out[kind][1][rows[fault]] = lowest, highest
    return out


def _layers_of(root: Path, ev: Evidence, name: str) -> dict[str, Array] | None:
    """The layer scores of table ``name`` in one evidence folder, or None where it ships
    none."""
    if name == table_name("cand", ev.record["primary_condition"]):
        return ev.layers
    if not (root / GRID_LAYERS).is_file():
        return None
    prefix = f"{name}/"
    found = {k[len(prefix):]: v for k, v in load_npz(root / GRID_LAYERS).items()
             if k.startswith(prefix)}
    return found or None


def judge_table(fresh: Path, shipped: Path, name: str, bounds: list[Bound],
                found: Verdict) -> Verdict:
    """A differing case table judged with its ranks at their ties (module docstring)."""
    table = name[len(CASES):-len(".npz")]
    layer_bound = bound_for(bounds, "drift", LAYERS)
    if layer_bound is None or not found.bound:
        return found
    sides = {"fresh": Evidence(fresh), "shipped": Evidence(shipped)}
    arrays = {side: load_npz(root / name) for side, root in (("fresh", fresh),
                                                             ("shipped", shipped))}
    ranks = [f"rank_{k}" for k in KINDS]
    bound = bound_for(bounds, "drift", name)
    assert bound is not None  # found.bound names it
    again = Verdict(name, "within tolerance", bound=found.bound)
    compare_arrays({k: v for k, v in arrays["shipped"].items() if k not in ranks},
                   {k: v for k, v in arrays["fresh"].items() if k not in ranks}, bound, again)
    if again.verdict != "within tolerance":
        return found
    judged = []
    for side, other in (("fresh", "shipped"), ("shipped", "fresh")):
        ev = sides[side]
        layers = _layers_of(ev.root, ev, table)
        if layers is None:
            continue
        ranges = table_ranges(arrays[side], layers, ev.models, layer_bound, ev.quantile)
        for kind in KINDS:
            low, high = ranges[kind]
            theirs = arrays[other][f"rank_{kind}"].astype(np.int64)
            outside = (theirs < low) | (theirs > high)
            if outside.any():
                row = int(np.argmax(outside))
                found.where = (f"array rank_{kind} element [{row}]: the {other} rank "
                               f"{theirs[row]} lies outside {low[row]}..{high[row]}, the "
                               f"ranks the {side} layer scores allow")
                return found
        judged.append(side)
    if "fresh" not in judged:
        found.where += "; the fresh run ships no layer scores of this table to judge its ranks"
        return found
    moves = np.concatenate([np.abs(arrays["fresh"][r].astype(np.int64)
                                   - arrays["shipped"][r].astype(np.int64)) for r in ranks])
    return Verdict(name, "within tolerance", again.max_abs, again.max_rel,
                   bound=f"{found.bound}; ranks at the ties of the layer scores "
                         f"(atol {layer_bound.atol:g}, rtol {layer_bound.rtol:g})",
                   detail={"ranks_moved": int(np.count_nonzero(moves)),
                           "largest_rank_move": int(moves.max()), "ranks_judged_by": judged})


def score_summary_of(ev: Evidence) -> Any:
    """The score stage's summary recomputed from one evidence folder's shipped tables,
    layer sketches and clean logits (a replay's side, and verify's recount)."""
    from kit.drift.analysis import score_summary

    tables = {n: ev.table(d["cell"], d["condition"]) for n, d in ev.record["tables"].items()}
    return score_summary(ev.protocol, ev.record, tables, ev.layers, ev.clean,
                         np.asarray(ev.record["labels"], np.int64))


def _bootstrap_summary(ev: Evidence) -> Any:
    from kit.drift.stages.bootstrap import compute

    return compute(ev.protocol, ev.table(), ev.layers, ev.models, ev.images("calibration"),
                   ev.images("heldout"))[0]


# The summaries computed from the evidence tables alone, each with its computation.
DERIVED: dict[str, Callable[[Evidence], Any]] = {
    "score/summary.json": score_summary_of,
    "sensitivity/summary.json": lambda ev: ev.sensitivity,
    "bootstrap/summary.json": _bootstrap_summary,
}


def judge_derived(fresh: Path, shipped: Path, name: str, bounds: list[Bound],
                  found: Verdict, inputs_within: bool) -> Verdict:
    """A differing summary recomputed from each side's own evidence (module docstring)."""
    bound = bound_for(bounds, "drift", name)
    if bound is None or not inputs_within:
        return found

    def unlike(root: Path) -> str:
        stored = json.loads((root / name).read_bytes())
        again = json.loads(canonical_json(DERIVED[name](Evidence(root))))
        check = Verdict(name, "within tolerance")
        compare_json(stored, again, bound, "", check)
        return "" if check.verdict == "within tolerance" else check.where

    return through_inputs(found, unlike, fresh, shipped, "evidence",
                          "recomputed from each side's own tables, each side gives its "
                          "stored values")


def revise(verdicts: list[Verdict], fresh: Path, shipped: Path, bounds: list[Bound]
           ) -> list[Verdict]:
    """The drift study's verdicts with every differing case table judged at its ties, then
    every differing summary judged through its inputs."""
    out = [judge_table(fresh, shipped, v.file, bounds, v)
           if v.verdict == "differs" and v.file.startswith(CASES) and v.file.endswith(".npz")
           else v for v in verdicts]
    inputs = [v for v in out if v.file.startswith(("score/", "split/")) and v.file not in DERIVED]
    inputs_within = all(v.verdict != "differs" for v in inputs)
    return [judge_derived(fresh, shipped, v.file, bounds, v, inputs_within)
            if v.verdict == "differs" and v.file in DERIVED else v for v in out]
