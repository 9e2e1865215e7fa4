"""Stage sensitivity: the rotation grid (Table 4) on the reduced 150/150 split.

Each grid condition's table holds only the reduced split, so its thresholds and
localisation normalisers come from its 150 clean calibration images. The primary row is
the primary table (300/300) as in the paper, and beside it the primary rotation on the
reduced split (detection only), so the grid has a like-for-like baseline.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kit.drift.grid import sensitivity
from kit.drift.stages.score import load_tables
from kit.files import canonical_json, sha256, write_atomic
from kit.runfolder import Run

Array = np.ndarray[Any, Any]


def run_sensitivity(protocol: dict[str, Any], run: Run) -> dict[str, Any]:
    record = run.record("score")
    tables = load_tables(run, record)
    reduced = np.asarray(run.record("split")["reduced_positions"])
    rows = sensitivity(record, tables, reduced, protocol["calibration"]["quantile"])
    out = run.stage("sensitivity")
    write_atomic(out / "summary.json", canonical_json(rows))
    result = {"summary": {"path": "sensitivity/summary.json",
                          "sha256": sha256(out / "summary.json")},
              "conditions": sorted(rows)}
    run.write_record("sensitivity", result)
    return result
