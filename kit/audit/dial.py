"""How large a change the audit sees, beside Polygraphy's default (``kit audit --dial``).

On the audited model's own outputs and clean pairs, the ``to`` side is replaced by the
``from`` side plus a change of known size, step by step along a dial, and both judges give
their verdict on each step:

- the audit: its calibrated verdict (``kit.audit.calibrate``) with the clean pairs as
  measured: ``beyond clean drift`` or not;
- Polygraphy: ``SimpleCompareFunc()`` at its defaults (atol 1e-5, rtol 1e-5, elementwise;
  ``kit.drift.polygraphy_check``), one iteration per input: it fails when any input fails.

A step's size is relative to the output's clean scale ``s`` (``output_scale``), so one
dial reads the same on logits of magnitude 10 and on an output of magnitude 1e-6; the
change is added in float64 and cast back to the output's dtype, so a step below its
rounding changes nothing, and the row says how many elements changed. Three shapes of
change (a deterministic sign pattern, no random draw):

- ``every element``: every element of every input moves by ``size x s``, signs alternating;
- ``one element per input``: each input's largest element moves by ``size x s``;
- ``one input``: every element of the first input moves, signs alternating.

The last is where the two judges can differ by design: the audit's verdict needs more than
the matched false-alarm rate (1%) of the inputs to alarm, so with 100 inputs or more a
change on one input is the share clean drift may alarm on, while Polygraphy fails on one
input whatever their number.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kit.audit.calibrate import calibrate, numeric, output_scale, verdict

Array = np.ndarray[Any, Any]
SIZES = (1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1)
KINDS = ("every element", "one element per input", "one input")


def changed(truth: Array, kind: str, size: float, scale: float) -> Array:
    """``truth`` plus the change ``kind`` of ``size x scale`` (module docstring)."""
    base = np.asarray(truth)
    flat = base.reshape(len(base), -1).astype(np.float64)
    signs = np.where(np.arange(flat.shape[1]) % 2 == 0, 1.0, -1.0)
    step = size * scale
    if kind == "every element":
        flat = flat + step * signs
    elif kind == "one element per input":
        rows = np.arange(len(flat))
        flat[rows, np.argmax(np.abs(flat), axis=1)] += step
    elif kind == "one input":
        flat[0] += step * signs
    else:
        raise ValueError(f"unknown change {kind!r}")
    return flat.reshape(base.shape).astype(base.dtype)


def dial(clean: list[tuple[Array, Array]], truth: Array, n_cal: int, alarm: dict[str, Any],
         name: str) -> list[dict[str, Any]]:
    """Every kind and size of change on one output: the elements it changed, the audit's
    verdict and Polygraphy's failing inputs (an output that is not floating point: no
    rows, as the audit compares it exactly)."""
    from kit.drift.polygraphy_check import polygraphy_fails

    base = np.asarray(truth)
    if not numeric(base) or not np.issubdtype(base.dtype, np.floating) or len(base) < 2:
        return []
    scale, rate = output_scale(base), alarm["false_alarm_rate"]
    rows = []
    for kind in KINDS:
        for size in SIZES:
            moved = changed(base, kind, size, scale)
            found, _ = verdict({name: calibrate(clean, (base, moved), n_cal, alarm)}, rate)
            fails = polygraphy_fails(base.astype(np.float32), moved.astype(np.float32), name)
            rows.append({"output": name, "kind": kind, "size": size,
                         "elements_changed": int((moved != base).sum()),
                         "elements": int(base.size), "audit": found,
                         "polygraphy_fails": int(fails.sum()), "inputs": len(base)})
    return rows


def smallest(rows: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Per output and kind, the smallest size each judge flags (None: no step flags)."""
    out: dict[str, dict[str, float | None]] = {}
    for row in rows:
        key = f"{row['output']}: {row['kind']}"
        entry = out.setdefault(key, {"audit": None, "polygraphy": None})
        if row["audit"] == "beyond clean drift" and entry["audit"] is None:
            entry["audit"] = row["size"]
        if row["polygraphy_fails"] and entry["polygraphy"] is None:
            entry["polygraphy"] = row["size"]
    return out


def dial_table(rows: list[dict[str, Any]]) -> Any:
    """The report's section: per output and kind, the smallest step each judge flags, and
    every step."""
    from kit.reporting import PageTable

    first = smallest(rows)
    return PageTable(
        "How large a change each judge sees (--dial)",
        ["output", "change", "size (x the output's clean scale)", "elements changed",
         "audit", "Polygraphy's default fails"],
        [[r["output"], r["kind"], f"{r['size']:g}", f"{r['elements_changed']}/{r['elements']}",
          r["audit"], f"{r['polygraphy_fails']}/{r['inputs']} inputs"] for r in rows],
        note="smallest step flagged, audit / Polygraphy: " + "; ".join(
            f"{key}: {_size(v['audit'])} / {_size(v['polygraphy'])}" for key, v in first.items()))


def _size(value: float | None) -> str:
    return "none" if value is None else f"{value:g}"
