"""Stage split: the 600-image sample manifest, and every image condition as .npz.

Conditions: ``orig`` and the primary rotation over the whole sample; each sensitivity-grid
rotation over the reduced sub-split (the first calibration and held-out images of the
sample, in sample order). ``images/<cond>.npz`` holds the uint8 images, ``inputs/<cond>.npz``
the normalised float32 NCHW tensor under the graph input name ``input``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kit.drift.rotate import rotate, to_input
from kit.drift.split import ROLES, Sample, check_disjoint, round_robin_sample
from kit.files import load_npz, write_npz
from kit.runfolder import Run

PRIMARY = "primary"


def condition_name(rotation: dict[str, Any]) -> str:
    """``rot10-bilinear`` for a 10 degree bilinear rotation."""
    return f"rot{rotation['degrees']:g}-{rotation['interpolation']}"


def conditions(protocol: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every image condition with its rotation (None for orig) and which rows it covers."""
    primary = protocol["rotation"]["primary"]
    found: dict[str, dict[str, Any]] = {
        "orig": {"rotation": None, "rows": "all"},
        condition_name(primary): {"rotation": primary, "rows": "all", "primary": True},
    }
    for rotation in protocol["rotation"]["grid"]:
        found.setdefault(condition_name(rotation), {"rotation": rotation, "rows": "reduced"})
    return found


def reduced_positions(sample: Sample, protocol: dict[str, Any]) -> np.ndarray[Any, Any]:
    """Sample positions of the reduced sub-split, ascending."""
    reduced = protocol["sample"]["reduced"]
    return np.sort(np.concatenate([sample.of_role(role, reduced[role]) for role in ROLES]))


def run_split(protocol: dict[str, Any], run: Run) -> dict[str, Any]:
    """Draw the sample, write its manifest and every condition; returns the stage record."""
    fetched = run.record("fetch")
    dataset = load_npz(run.stage("fetch") / "dataset.npz")
    sample = round_robin_sample(dataset["labels"], protocol["sample"]["size"],
                                protocol["seeds"]["sample"])
    check_disjoint(sample)
    out = run.stage("split")
    rows = [{"position": i, "index": int(sample.index[i]), "label": int(sample.label[i]),
             "role": str(sample.role[i])} for i in range(len(sample.index))]
    reduced = reduced_positions(sample, protocol)
    images = dataset["images"][sample.index]
    conds = {}
    for name, cond in conditions(protocol).items():
        positions = np.arange(len(rows)) if cond["rows"] == "all" else reduced
        picked = images[positions]
        if cond["rotation"] is not None:
            picked = rotate(picked, cond["rotation"]["degrees"], cond["rotation"]["interpolation"],
                            protocol["rotation"]["fill"])
        write_npz(out / "images" / f"{name}.npz", {"images": picked})
        write_npz(out / "inputs" / f"{name}.npz",
                  {"input": to_input(picked, fetched["mean"], fetched["std"])})
        conds[name] = {**cond, "positions": positions.tolist()}
    record = {"rows": rows, "conditions": conds, "reduced_positions": reduced.tolist(),
              "overlap": 0, "counts": {role: int((sample.role == role).sum()) for role in ROLES}}
    run.write_record("split", record)
    return record
