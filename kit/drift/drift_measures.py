"""The real-drift sweep's measures of one cell against the reference cell (float64).

For one model and export, with ``r`` the reference cell's and ``c`` a cell's logits on the
clean held-out images (``_o`` source, ``_t`` rotated):

    max_abs_logit       max |c - r| over both conditions, images and classes
    norm quantiles      quantiles of ||c_o - r_o|| over images
    flips               images whose argmax differs from the reference's, per condition
    first_moving_layer  the first convolution (graph order) whose sketch differs in any bit
    vs_one_thread       max |c - c'| against the same release and level at one thread
    alarms              per detector of the drift study, the share of source images whose
                        score exceeds the threshold calibrated on the paper's pair, with a
                        nested bootstrap over source images: each replicate recalibrates
                        the threshold on resampled calibration images and counts alarms on
                        resampled held-out images (the same draws for every cell)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from kit.drift.calibrate import (
    matched_threshold,
    resampled_matched_thresholds,
    resampled_thresholds,
    threshold,
)
from kit.drift.detectors import DETECTORS, Scores, score_block
from kit.stats import draw_counts, percentile_interval

Array = np.ndarray[Any, Any]
QUANTILES = (0.5, 0.9, 0.99, 1.0)


@dataclass(frozen=True)
class Logits:
    """A cell's outputs on one model and export: logits and sketches per condition."""

    logits: dict[str, Array]  # condition -> (n, classes)
    sketches: dict[str, dict[str, Array]]  # condition -> sketch output name -> (n, k)


def outputs_digest(cell: Logits) -> str:
    """sha256 over every array of ``cell`` (condition, name, dtype, shape and bytes, in a
    fixed order): equal digests mean bit-identical outputs, hence identical measures."""
    digest = hashlib.sha256()
    arrays = [(f"logits/{cond}", array) for cond, array in sorted(cell.logits.items())]
    arrays += [(f"{cond}/{name}", array) for cond, found in sorted(cell.sketches.items())
               for name, array in sorted(found.items())]
    for name, array in arrays:
        contiguous = np.ascontiguousarray(array)
        digest.update(f"{name}|{contiguous.dtype.str}|{contiguous.shape}|".encode())
        digest.update(contiguous.tobytes())
    return digest.hexdigest()


def layer_order(names: list[str]) -> list[str]:
    """Sketch outputs ``sketch/<i>`` in graph order (by i)."""
    return sorted(names, key=lambda name: int(name.rsplit("/", 1)[1]))


def first_moving_layer(cell: Logits, reference: Logits) -> int | None:
    """Index of the first convolution whose sketch differs in any bit on any condition."""
    for name in layer_order(list(reference.sketches[next(iter(reference.sketches))])):
        for cond, sketches in reference.sketches.items():
            if not np.array_equal(cell.sketches[cond][name], sketches[name]):
                return int(name.rsplit("/", 1)[1])
    return None


def max_abs_difference(a: dict[str, Array], b: dict[str, Array]) -> float:
    """max |a - b| over every condition, image and class (float64)."""
    return float(max(np.abs(a[c].astype(np.float64) - b[c].astype(np.float64)).max()
                     for c in b))


def logit_measures(cell: dict[str, Array], reference: dict[str, Array], source: str
                   ) -> dict[str, Any]:
    """max |d logit|, ||e_o|| quantiles and flips of one cell's logits per condition
    (held-out rows only) against the reference's."""
    diffs = {cond: cell[cond].astype(np.float64) - reference[cond].astype(np.float64)
             for cond in reference}
    norms = np.linalg.norm(diffs[source], axis=1)
    return {
        "max_abs_logit": float(max(np.abs(d).max() for d in diffs.values())),
        "norm_quantiles": {str(q): float(np.quantile(norms, q)) for q in QUANTILES},
        "flips": {cond: int((cell[cond].argmax(1) != reference[cond].argmax(1)).sum())
                  for cond in reference},
    }


def drift_measures(cell: Logits, reference: Logits, source: str) -> dict[str, Any]:
    """``logit_measures`` and the first layer that moved, of one cell (held-out rows)."""
    return {**logit_measures(cell.logits, reference.logits, source),
            "first_moving_layer": first_moving_layer(cell, reference)}


def scores(cell: Logits, reference: Logits, source: str, rotated: str,
           tolerance: dict[str, float]) -> Scores:
    """The drift study's detector scores of a cell against the reference."""
    return score_block(cell.logits[source], reference.logits[source], cell.logits[rotated],
                       reference.logits[rotated], tolerance["atol"], tolerance["rtol"])


@dataclass(frozen=True)
class Calibration:
    """The pair's thresholds on one model and export, and the bootstrap's draws."""

    thresholds: dict[str, float]
    replicate_thresholds: dict[str, Array]  # detector -> (R,)
    held_counts: Array  # (R, n_held)


def calibrate(pair_scores: Scores, quantile: float, replicates: int, seed: int,
              n_held: int, fpr: float | None = None) -> Calibration:
    """Thresholds on the pair's clean calibration scores, fixed and per replicate: the
    paper's rule at ``quantile``, or with ``fpr`` the matched rule (linear ``1 - fpr``
    percentile, ``kit.drift.calibrate.matched_threshold``)."""
    rng = np.random.default_rng(seed)
    n_cal = len(pair_scores.direct)
    cal_counts = draw_counts(rng, n_cal, replicates)
    held_counts = draw_counts(rng, n_held, replicates)
    fixed, per_replicate = {}, {}
    for name in DETECTORS:
        values = pair_scores.detector(name)
        order = np.argsort(values, kind="stable")
        if fpr is None:
            fixed[name] = threshold(values, quantile)
            per_replicate[name] = resampled_thresholds(values[order], cal_counts[:, order],
                                                       quantile)
        else:
            fixed[name] = matched_threshold(values, fpr)
            per_replicate[name] = resampled_matched_thresholds(values[order],
                                                               cal_counts[:, order], fpr)
    return Calibration(fixed, per_replicate, held_counts)


def replicate_rates(values: Array, calibration: Calibration, name: str) -> Array:
    """(R,) alarm rate of one detector's held-out scores in every nested replicate."""
    replicate = values[None, :] > calibration.replicate_thresholds[name][:, None]
    return np.asarray((calibration.held_counts * replicate).sum(axis=1) / len(values))


def alarm_rates(cell_scores: Scores, calibration: Calibration, interval: float
                ) -> dict[str, dict[str, Any]]:
    """Each detector's alarm rate on the cell's held-out images, with its nested interval."""
    out = {}
    for name in DETECTORS:
        values = cell_scores.detector(name)
        alarms = values > calibration.thresholds[name]
        rates = replicate_rates(values, calibration, name)
        out[name] = {"alarms": int(alarms.sum()), "n": len(values),
                     "rate": float(alarms.mean()),
                     "interval": percentile_interval(rates, interval)}
    return out
