"""Whether a comparison of two detectors exceeds what their unmutated controls give.

The drift study's control null (``kit.drift.shipped.ControlNull``) scores every fault case
as its unmutated control, so a comparison of two detectors' detection rates becomes, on the
null, a comparison of their false alarms. Both detectors are thresholded at the same
calibration quantile, so those false alarms are equal in expectation, and which detector
raises more of them on a given CPU is decided by a handful of controls (7 against 1 of 900
on the evidence machine, 12 against 14 on another CPU). The plain rule passes on such a
null about half the time whatever the faults do. A comparison of two localisation scorings
(the true layer's rank under direct, metamorphic or maximum scoring) becomes, on the null,
where the layer falls among the control's clean drift, which no scoring knows either.

A comparison the null passes too is therefore asked one question more: does the finding
exceed the null? On every held-out image of every model, the first detector's measure on
the faults minus the second's (alarms; or top-1 hits, top-3 hits or reciprocal ranks of
the faulted layer), less the same difference on the image's control, is summed over the
image's fault cases; the finding exceeds the null when more images lean the rule's way
than the other way, by an exact one-sided sign test at ``ALPHA`` over the images where the
difference is not zero (images, not fault cases: one control stands behind every fault
case of its image). A finding that does not exceed its null is ``by design``. Rows that do
not compare two detectors on the same cases (two models, a range, every model) are decided
by the plain rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from kit.drift import analysis
from kit.drift.detectors import DETECTORS
from kit.drift.localise import TOP_K
from kit.drift.shipped import Evidence

ALPHA = 0.05
TIE = 1e-9  # a per-image sum of reciprocal ranks this near zero is a tie
COMPARED = ("drift.rate", "drift.cell_rate", "drift.geometry", "drift.grid",
            "drift.localisation")
# What a localisation comparison counts per fault case, in words.
STATS = {"top1": "top-1 hits", "top3": "top-3 hits", "mrr": "reciprocal ranks"}
# A fault cell's coordinates: the case table's column and the record's list of its codes.
CELL = (("position", "positions"), ("family", "families"), ("level", "levels"))
# The bootstrap statistics of a rate difference whose sign says which detector is above:
# the whole interval, its centre, or the end on the far side of zero.
BOOT = {"positive": ("interval", "mean", "p50", "p2_5"),
        "negative": ("interval", "mean", "p50", "p97_5")}


@dataclass(frozen=True)
class Pair:
    """The rule's direction as 'first detector above second', and the fault cases it is
    counted on: one model's, one fault cell's (pooled over models), one subgroup's, or
    those of one rotated condition of the grid (its own table); ``stat``: the localisation
    measure the two scorings are compared on (None: detection rates)."""
    first: str
    second: str
    model: str | None = None
    cell: tuple[str, str, str] | None = None
    group: str | None = None
    condition: str | None = None
    stat: str | None = None


def pair(rule: dict[str, Any], compute: dict[str, Any]) -> Pair | None:
    """The pair of detectors a rule compares on detection rates or localisation, or None
    when it compares anything else (then the plain rule decides the null)."""
    fn, args = compute["function"], dict(compute.get("args", {}))
    if rule["rule"] == "sign" and rule["sign"] in ("positive", "negative"):
        high = rule["sign"] == "positive"
        if fn == "drift.rate_difference" and args.get("what", "tpr") == "tpr":
            a, b = args["a"], args["b"]
            return Pair(*((a, b) if high else (b, a)), model=args.get("model"))
        if fn == "drift.boot" and args.get("stat") in BOOT[rule["sign"]] \
                and str(args.get("quantity", "")).endswith("/tpr"):
            a, _, b = args["quantity"].removesuffix("/tpr").partition("-")
            return Pair(*((a, b) if high else (b, a))) if b else None
        if fn == "drift.localisation_difference" and args.get("stat", "top1") in STATS:
            a, b = args["a"], args["b"]
            return Pair(*((a, b) if high else (b, a)), stat=args.get("stat", "top1"))
        if fn == "drift.grid" and args.get("field") == "difference":  # metamorphic - direct
            where = _condition(args)
            a, b = "metamorphic", "direct"
            return Pair(*((a, b) if high else (b, a)), condition=where) if where else None
        return None
    if rule["rule"] != "compare" or rule["op"] not in ("gt", "lt"):
        return None
    than = rule["than"]
    if fn not in COMPARED or than["function"] != fn:
        return None
    here, there = _detector(fn, args), _detector(fn, dict(than.get("args", {})))
    if here is None or there is None or here[1] != there[1]:
        return None  # not the same cases, or not one detector each
    first, second = (here[0], there[0]) if rule["op"] == "gt" else (there[0], here[0])
    return Pair(first, second, **here[1])


def _condition(args: dict[str, Any]) -> str | None:
    """The grid row a ``drift.grid`` call reads, where it is one table's whole: ``primary``
    or a rotated condition (not the primary rotation restricted to the reduced split)."""
    where = args.get("condition")
    return None if where in (None, "primary-reduced") else str(where)


def _detector(fn: str, args: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(detector or scoring, the cases) of one detection-rate or localisation call; None
    for anything else."""
    if fn == "drift.localisation":
        if args.get("stat") not in STATS or set(args) - {"kind", "stat", "model"}:
            return None
        return str(args.get("kind")), {"model": args.get("model"), "stat": args["stat"]}
    if fn == "drift.grid":
        first, _, second = str(args.get("field", "")).partition("/")
        where = _condition(args)
        if where is None:
            return None
        if first == "top1" and second in DETECTORS:
            return second, {"condition": where, "stat": "top1"}
        return (first, {"condition": where}) if second == "tpr" and first in DETECTORS \
            else None
    if fn == "drift.geometry":
        group, _, detector = str(args.get("field", "")).partition("/")
        if group not in ("stable", "unstable") or detector not in DETECTORS:
            return None
        return detector, {"group": group}
    if args.pop("what", "tpr") != "tpr":
        return None
    args.pop("count", None)
    detector = args.pop("detector", None)
    if fn == "drift.rate" and set(args) <= {"model"}:
        return detector, {"model": args.get("model")}
    if fn == "drift.cell_rate" and set(args) == {"position", "family", "level"}:
        return detector, {"cell": (args["position"], args["family"], args["level"])}
    return None


def exceeds(found: Pair, evidence: Evidence, null: Evidence) -> tuple[bool, str]:
    """(the finding exceeds its control null, the sign test in words)."""
    cond = None if found.condition in (None, "primary") else found.condition
    table, controls = evidence.table("cand", cond), null.table("cand", cond)
    rows = _cases(found, table, evidence)
    lean = np.zeros(len(table["model"]))
    for sign, detector in ((1, found.first), (-1, found.second)):
        lean += sign * (_measure(found, table, detector, table, evidence.quantile)
                        - _measure(found, controls, detector, table, evidence.quantile))
    image = table["model"][rows].astype(np.int64) * (1 << 32) + table["image"][rows]
    keys, at = np.unique(image, return_inverse=True)
    per_image = np.bincount(at, weights=lean[rows], minlength=len(keys))
    up, down = int((per_image > TIE).sum()), int((per_image < -TIE).sum())
    p = upper_tail(up, up + down)
    what = "" if found.stat is None else f" on {STATS[found.stat]}"
    words = (f"on {up} of {len(keys)} held-out images the faults lift {found.first} above "
             f"{found.second}{what} more than the image's control does, on {down} less "
             f"(exact sign test, one-sided p = {p:.2g})")
    return p < ALPHA, words


def _measure(found: Pair, table: dict[str, Any], detector: str, calibration: dict[str, Any],
             quantile: float) -> Any:
    """Per case: the detector's alarm (thresholded on ``calibration``'s clean rows), or the
    faulted layer's top-1 hit, top-3 hit or reciprocal rank under that scoring."""
    if found.stat is None:
        limits = analysis.thresholds(calibration, detector, quantile)
        return analysis.case_alarms(table, detector, limits).astype(np.float64)
    ranks = table[f"rank_{detector}"].astype(np.float64)
    if found.stat == "mrr":
        return np.divide(1.0, ranks, out=np.zeros_like(ranks), where=ranks > 0)
    return ((ranks >= 1) & (ranks <= (1 if found.stat == "top1" else TOP_K))).astype(np.float64)


def upper_tail(k: int, n: int) -> float:
    """P(X >= k) for X ~ Binomial(n, 1/2): the one-sided exact sign test's p-value (scipy's
    ``binomtest(k, n, alternative="greater")``), in exact integers: importing scipy.stats
    alone would cost ``verify --claim`` more than two seconds."""
    return sum(math.comb(n, i) for i in range(k, n + 1)) / 2 ** n if n else 1.0


def _cases(found: Pair, table: dict[str, Any], evidence: Evidence) -> Any:
    """The held-out fault cases the pair's rates are counted on."""
    rows = (table["role"] == analysis.HELDOUT) & (table["fault"] != analysis.CLEAN)
    codes = evidence.record["codes"]
    if found.model is not None:
        rows &= table["model"] == codes["models"].index(found.model)
    if found.cell is not None:
        for (column, listed), value in zip(CELL, found.cell, strict=True):
            rows &= table[column] == codes[listed].index(value)
    if found.group is not None:
        rows &= table["stable"] if found.group == "stable" else ~table["stable"]
    return rows
