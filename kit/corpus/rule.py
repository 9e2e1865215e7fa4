"""The corpus protocol's frozen arithmetic (``kit/protocols/corpus.yaml``, reproduction and
hypotheses), on plain numbers: the pipeline decides with it and verify recomputes with it
from the shipped outputs, so both read one definition.

    s = max(1, max |reference|)        t = 1e-4 * s
    d(r, level) = max |output(r, level) - reference|
    e = max over the declared fixed releases of d at the case's level
    r deviates at a level  <=>  d(r, level) > max(t, 100 e)
    reproduced  <=>  every declared affected release deviates at the case's level
                     and every declared fixed release has d <= t (of the releases run:
                     at least one of each; a release that did not load has no d and
                     fails its side)

The deviation has two versions (``kit/protocols/corpus.revisions.yaml``). Version 1 is the
rule as first committed (protocol 4ff34ba, code 927619b, before any corpus evidence):
d = max |output - reference|, inf where that difference is not finite anywhere, so a NaN
on both sides (or the same infinity) counts as inf. Version 2 (02e59e2, committed with
five new cases and their evidence) counts a NaN on both sides, or the same infinity, as
agreement. The hypotheses are decided under version 1 (``FROZEN``); the pipeline records,
and the describing claims show, version 2 (``REVISED``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kit.errors import KitError

Array = np.ndarray[Any, Any]
RELATIVE_TOLERANCE = 1e-4
ENVELOPE_FACTOR = 100.0
PAPER_REPRODUCED, PAPER_LISTED = 10, 14
FROZEN, REVISED = 1, 2  # the deviation rule as first committed, and as revised in 02e59e2
RULE_VERSIONS = (FROZEN, REVISED)
# The records the pipeline writes its decisions into and verify recounts them from
CASES_JSON, CRASHES_JSON = "corpus/cases.json", "corpus/crashes.json"


def scale(reference: dict[str, Array]) -> float:
    """s = max(1, max |reference|) over every output."""
    peak = max((float(np.max(np.abs(v))) for v in reference.values() if v.size), default=0.0)
    return max(1.0, peak)


def deviation(output: dict[str, Array], reference: dict[str, Array], shown: str,
              rule_version: int = REVISED) -> float:
    """d = max |output - reference| over every output element: inf where a shape differs
    or a value is not finite where the reference's differs (a NaN where the reference has a
    number, or a number where it has NaN); a NaN or infinity equal to the reference's
    counts as agreement. Under ``rule_version`` 1 (the rule as first committed) every
    element whose difference is not finite counts as inf, a NaN on both sides included."""
    if rule_version not in RULE_VERSIONS:
        raise KitError(f"{shown}: unknown corpus rule version {rule_version!r}")
    worst = 0.0
    for name, want in reference.items():
        if name not in output:
            raise KitError(f"{shown}: no output {name!r}")
        got, want = np.asarray(output[name], np.float64), np.asarray(want, np.float64)
        if got.shape != want.shape:
            return math.inf
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        if rule_version == FROZEN:
            same = np.zeros_like(same)
        with np.errstate(invalid="ignore"):  # inf - inf where both agree: masked by same
            diff = np.where(same, 0.0, np.abs(got - want))
        if not np.all(np.isfinite(diff)):
            return math.inf
        if diff.size:
            worst = max(worst, float(diff.max()))
    return worst


def decide(case: dict[str, Any], deviations: dict[str, dict[str, float | None]],
           s: float) -> dict[str, Any]:
    """Apply the rule to one case. ``deviations[release][level]`` is d, or None where the
    release did not load or run the model (its error is recorded beside)."""
    tolerance = RELATIVE_TOLERANCE * s
    level = case["level"]

    def at(release: str, lvl: str = level) -> float | None:
        return deviations.get(release, {}).get(lvl)

    affected = [r for r in case["affected"] if r in deviations]  # of the releases run
    fixed = [at(r) for r in case["fixed"] if r in deviations]
    envelope = max((d for d in fixed if d is not None), default=math.nan)
    limit = max(tolerance, ENVELOPE_FACTOR * envelope) if not math.isnan(envelope) else math.nan

    def deviates(d: float | None) -> bool:
        return d is not None and not math.isnan(limit) and d > limit

    affected_ok = bool(affected) and all(deviates(at(r)) for r in affected)
    fixed_ok = bool(fixed) and all(d is not None and d <= tolerance for d in fixed)
    observed = {lvl: sorted((r for r in deviations if deviates(at(r, lvl))), key=release_key)
                for lvl in ("disable_all", "enable_all")}
    return {"scale": s, "tolerance": tolerance, "envelope": envelope, "limit": limit,
            "reproduced": affected_ok and fixed_ok,
            "affected_deviate": affected_ok, "fixed_match": fixed_ok,
            "observed_affected": observed,
            "at_disable_all": bool(affected) and all(deviates(at(r, "disable_all"))
                                                     for r in affected)}


def release_key(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


def range_mismatch(case: dict[str, Any], decision: dict[str, Any],
                   loaded: list[str]) -> dict[str, list[str]]:
    """K2: releases that deviate at the case's level but are not declared affected (extra),
    and declared affected releases that do not (missing), among the releases that loaded."""
    seen = set(decision["observed_affected"][case["level"]])
    declared = set(case["affected"]) & set(loaded)
    return {"extra": sorted(seen - declared, key=release_key),
            "missing": sorted(declared - seen, key=release_key)}
