"""``python -m kit bench --audit DIR``: a finished audit's wall time against its floor.

The floor is the two runtimes' own inference time on the same inputs: the plain model
under the audit's ``from`` cell and under its ``to`` cell, each in one in-process
onnxruntime loop of that release's environment (``kit/runtime/floor.py``: sessions built
once, no validation, no files). The audit does more than that on purpose (the clean pairs'
eight more cells, each in the kit's worker, when some output of the two sides differs in a
bit, and the instrumented copy under every cell when the verdict is beyond clean drift),
so the ratio says what the calibration and the localisation cost over the bare comparison.

What bench reads in the audit's folder (``audit.json``, ``work/``, its model and inputs)
is read through no symbolic link (``runfolder.unlinked``): a link is refused by name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kit import schema
from kit.audit.model import LEVELS, Cell
from kit.errors import KitError
from kit.files import check_npz, read_json
from kit.runfolder import unlinked

AGAIN = "run the audit again into a new --out folder"


def audit_cells(record: dict[str, Any], path: Path) -> list[Cell]:
    """The audit's two sides as cells, each a release the kit locks at one of onnxruntime's
    levels (the schema takes any string: a level is checked here, before anything runs)."""
    from kit.runtime.runtimes import known_releases, levels_offered

    cells = [Cell(**record["sides"][side]) for side in ("from", "to")]
    releases = known_releases()
    for side, cell in zip(("from", "to"), cells, strict=True):
        if cell.level not in LEVELS:
            raise KitError(f"{path}: sides/{side}/level {cell.level[:40]!r} is not a graph "
                           f"optimisation level ({', '.join(LEVELS)}); {AGAIN}")
        if cell.release not in releases:
            raise KitError(f"{path}: sides/{side}/release {cell.release[:40]!r} is not a "
                           f"release the kit locks; {AGAIN}")
        if cell.level not in levels_offered(cell.release):
            raise KitError(f"{path}: sides/{side}: onnxruntime {cell.release} offers no "
                           f"graph optimisation level {cell.level}; {AGAIN}")
    return cells


def feeds(work: Path) -> list[str]:
    """The audit's input files in ``work`` (``inputs.npz``, or one ``inputs-*.npz`` per
    input of a multi-input audit), each refused from its .npy headers (no data read) when
    it is no plain numeric .npz or declares more than the worker's cap (``kit run``'s)."""
    names = ["inputs.npz"] if (work / "inputs.npz").exists() or \
        (work / "inputs.npz").is_symlink() else sorted(p.name for p in work.glob("inputs-*.npz"))
    if not names:
        raise KitError(f"{work}: no inputs.npz or inputs-*.npz, the audit's inputs; {AGAIN}")
    for name in names:
        check_npz(unlinked(work, name, AGAIN), AGAIN)
    return names


def cell_floor(cell: Cell, work: Path, names: list[str]) -> float:
    """The plain model's inference time under ``cell``, in that release's environment:
    each inputs file in one call, as the audit's jobs ran them (``whole``)."""
    from kit.runtime.backends import floor_seconds
    from kit.runtime.runtimes import release_runtime

    jobs = [{"model": "model.onnx", "inputs": feed, "graph_optimization": cell.level,
             "whole": True, "nonfinite": True} for feed in names]
    return floor_seconds(release_runtime(cell.release), jobs, work)


def bench_audit(report: Path, quiet: bool = False) -> dict[str, Any]:
    """The audit's wall time, its floor and their ratio (printed as JSON unless quiet)."""
    from kit.audit.model import load_model

    path = unlinked(report, "audit.json", AGAIN)
    record = read_json(path, AGAIN)
    if isinstance(record, dict) and "wall_s" not in record and "model" in record:
        raise KitError(f"{path}: no finished audit with runtimes (a --screen-only audit "
                       "has no time to compare)")
    schema.check(record, "audit_timing.schema.json", path)  # every field bench reads
    if record["wall_s"] != record["wall_s"]:  # NaN passes every bound of a schema
        raise KitError(f"{path}: wall_s: NaN is not a time; {AGAIN}")
    cells = audit_cells(record, path)
    work = unlinked(report, "work", AGAIN)
    names = feeds(work)
    load_model(unlinked(work, "model.onnx", AGAIN))  # checked before any release runs it
    floor = round(sum(cell_floor(cell, work, names) for cell in cells), 4)
    if floor <= 0:  # a model of no work on inputs of no rows: nothing to divide by
        raise KitError(f"{work}: the floor measured {floor} s (inputs without rows?); "
                       "there is no ratio to give")
    result = {"model": record["model"], "audit_s": record["wall_s"],
              "floor_s": floor, "ratio": round(record["wall_s"] / floor, 1),
              "cells": len(record["cells"]),
              # the plain model on every cell, and the instrumented copy where it localised
              "jobs": (1 if record.get("exposed") is None else 2) * len(record["cells"])}
    if not quiet:
        print(json.dumps(result))
    return result
