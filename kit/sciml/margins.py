"""SciML records judged through their decisions on a replay (``verify --evidence``).

A SciML record holds measured values (violations, floors, metrics), decisions made from
them at a threshold (a probe trial's detection: its metric against the unmutated
subject's at the ratio threshold, or against the permutation threshold; a ledger verdict,
or a PINN subject's: the violation against the tolerance and the floor, MR-A's against an
exact zero) and what is computed from those
(counts, flags, rates, intervals, ratios, a verdict's reason). Under other kernels a
measured value that sits at a threshold may cross it: a scale probe of severity 1.5
multiplies the boundary violation by exactly the ratio threshold 1.5, so its detection is
decided by rounding. A ``unified.json``, ``ledger.json`` or ``pinn.json`` that differs
under the study's
bound (``kit/protocols/tolerances.yaml``) is judged again:

1. each side's summaries are its own trials' and verdicts' (the recount verify applies to
   every load, ``kit.sciml.recompute.SciEvidence``), and each verdict's reason is the one
   its own numbers give;
2. with the decisions and what is computed from them set apart, the two records are within
   the bound;
3. every decision that differs is at its threshold on both sides: values within the bound
   of that side's give either decision (``fires_both_ways``, ``verdicts_reachable``);
4. text that differs says the same words with every number within the bound (a gate
   decision's measured floor, printed in its ``why``).

Then the file is within tolerance, moved only through decisions at their thresholds, and
the verdict says how many moved; otherwise it still differs, at the first path that fails.
A flip away from its threshold, a recount that fails, or a measured value past the bound
is never absorbed.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from kit.errors import KitError
from kit.tolerance import Bound, Verdict, bound_for, compare_json

DECIDED = ("unified.json", "ledger.json", "pinn.json")
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _slack(x: float, bound: Bound) -> float:
    """How far a value may move under the bound (either limit admits it)."""
    return max(bound.atol, bound.rtol * abs(x))


def fires_both_ways(detector: str, probe: float, control: float,
                    limits: dict[str, float], bound: Bound) -> bool:
    """Whether values within the bound of one trial's metric and control give both
    decisions of ``kit.sciml.probes.fires`` (violations are never negative)."""
    p_lo, p_hi = max(probe - _slack(probe, bound), 0.0), probe + _slack(probe, bound)
    if detector == "permutation":
        return p_hi > limits["permutation"] >= p_lo
    c_lo, c_hi = max(control - _slack(control, bound), 0.0), control + _slack(control, bound)
    ratio = limits["ratio"]
    can_fire = c_lo == 0.0 or p_hi > ratio * c_lo
    return can_fire and p_lo <= ratio * c_hi


def verdicts_reachable(row: dict[str, Any], bound: Bound) -> set[str]:
    """The verdicts ``kit.sciml.verdicts.judge`` gives one ledger row when its violation and
    floor move within the bound (the verdict is monotone in both: the corners suffice)."""
    from kit.sciml.verdicts import judge

    v, floor = row["violation"], row["floor"] or 0.0
    if v is None or not math.isfinite(v):
        return {row["verdict"]}
    return {judge(row["card"], row["case"], max(v + dv, 0.0), row["tolerance"],
                  max(floor + df, 0.0), row["domain"]).verdict
            for dv in (-_slack(v, bound), 0.0, _slack(v, bound))
            for df in (-_slack(floor, bound), 0.0, _slack(floor, bound))}


def same_words(a: str, b: str, bound: Bound) -> bool:
    """Two texts that differ only in numbers, each pair within the bound."""
    if NUMBER.split(a) != NUMBER.split(b):
        return False
    pairs = zip(NUMBER.findall(a), NUMBER.findall(b), strict=True)
    return all(bound.admits(float(x), float(y)) for x, y in pairs)


def _unified_apart(record: dict[str, Any]) -> tuple[Any, dict[str, tuple[Any, ...]]]:
    """The record without its decisions and summaries; the trials' detections by path."""
    rest = copy.deepcopy(record)
    for key in ("any_detector", "flag_rates", "labelled"):
        rest.pop(key, None)
    decisions = {}
    for i, entry in enumerate(rest["entries"]):
        entry.pop("detections", None)
        entry.pop("flagged", None)
        for j, trial in enumerate(entry.get("trials") or []):
            for detector, fired in trial.pop("detected").items():
                decisions[f"/entries/{i}/trials/{j}/detected/{detector}"] = (
                    fired, detector, trial["metrics"][detector], trial["control"][detector])
    return rest, decisions


def _ledger_apart(record: dict[str, Any]) -> tuple[Any, dict[str, tuple[Any, ...]]]:
    """The record without its verdicts, ratios, reasons, counts and the gate's printed
    floors; the verdicts and the texts by path."""
    rest = copy.deepcopy(record)
    rest.pop("counts", None)
    decisions: dict[str, tuple[Any, ...]] = {}
    for i, row in enumerate(rest["verdicts"]):
        decisions[f"/verdicts/{i}/verdict"] = (row.pop("verdict"), dict(record["verdicts"][i]))
        row.pop("ratio")
        row.pop("reason")
    for i, row in enumerate(rest["decisions"]):
        for name, condition in row["conditions"].items():
            decisions[f"/decisions/{i}/conditions/{name}/why"] = (condition.pop("why"),)
    return rest, decisions


def _pinn_apart(record: dict[str, Any]) -> tuple[Any, dict[str, tuple[Any, ...]]]:
    """The record without its subjects' verdicts and the counts and intervals of passes
    computed from them; the verdicts by path, each with the row ``verdicts_reachable``
    judges."""
    from kit.sciml.cards import fixed_tolerance

    rest = copy.deepcopy(record)
    for relations in rest["summary"].values():
        for summary in relations.values():
            summary.pop("passes", None)
            summary.pop("wilson95", None)
    tolerances = {"mr_a": (fixed_tolerance("pinn-collocation-permutation"), None),
                  "mr_b": (record["boundary_floor"], None),
                  "mr_c": (record["conservation_tolerance"], record["reference_floor"])}
    decisions: dict[str, tuple[Any, ...]] = {}
    for i, subject in enumerate(rest["subjects"]):
        for relation, verdict in subject.pop("verdicts").items():
            tolerance, floors = tolerances[relation]
            violation = abs(subject["mr_c_ratio"] - 1.0) if relation == "mr_c" \
                else subject[f"{relation}_violation"]
            row = {"card": relation[-1], "case": "", "violation": violation,
                   "tolerance": tolerance, "floor": floors and floors[subject["pde"]],
                   "domain": 0.0, "verdict": verdict}
            decisions[f"/subjects/{i}/verdicts/{relation}"] = (verdict, row)
    return rest, decisions


def _reasons_own(record: dict[str, Any]) -> str:
    """The first verdict whose reason is not the one its own numbers give ('' if none)."""
    from kit.sciml.verdicts import judge

    for i, row in enumerate(record["verdicts"]):
        if row["violation"] is not None and judge(
                row["card"], row["case"], row["violation"], row["tolerance"], row["floor"],
                row["domain"]).reason != row["reason"]:
            return f"/verdicts/{i}/reason"
    return ""


def _decision_moved(kind: str, path: str, shipped: tuple[Any, ...], fresh: tuple[Any, ...],
                    limits: dict[str, float], bound: Bound) -> bool:
    """Whether one moved decision is at its threshold on both sides (text: same words)."""
    if kind == "unified.json":
        return all(fires_both_ways(side[1], side[2], side[3], limits, bound)
                   for side in (shipped, fresh))
    if path.endswith("/why"):
        return same_words(shipped[0], fresh[0], bound)
    return all({shipped[0], fresh[0]} <= verdicts_reachable(side[1], bound)
               for side in (shipped, fresh))


def judge_decided(fresh: Path, shipped: Path, name: str, bound: Bound, found: Verdict
                  ) -> Verdict:
    """A differing ``unified.json`` or ``ledger.json`` judged through its decisions
    (module docstring); ``fresh`` and ``shipped``: the two evidence folders."""
    from kit.sciml.recompute import SciEvidence

    kind = name.split("/")[-1]
    records = {}
    for side, root in (("fresh", fresh), ("shipped", shipped)):
        try:
            records[side] = SciEvidence(root).json(kind)
        except KitError as exc:
            return replace(found, where=f"{found.where}; the {side} record's own recount "
                                        f"fails: {exc}")
        own = _reasons_own(records[side]) if kind == "ledger.json" else ""
        if own:
            return replace(found, where=f"{found.where}; the {side} {own} is not the one "
                                        "its own numbers give")
    apart = {"unified.json": _unified_apart, "ledger.json": _ledger_apart,
             "pinn.json": _pinn_apart}[kind]
    (rest_s, dec_s), (rest_f, dec_f) = apart(records["shipped"]), apart(records["fresh"])
    check = Verdict(name, "within tolerance")
    compare_json(rest_s, rest_f, bound, "", check)
    if check.verdict != "within tolerance":
        return replace(found, where=check.where, detail=check.detail)
    limits = records["shipped"].get("thresholds", {})
    moved = [path for path in dec_s if dec_s[path][0] != dec_f[path][0]]
    for path in moved:
        if not _decision_moved(kind, path, dec_s[path], dec_f[path], limits, bound):
            return replace(found, where=f"{path} (away from its threshold)",
                           detail={"shipped": dec_s[path][0], "fresh": dec_f[path][0]})
    texts = sum(path.endswith("/why") for path in moved)
    return Verdict(name, "within tolerance", found.max_abs, found.max_rel,
                   bound=f"{found.bound}; moved only through {len(moved) - texts} decisions "
                         "at their thresholds (each within the bound of its threshold on both "
                         "sides), what is computed from them (recounted on each side) and "
                         f"{texts} texts whose numbers are within the bound",
                   detail={"moved_first": found.where, "decisions_moved": len(moved) - texts,
                           "texts_moved": texts,
                           "measured_max_abs": check.max_abs,
                           "measured_max_rel": check.max_rel})


def revise(verdicts: list[Verdict], folders: dict[str, tuple[Path, Path]],
           bounds: list[Bound]) -> list[Verdict]:
    """The SciML study's verdicts with every differing ``DECIDED`` record judged through its
    decisions; ``folders``: per file prefix ('' or 'null/'), the fresh and shipped folder."""
    out = []
    for v in verdicts:
        prefix = "null/" if v.file.startswith("null/") else ""
        bound = bound_for(bounds, "sciml", v.file.removeprefix(prefix))
        if v.verdict == "differs" and v.file.removeprefix(prefix) in DECIDED \
                and bound is not None and prefix in folders:
            v = judge_decided(*folders[prefix], v.file, bound, v)
        out.append(v)
    return out
