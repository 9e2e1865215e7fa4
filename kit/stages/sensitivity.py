"""Stage sensitivity: the rotation grid (Table 4) on the reduced 150/150 split.

Each grid condition's table holds only the reduced split, so its thresholds and
localisation normalisers come from its 150 clean calibration images. The primary row is
the primary table (300/300) as in the paper, and beside it the primary rotation on the
reduced split (detection only), so the grid has a like-for-like baseline.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kit import analysis
from kit.analysis import CLEAN, Table
from kit.stages.common import Run
from kit.stages.score import load_tables, table_name
from kit.worker import canonical_json, sha256_file, write_atomic

Array = np.ndarray[Any, Any]


def restrict(table: Table, samples: Array) -> Table:
    keep = np.isin(table["sample"], samples)
    return {name: column[keep] for name, column in table.items()}


def grid_row(table: Table, quantile: float, localise: bool = True) -> dict[str, Any]:
    """Metamorphic and direct TPR, their difference, FPRs, top-1 and stability."""
    found = {d: analysis.detection(table, d, analysis.thresholds(table, d, quantile))
             for d in ("metamorphic", "direct")}
    clean = table["fault"] == CLEAN
    row: dict[str, Any] = {
        "metamorphic": found["metamorphic"], "direct": found["direct"],
        "difference_pts": 100 * (found["metamorphic"]["tpr"]["rate"]
                                 - found["direct"]["tpr"]["rate"]),
        "reference_stability": analysis.rate(table["stable"][clean])}
    if localise:
        loc = analysis.localisation(table, [])
        row["top1"] = {k: loc[k]["top1"] for k in ("metamorphic", "direct", "maximum")}
    return row


def sensitivity(record: dict[str, Any], tables: dict[str, Table], reduced: Array,
                quantile: float) -> dict[str, Any]:
    """Every row of the rotation grid."""
    first = record["primary_condition"]
    rows = {"primary": {"condition": first, "split": "full",
                        **grid_row(tables[table_name("cand", first)], quantile)},
            "primary-reduced": {"condition": first, "split": "reduced", **grid_row(
                restrict(tables[table_name("cand", first)], reduced), quantile, False)}}
    for name, described in record["tables"].items():
        if described["cell"] == "cand" and described["reduced"]:
            rows[described["condition"]] = {"condition": described["condition"],
                                            "split": "reduced",
                                            **grid_row(tables[name], quantile)}
    return rows


def run_sensitivity(protocol: dict[str, Any], run: Run) -> dict[str, Any]:
    record = run.record("score")
    tables = load_tables(run, record)
    reduced = np.asarray(run.record("split")["reduced_positions"])
    rows = sensitivity(record, tables, reduced, protocol["calibration"]["quantile"])
    out = run.stage("sensitivity")
    write_atomic(out / "summary.json", canonical_json(rows))
    result = {"summary": {"path": "sensitivity/summary.json",
                          "sha256": sha256_file(out / "summary.json")},
              "conditions": sorted(rows)}
    run.write_record("sensitivity", result)
    return result
