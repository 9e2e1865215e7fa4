"""The rotation grid (Table 4) from the per-case tables: each grid condition's row on the
reduced split, the primary row on the full split and, beside it, the primary rotation on
the reduced split (detection only). The sensitivity stage writes it; the claims recompute
it from the shipped tables."""

from __future__ import annotations

from typing import Any

import numpy as np

from kit.drift import analysis
from kit.drift.analysis import CLEAN, Table
from kit.drift.evidence import table_name

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
                quantile: float, localise: bool = True) -> dict[str, Any]:
    """Every row of the rotation grid (without ``localise``, no row's top-1: a null whose
    tables carry no ranks)."""
    first = record["primary_condition"]
    rows = {"primary": {"condition": first, "split": "full",
                        **grid_row(tables[table_name("cand", first)], quantile, localise)},
            "primary-reduced": {"condition": first, "split": "reduced", **grid_row(
                restrict(tables[table_name("cand", first)], reduced), quantile, False)}}
    for name, described in record["tables"].items():
        if described["cell"] == "cand" and described["reduced"]:
            rows[described["condition"]] = {"condition": described["condition"],
                                            "split": "reduced",
                                            **grid_row(tables[name], quantile, localise)}
    return rows
