"""Evidence tables: the raw per-case score tables that every claim is recomputed from.

A table is a deterministic .npz of equal-length 1-D columns (``kit.runtime.worker.write_npz``).
Its description (columns, dtypes, row count, sha256, the meaning of every code) sits in
the score record and is validated against ``kit/schemas/score.schema.json``. Reading a
table checks every column named by the description and refuses anything else.

Codes: ``model`` indexes ``codes.models``; ``fault`` indexes the fault list (-1: clean);
``position``/``family``/``level`` index ``codes.positions``/``families``/``levels``
(-1: clean); ``role`` 0 calibration, 1 held-out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from kit.errors import KitError
from kit.files import load_npz, sha256, write_npz

Array = np.ndarray[Any, Any]

CASE_COLUMNS: dict[str, str] = {
    "model": "int8", "fault": "int16", "position": "int8", "family": "int8", "level": "int8",
    "layer": "int16", "sample": "int16", "image": "int32", "role": "int8", "label": "int16",
    "e_o_norm": "float64", "e_t_norm": "float64", "metamorphic": "float64",
    "mixed": "float64", "maximum": "float64", "cosine": "float64", "ratio": "float64",
    "ref_top1_o": "int16", "ref_top1_t": "int16", "cand_top1_o": "int16", "stable": "bool",
    "rank_direct": "int16", "rank_metamorphic": "int16", "rank_maximum": "int16",
}
ROLE_CODES = {"calibration": 0, "heldout": 1}
# A fault's position among the model's convolutions, coded in the case tables by its index
# here (the protocol's faults.layers maps each to a layer).
POSITIONS = ("early", "middle", "late")


def describe(path: Path, root: Path, columns: dict[str, Array]) -> dict[str, Any]:
    """The description of a written table, for the score record."""
    lengths = {len(v) for v in columns.values()}
    return {"path": path.relative_to(root).as_posix(), "rows": lengths.pop(),
            "columns": {name: str(v.dtype) for name, v in sorted(columns.items())},
            "sha256": sha256(path)}


def write_table(path: Path, columns: dict[str, Array], spec: dict[str, str]) -> None:
    """Check the columns against ``spec`` and write them."""
    if set(columns) != set(spec):
        raise KitError(f"{path}: columns {sorted(set(columns) ^ set(spec))} differ from the spec")
    lengths = {len(v) for v in columns.values()}
    if len(lengths) != 1:
        raise KitError(f"{path}: columns of different lengths {sorted(lengths)}")
    for name, dtype in spec.items():
        if columns[name].dtype != np.dtype(dtype) or columns[name].ndim != 1:
            raise KitError(f"{path}: column {name} is {columns[name].dtype}, "
                           f"{columns[name].ndim}-D; the spec says 1-D {dtype}")
    write_npz(path, columns)


def read_table(path: Path, description: dict[str, Any]) -> dict[str, Array]:
    """Read a table and check it against its description (names, dtypes, rows, sha256)."""
    if not path.is_file():
        raise KitError(f"{path}: evidence table missing")
    if sha256(path) != description["sha256"]:
        raise KitError(f"{path}: sha256 differs from its description in the score record")
    columns = load_npz(path)
    if set(columns) != set(description["columns"]):
        raise KitError(f"{path}: columns {sorted(set(columns) ^ set(description['columns']))} "
                       "differ from the description")
    for name, dtype in description["columns"].items():
        if str(columns[name].dtype) != dtype or len(columns[name]) != description["rows"]:
            raise KitError(f"{path}: column {name} is not {description['rows']} x {dtype}")
    return columns


def table_name(cell: str, cond: str) -> str:
    """The name of one runtime cell's table under one image condition."""
    return f"{cell}-{cond}"
