"""``python -m kit bench --audit DIR``: a finished audit's wall time against its floor.

The floor is the two runtimes' own inference time on the same inputs: the plain model
under the audit's ``from`` cell and under its ``to`` cell, each in one in-process
onnxruntime loop of that release's environment (``kit/runtime/floor.py``: sessions built
once, no validation, no files). The audit does more than that on purpose (the clean pairs'
eight more cells, each in the kit's worker, when some output of the two sides differs in a
bit, and the instrumented copy under every cell when the verdict is beyond clean drift),
so the ratio says what the calibration and the localisation cost over the bare comparison.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kit import schema
from kit.audit.model import Cell
from kit.errors import KitError
from kit.files import read_json


def cell_floor(cell: Cell, work: Path, rows: int) -> float:
    """The plain model's inference time under ``cell``, in that release's environment."""
    from kit.runtime.backends import floor_seconds
    from kit.runtime.runtimes import release_runtime

    feeds = ["inputs.npz"] if (work / "inputs.npz").is_file() else \
        sorted(p.name for p in work.glob("inputs-*.npz"))
    jobs = [{"model": "model.onnx", "inputs": feed, "graph_optimization": cell.level,
             "batch_size": rows} for feed in feeds]
    return floor_seconds(release_runtime(cell.release), jobs, work)


def bench_audit(report: Path, quiet: bool = False) -> dict[str, Any]:
    """The audit's wall time, its floor and their ratio (printed as JSON unless quiet)."""
    from kit.audit.model import fixed_batch, load_model

    path = report / "audit.json"
    record = read_json(path, "run the audit again into a new --out folder")
    if isinstance(record, dict) and "wall_s" not in record and "model" in record:
        raise KitError(f"{path}: no finished audit with runtimes (a --screen-only audit "
                       "has no time to compare)")
    schema.check(record, "audit_timing.schema.json", path)  # every field bench reads
    work = report / "work"
    rows = fixed_batch(load_model(work / "model.onnx")) or 64
    floor = round(sum(cell_floor(Cell(**record["sides"][side]), work, rows)
                      for side in ("from", "to")), 4)
    result = {"model": record["model"], "audit_s": record["wall_s"],
              "floor_s": floor, "ratio": round(record["wall_s"] / floor, 1),
              "cells": len(record["cells"]),
              # the plain model on every cell, and the instrumented copy where it localised
              "jobs": (1 if record.get("exposed") is None else 2) * len(record["cells"])}
    if not quiet:
        print(json.dumps(result))
    return result
