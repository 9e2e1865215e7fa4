"""Recount, never read: the drift study's stored bootstrap summaries against the
replicates verify draws again from the shipped primary table with the protocol's seeds.

``bootstrap/summary.json`` carries, per bootstrap (fixed, nested), every rate's and
difference's mean, median, sd, percentiles, extremes and negative share, the Holm decision,
the replicate count and the seed. verify recomputes the claims from the table itself, so a
summary edited alone would move no claim; it would still stand in the evidence as the
study's record. ``bootstrap_problems`` names every stored field that its recount does not
give (numbers within ``RTOL``, a float's last bits across CPUs; words and counts exactly).
The localisation summaries (``localisation``) need the layer sketches' bootstrap (about 2 s
for the fixed one and 17-27 s for the nested one on 2 cores): ``verify --deep`` recounts
them too (``deep``); a run without it leaves their fields out of the check and says so.
"""

from __future__ import annotations

import math
from typing import Any

from kit.drift import bootstrap as engine
from kit.drift.shipped import Evidence
from kit.drift.stages.bootstrap import summarise
from kit.errors import KitError
from kit.files import read_json

RTOL = 1e-9
SUMMARY = "bootstrap/summary.json"


def bootstrap_problems(ev: Evidence, deep: bool = False) -> list[str]:
    """Every field of the stored bootstrap summaries its recount contradicts (with
    ``deep``, the localisation fields too)."""
    path = ev.root / SUMMARY
    if not path.is_file():
        return []
    stored = read_json(path, "restore it from git")
    if not isinstance(stored, dict):
        return [f"{path}: not a JSON object; restore it from git"]
    problems: list[str] = []
    for which, expected in recounted(ev, deep).items():
        found = stored.get(which)
        if not isinstance(found, dict):
            problems.append(f"{path}: /{which} is missing; restore it from git")
            continue
        problems += [f"{path}: {p}" for p in _differ(found, expected, f"/{which}")]
    return problems


def recounted(ev: Evidence, deep: bool = False) -> dict[str, dict[str, Any]]:
    """Per bootstrap, the summary fields its replicates give (``localisation`` only with
    ``deep``: the layer sketches' bootstrap over the same draws, as the stage ran it)."""
    boot, seeds = ev.protocol["bootstrap"], ev.protocol["seeds"]
    found = {}
    for which, nested in (("fixed", False), ("nested", True)):
        reps = ev.bootstrap(which)
        kept = {k: v for k, v in reps.items()
                if not k.endswith("_counts") and "metamorphic-" not in k}
        found[which] = {
            **summarise(kept, boot["alpha"]),
            "replicates": boot["nested_replicates" if nested else "fixed_replicates"],
            "seed": seeds["bootstrap_nested" if nested else "bootstrap_fixed"]}
        if deep:
            loc = engine.localisation_replicates(
                ev.table(), ev.layers, ev.models, reps["cal_counts"] if nested else None,
                reps["held_counts"], ev.images("calibration"), ev.images("heldout"),
                ev.quantile)
            found[which]["localisation"] = {k: engine.describe(100 * v)
                                            for k, v in loc.items()}
    return found


def _differ(found: Any, expected: Any, where: str) -> list[str]:
    """Where ``found`` (stored) says other than ``expected`` (recounted)."""
    if isinstance(expected, dict):
        if not isinstance(found, dict):
            return [f"{where} is not an object; its replicates give one"]
        return [p for key in sorted(expected)
                for p in _differ(found.get(key), expected[key], f"{where}/{key}")]
    same = found == expected
    if isinstance(expected, float) and isinstance(found, (int, float)) \
            and not isinstance(found, bool):
        same = math.isclose(found, expected, rel_tol=RTOL, abs_tol=1e-12) or (
            math.isnan(found) and math.isnan(expected))
    return [] if same else [f"{where} says {found!r}, its replicates give {expected!r}"]


def check(ev: Evidence, deep: bool = False) -> list[str]:
    """``bootstrap_problems`` and the other records' recounts
    (``kit.drift.recount_records``), or the one error that stopped them."""
    from kit.drift import recount_records

    try:
        return bootstrap_problems(ev, deep) + recount_records.problems(ev)
    except KitError as exc:
        return [str(exc)]
