"""Recount, never read: the drift evidence's stored records besides the bootstrap summaries
(``kit.drift.recount``), each against what verify computes from the per-case records it
ships. Every field that disagrees is a failed check naming the file and the field.

- ``score/summary.json``: the score stage's whole summary (rates, thresholds, AUCs, the
  per-model and per-fault-cell counts, localisation, geometry, accuracy, factor
  isolation), recomputed from the shipped case tables, layer sketches and clean logits
  (``kit.drift.analysis.score_summary``, as a replay's ``kit.drift.ties`` does). A-081,
  A-124 and A-125 read it; the report prints Tables 1-4 from it.
- ``sensitivity/summary.json``: the rotation grid's rows (``Evidence.sensitivity``, which
  the grid claims compute).
- ``split/split.json``: the reduced sub-split (the first ``sample.reduced`` positions of
  each role, ascending), each condition's positions, the role counts and the overlap,
  against its rows.
- ``score/score.json``: the labels against the split's rows.
- ``fault/fault.json``: the fault count against its faults.
- ``replay.json``: its verdict against its own lists (the replay's run folder is not
  shipped): identical exactly when nothing differs, the count against the list (which
  keeps the first 50), the machines the same exactly when no field of theirs differs; the
  number of files compared against the shipped ``run-manifest.json`` it names (whose
  sha256 verify checks), which the replay compared file by file.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kit.drift.shipped import Evidence
from kit.values import contradictions

ROLES = ("calibration", "heldout")
SOURCE = "the per-case records"
KEPT = 50  # the differing files replay.json lists (kit.drift.replay.compare_runs)


def problems(ev: Evidence) -> list[str]:
    """Every stored field of the records above that its recount contradicts."""
    from kit.drift.ties import score_summary_of

    found = []
    for name, recount in (("score/summary.json", score_summary_of),
                          ("sensitivity/summary.json", lambda e: e.sensitivity),
                          ("split/split.json", split), ("score/score.json", labels),
                          ("fault/fault.json", faults), ("replay.json", replay)):
        path = ev.root / name
        if not path.is_file():
            continue
        stored = ev.json(name)
        if not isinstance(stored, dict):
            continue  # named by the check of every shipped record's type
        try:
            expected = recount(ev)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            found.append(f"{path}: cannot be recounted from {SOURCE} ({type(exc).__name__}: "
                         f"{exc}); restore the evidence from git")
            continue
        found += [f"{path}: {p}" for p in contradictions(stored, expected, "", SOURCE)]
    return found


def split(ev: Evidence) -> dict[str, Any]:
    """The split's derived fields from its rows and the protocol's reduced sizes."""
    record = ev.json("split/split.json")
    roles = np.array([r["role"] for r in record["rows"]])
    reduced = ev.protocol["sample"]["reduced"]
    positions = np.sort(np.concatenate([np.flatnonzero(roles == role)[:reduced[role]]
                                        for role in ROLES])).tolist()
    every = list(range(len(roles)))
    indices = {role: {r["index"] for r in record["rows"] if r["role"] == role}
               for role in ROLES}
    return {"reduced_positions": positions,
            "counts": {role: int((roles == role).sum()) for role in ROLES},
            "overlap": len(indices["calibration"] & indices["heldout"]),
            "conditions": {name: {"positions": every if cond["rows"] == "all" else positions}
                           for name, cond in record["conditions"].items()}}


def labels(ev: Evidence) -> dict[str, Any]:
    return {"labels": [r["label"] for r in ev.json("split/split.json")["rows"]]}


def faults(ev: Evidence) -> dict[str, Any]:
    return {"count": len(ev.json("fault/fault.json")["faults"])}


def replay(ev: Evidence) -> dict[str, Any]:
    record = ev.json("replay.json")
    differing = record.get("differing", [])
    want: dict[str, Any] = {"identical": not differing, "machines": {
        "same": not record.get("machines", {}).get("differing")},
        "compared": len(ev.json("run-manifest.json")["files"])}
    if len(differing) < KEPT:  # a full list may hold the first of more
        want["differing_count"] = len(differing)
    return want
