"""Stage bootstrap: the 500-replicate fixed-threshold and 5,000-replicate nested
bootstraps over the primary table, the decision rule, and (beyond the paper) nested
localisation with re-estimated normalisers and the matched-FPR comparison.

Writes ``bootstrap/replicates.npz`` (every replicate's rates, float64) and
``bootstrap/summary.json`` (``kit.drift.bootstrap.describe`` of each, in percent, and the rule).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from kit.drift import bootstrap as engine
from kit.drift.evidence import read_table, table_name
from kit.files import canonical_json, load_npz, sha256, write_atomic, write_npz
from kit.runfolder import Run, say

Array = np.ndarray[Any, Any]


def images_of_role(run: Run, role: str) -> Array:
    return np.array([row["position"] for row in run.record("split")["rows"]
                     if row["role"] == role], np.int64)


def summarise(reps: dict[str, Array], alpha: float) -> dict[str, Any]:
    """Percent summaries of every rate and difference, and the decision rule."""
    diffs = engine.differences(reps)
    rates = {key: engine.describe(100 * value) for key, value in reps.items()
             if key.endswith(("/tpr", "/fpr"))}
    return {"rates": rates, "differences": {k: engine.describe(v) for k, v in diffs.items()},
            "decision": engine.holm({b: diffs[f"metamorphic-{b}/tpr"]
                                     for b in engine.DECISION_BASELINES}, alpha)}


def compute(protocol: dict[str, Any], table: dict[str, Array], layers: dict[str, Array],
            models: list[str], cal: Array, held: Array) -> tuple[dict[str, Any],
                                                                  dict[str, Array]]:
    """Both bootstraps; returns (summary, replicate arrays)."""
    boot, quantile = protocol["bootstrap"], protocol["calibration"]["quantile"]
    fpr, seeds = protocol["calibration"]["matched_fpr"], protocol["seeds"]
    summary: dict[str, Any] = {}
    arrays: dict[str, Array] = {}
    for name, replicates, seed, nested in (
            ("fixed", boot["fixed_replicates"], seeds["bootstrap_fixed"], False),
            ("nested", boot["nested_replicates"], seeds["bootstrap_nested"], True)):
        start = time.monotonic()
        reps = engine.detection_replicates(table, cal, held, replicates, seed, nested,
                                           quantile, fpr)
        say(f"bootstrap: {name} detection, {replicates} replicates, "
            f"{time.monotonic() - start:.2f} s")
        start = time.monotonic()
        loc = engine.localisation_replicates(
            table, layers, models, reps["cal_counts"] if nested else None,
            reps["held_counts"], cal, held, quantile)
        say(f"bootstrap: {name} localisation, {time.monotonic() - start:.2f} s")
        kept = {k: v for k, v in reps.items() if not k.endswith("_counts")}
        summary[name] = {**summarise(kept, boot["alpha"]), "replicates": replicates,
                         "seed": seed, "localisation": {
                             k: engine.describe(100 * v) for k, v in loc.items()}}
        arrays.update({f"{name}/{k}": v for k, v in kept.items()})
        arrays.update({f"{name}/localisation/{k}": v for k, v in loc.items()})
    return summary, arrays


def run_bootstrap(protocol: dict[str, Any], run: Run) -> dict[str, Any]:
    """Both bootstraps over the primary table; returns the stage record."""
    record = run.record("score")
    name = table_name("cand", record["primary_condition"])
    table = read_table(run.listed("score", record["tables"][name]["path"],
                                  f"tables.{name}.path"), record["tables"][name])
    layers = load_npz(run.listed("score", record["layers"]["path"], "layers.path"))
    summary, arrays = compute(protocol, table, layers, record["codes"]["models"],
                              images_of_role(run, "calibration"), images_of_role(run, "heldout"))
    out = run.stage("bootstrap")
    write_npz(out / "replicates.npz", arrays)
    write_atomic(out / "summary.json", canonical_json(summary))
    result = {"table": name,
              "replicates": {"path": "bootstrap/replicates.npz",
                             "sha256": sha256(out / "replicates.npz")},
              "summary": {"path": "bootstrap/summary.json",
                          "sha256": sha256(out / "summary.json")}}
    run.write_record("bootstrap", result)
    return result
