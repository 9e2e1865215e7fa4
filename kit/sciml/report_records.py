"""The records the SciML report reads (``kit.sciml.report``), each validated before use:
read as JSON (``kit.files``), then held to the schema of the fields the report reads
(``kit/schemas``: the verdict ledger's own schema, ``sciml_*.schema.json`` for the
others), so that a record that is ``[]``, ``{}``, ``null``, ``NaN`` or lacks a field is
one ``FILE: FIELD: WHAT`` error, never a KeyError or TypeError from a table. A record that
is a symbolic link is refused by name (``runfolder.unlinked``): no link is followed out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kit import schema
from kit.errors import FileFormatError, KitError
from kit.files import read_json
from kit.runfolder import unlinked

# Each record the report reads, and its schema.
SCHEMAS = {"ledger.json": "verdict_ledger.schema.json",
           "operator_floor.json": "sciml_operator_floor.schema.json",
           "unified.json": "sciml_unified.schema.json",
           "mgn_faults.json": "sciml_mgn_faults.schema.json",
           "second_task.json": "sciml_second_task.schema.json"}
# The MeshGraphNet sweeps the report tables, and the name of each one's level.
SWEEPS = {"scale_sweep": "double-scale factor", "fraction_sweep": "zero-v_y fraction"}
RUN_AGAIN = "the SciML report reads the records of a finished run (python -m kit sciml)"


def read_records(evidence: Path) -> dict[str, Any]:
    """Every record of ``SCHEMAS`` in ``evidence``, each checked against its schema; the
    ledger must hold verdicts, and each sweep level a rate of every detector."""
    found = {}
    for name, record_schema in SCHEMAS.items():
        path = unlinked(evidence, name, RUN_AGAIN)
        if not path.is_file():
            raise KitError(f"{path}: missing; {RUN_AGAIN}")
        found[name] = read_json(path)
        schema.check(found[name], record_schema, path, FileFormatError)
    if not found["ledger.json"]["verdicts"]:
        raise FileFormatError(f"{evidence / 'ledger.json'}: no verdicts")
    check_sweeps(found["mgn_faults.json"], evidence / "mgn_faults.json")
    return found


def check_sweeps(faults: dict[str, Any], path: Path) -> None:
    """Each level of each sweep holds a rate of every detector (the thresholds' keys) and
    of any detector: what a schema cannot say, since the detectors are the record's own."""
    wanted = {*faults["thresholds"], "any"}
    for sweep in SWEEPS:
        for level, rates in faults[sweep].items():
            lacking = sorted(wanted - set(rates))
            if lacking:
                raise FileFormatError(f"{path}: {sweep}/{level}: no rate of "
                                      f"{', '.join(lacking)} (the detectors are the "
                                      "thresholds' keys, and any)")
