"""The audit's calibrated verdict, from outputs already computed (``kit/protocols/audit.yaml``).

A score per input compares two cells' outputs: the largest difference at the output's own
clean scale, ``max |a - b| / s`` over the input's elements, where ``s`` is the median over
the inputs of the ``from`` side's largest magnitude (``output_scale``; 1 for an output
that is zero everywhere), so an output of order 1e-6 is judged at its scale, not at 1.
A NaN or an infinity on one side only is infinitely far; an integer, boolean or string
output is compared exactly (0 or infinitely far). For a score vector (inputs, classes)
the argmax flips decide too: the audited pair is beyond clean drift when its flips exceed
the matched false-alarm rate and the clean pairs' median flip share. The clean pairs (each
side against the same release at its other levels and at two threads) calibrate on the
first half of the inputs: per output, ``tau = max(margin x the median over the pairs of
each pair's largest score, floor)``; the median, so that a level pair inside a release
that a level-dependent defect touches (a fusion) does not widen the envelope. The held-out
half checks the matched false-alarm rate (the median over the pairs of their alarm share
there at most ``false_alarm_rate``, else ``cannot calibrate``); a pair that alarms there is
named as unstable. The audited pair is beyond clean drift when its alarm share over every
input exceeds ``false_alarm_rate`` on any output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kit.tolerance import largest_relative

Array = np.ndarray[Any, Any]
Outputs = dict[str, Array]  # output name -> (inputs, ...) array


def reshaped(a: Array, b: Array) -> str:
    """Empty when the two sides' arrays have one shape and dtype; else both, in words (an
    output or tensor whose shape or dtype a release changed: a finding, never a crash)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape == b.shape and a.dtype == b.dtype:
        return ""
    return f"{a.dtype}{list(a.shape)} against {b.dtype}{list(b.shape)}"


def numeric(a: Array) -> bool:
    return np.asarray(a).dtype.kind in "fc"


def text(a: Array) -> bool:
    return np.asarray(a).dtype.kind in "USO"


def output_scale(a: Array) -> float:
    """One output's clean scale: the median over the inputs of the largest finite
    magnitude (1 when that is zero, or the output is not floating point)."""
    a = np.asarray(a)
    if not numeric(a) or a.size == 0:
        return 1.0
    flat = np.abs(np.asarray(a, np.float64).reshape(len(a), -1))
    largest = np.max(np.where(np.isfinite(flat), flat, 0.0), axis=1, initial=0.0)
    scale = float(np.median(largest))
    return scale if scale > 0 else 1.0


def scores(a: Array, b: Array, scale: float | None = None) -> Array:
    """Per input (first axis): ``max |a - b| / scale`` (default ``output_scale(a)``); a NaN
    or an infinity where the other side has none counts as infinitely far, and so does
    every input of two arrays whose shapes differ (``reshaped``); an integer, boolean or
    string output scores 0 where the two sides are equal and infinity elsewhere."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return np.full(len(a), np.inf)
    if not (numeric(a) and numeric(b)):
        same = np.array([np.array_equal(x, y) for x, y in zip(a, b, strict=True)], bool)
        return np.where(same, 0.0, np.inf)
    a64, b64 = (np.asarray(x, np.float64).reshape(len(x), -1) for x in (a, b))
    nan_a, nan_b = np.isnan(a64), np.isnan(b64)
    with np.errstate(invalid="ignore"):
        diff = np.where(nan_a & nan_b, 0.0, np.abs(a64 - b64))
    diff = np.where(nan_a ^ nan_b, np.inf, diff)
    inf_a, inf_b = np.isinf(a64), np.isinf(b64)
    diff = np.where(inf_a & inf_b & (a64 == b64), 0.0, diff)  # the same infinity: equal
    diff = np.where(inf_a ^ inf_b, np.inf, diff)
    found: Array = np.nanmax(diff, axis=1, initial=0.0) / (scale or output_scale(a))
    return found


@dataclass(frozen=True)
class Calibration:
    """One output's threshold and how the clean pairs and the audited pair fare under it."""

    tau: float
    clean_max: float
    clean_heldout_rate: float
    unstable: tuple[int, ...]
    audited_rate: float
    audited_max: float
    identical_share: float
    reshaped: str = ""  # the two sides' shapes and dtypes, where a release changed them
    scale: float = 1.0  # the output's clean scale (``output_scale`` of the from side)
    flip_rate: float | None = None  # the audited pair's share of inputs whose argmax moved
    clean_flip_rate: float | None = None  # the clean pairs' median share

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: an infinite score (a changed shape) as None."""
        return {k: list(v) if isinstance(v, tuple) else v if isinstance(v, str) or v is None
                else float(v) if np.isfinite(v) else None for k, v in self.__dict__.items()}


def calibrate(clean: list[tuple[Array, Array]], audited: tuple[Array, Array], n_cal: int,
              alarm: dict[str, Any]) -> Calibration:
    """The threshold from the clean pairs' calibration rows and the rates under it."""
    scale = output_scale(audited[0])
    # one score row per pair; the two sides' pairs differ in length where a release
    # changed the tensor's shape (a tensor compared whole on one side only)
    clean_scores = [scores(a, b, scale) for a, b in clean]
    per_pair = np.array([row[:n_cal].max(initial=0.0) for row in clean_scores])
    clean_max = float(np.median(per_pair)) if len(per_pair) else 0.0
    tau = max(alarm["margin"] * clean_max, alarm["floor"])
    held_rates = np.array([(row[n_cal:] > tau).mean() if len(row) > n_cal else 0.0
                           for row in clean_scores])
    rate = alarm["false_alarm_rate"]
    audited_scores = scores(*audited, scale)
    changed = reshaped(*audited)
    flipped = None if changed else flips(np.asarray(audited[0]), np.asarray(audited[1]))
    clean_flips = [flips(np.asarray(a), np.asarray(b)) for a, b in clean
                   if not reshaped(a, b)]
    flat_a = np.asarray(audited[0]).reshape(len(audited[0]), -1)
    flat_b = np.asarray(audited[1]).reshape(len(audited[1]), -1)
    nan = numeric(flat_a)  # NaN equals NaN; text has none
    same = np.zeros(len(flat_a), bool) if changed else np.array(
        [np.array_equal(x, y, equal_nan=nan) for x, y in zip(flat_a, flat_b, strict=True)])
    return Calibration(tau=tau, clean_max=clean_max,
                       clean_heldout_rate=float(np.median(held_rates)) if len(held_rates)
                       else 0.0,
                       unstable=tuple(int(i) for i in np.flatnonzero(held_rates > rate)),
                       audited_rate=float((audited_scores > tau).mean()),
                       audited_max=float(audited_scores.max(initial=0.0)),
                       identical_share=float(same.mean()), reshaped=changed, scale=scale,
                       flip_rate=None if flipped is None else flipped / len(flat_a),
                       clean_flip_rate=None if flipped is None else float(np.median(
                           [f / len(flat_a) for f in clean_flips if f is not None] or [0.0])))


def verdict(calibrations: dict[str, Calibration], rate: float) -> tuple[str, str]:
    """The verdict over every output and why (a shape or dtype a release changed first:
    it is beyond clean drift whatever the clean pairs do)."""
    changed = [f"{name} ({c.reshaped})" for name, c in calibrations.items() if c.reshaped]
    if changed:
        return "beyond clean drift", ("the two sides give outputs of another shape or dtype: "
                                      + "; ".join(changed))
    failing = [name for name, c in calibrations.items() if c.clean_heldout_rate > rate]
    if failing:
        worst = max(calibrations[n].clean_heldout_rate for n in failing)
        return "cannot calibrate", (
            f"the clean pairs alarm on {worst:.1%} of the held-out inputs on "
            f"{', '.join(failing)}, above the matched false-alarm rate {rate:.0%}: the "
            "model's clean drift is not stable enough across its inputs to calibrate on")
    beyond = [name for name, c in calibrations.items() if c.audited_rate > rate]
    flipping = [name for name, c in calibrations.items() if c.flip_rate is not None
                and c.flip_rate > max(rate, c.clean_flip_rate or 0.0)]
    if beyond or flipping:
        said = [f"{n} ({calibrations[n].audited_rate:.0%} of inputs, max score "
                f"{calibrations[n].audited_max:.3g} > tau {calibrations[n].tau:.3g})"
                for n in beyond]
        said += [f"{n}'s argmax moves on {calibrations[n].flip_rate:.0%} of inputs (the "
                 f"clean pairs: {calibrations[n].clean_flip_rate or 0:.0%})" for n in flipping]
        return "beyond clean drift", "the audited pair alarms on " + "; ".join(said)
    return "within clean drift", (
        "every output stays under its threshold on at least "
        f"{1 - rate:.0%} of the inputs (largest audited score "
        f"{max((c.audited_max for c in calibrations.values()), default=0.0):.3g})")


def flips(a: Array, b: Array) -> int | None:
    """Inputs whose argmax differs, where the output is a floating-point score vector
    (inputs, classes, then only axes of size 1); None otherwise."""
    if a.ndim < 2 or a.shape[1] < 2 or any(n != 1 for n in a.shape[2:]) \
            or not numeric(a) or a.shape != b.shape:
        return None
    a, b = a.reshape(len(a), -1), b.reshape(len(b), -1)
    return int((np.argmax(a, axis=1) != np.argmax(b, axis=1)).sum())


def first_moving(calibrations: dict[str, Calibration], exposed: list[dict[str, str]],
                 rate: float) -> dict[str, Any] | None:
    """The first exposed tensor in graph order whose audited alarm share exceeds ``rate``."""
    for entry in exposed:
        found = calibrations.get(entry["tensor"])
        if found is not None and found.audited_rate > rate:
            return {**entry, **found.as_dict()}
    return None


ZERO_REFERENCE = "the from side is 0 at every element, and a difference from 0 has no " \
    "relative size"


NAN_FAILS = ("{} of them identical on both sides, holding NaN or an infinity: Polygraphy's "
             "comparison fails an element whose difference is NaN (NaN - NaN, inf - inf)")


def describe(a: Array, b: Array, name: str) -> dict[str, Any]:
    """The plain measures of one output: largest absolute difference, largest relative
    difference over the elements where the ``from`` side is not 0 (``largest_relative``;
    none, and why, where it is 0 at every element), argmax flips, Polygraphy's default
    verdict per input on the arrays in their own dtype (integers and float64 as they are,
    not cast to float32), and where it fails inputs the two sides give identically (NaN or
    infinities), why (``polygraphy_note``); none of them for two arrays of other
    shapes or dtypes, which fail every input (``reshaped``), and no difference for a
    string output, which is compared exactly (Polygraphy's comparison subtracts, so it
    cannot compare text)."""
    from kit.drift.polygraphy_check import polygraphy_fails

    if reshaped(a, b):
        return {"max_abs": None, "max_rel": None, "flips": None,
                "polygraphy_fails": len(a), "polygraphy_verdict": "fails (shapes differ)"}
    if text(a):
        return {"max_abs": None, "max_rel": None, "flips": None, "polygraphy_fails": None,
                "polygraphy_verdict": "cannot compare text"}
    a, b = np.asarray(a), np.asarray(b)
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, left out as NaN - NaN is
        diff = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))
    rel = largest_relative(diff, a)
    fails = polygraphy_fails(a, b, name)  # in their own dtype, as the audit judges them
    equal = np.array([np.array_equal(x, y, equal_nan=numeric(a)) for x, y in zip(
        a.reshape(len(a), -1), b.reshape(len(b), -1), strict=True)], bool)
    own = int((fails & equal).sum())  # Polygraphy's own verdict on equal NaN or infinities
    return {"max_abs": float(np.nanmax(diff, initial=0.0)), "max_rel": rel,
            **({} if rel is not None else {"max_rel_none": ZERO_REFERENCE}),
            "flips": flips(a, b), "polygraphy_fails": int(fails.sum()),
            "polygraphy_verdict": "fails" if fails.any() else "passes",
            **({"polygraphy_note": NAN_FAILS.format(own)} if own else {})}
