"""Source-image bootstraps of the detection and localisation rates, vectorised.

The resampling unit is the source image: a replicate draws images with replacement, and
every row of that image (all models, all faults, clean) comes with it as often as it was
drawn, so a replicate is a vector of per-image counts.

- ``fixed``: held-out images redrawn, thresholds fixed at their calibration values.
- ``nested``: each replicate redraws the calibration images, re-estimates every threshold
  per model and detector from the redrawn clean scores, independently redraws the
  held-out images and recomputes every rate. Optionally (beyond the paper) it also
  re-estimates the per-layer localisation normalisers, and the matched-FPR thresholds.

Draws: ``numpy.random.default_rng(seed)``; nested draws all calibration indices (R, n_cal)
first, then all held-out indices (R, n_held). ``loop_nested`` is the same computation one
replicate at a time with the scalar rules of ``kit.drift.calibrate``, for tests and the bench.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from kit.drift.analysis import CALIBRATION, CLEAN, HELDOUT, Table
from kit.drift.calibrate import (
    matched_threshold,
    resampled_matched_thresholds,
    resampled_thresholds,
    threshold,
)
from kit.drift.detectors import COLUMN, DETECTORS
from kit.drift.localise import KINDS, TOP_K, replicate_ranks, resampled_normalisers
from kit.errors import KitError
from kit.stats import draw_counts

Array = np.ndarray[Any, Any]
DECISION_BASELINES = ("direct", "mixed")  # the frozen rule: metamorphic against both


@dataclass(frozen=True)
class Pool:
    """One model's scores of one detector, arranged by source image."""

    calibration: Array   # (n_cal,) clean calibration score of each calibration image
    clean: Array         # (n_held,) clean held-out score of each held-out image
    faults: Array        # (n_held, F) fault scores of each held-out image


def _by_image(table: Table, detector: str, rows: Array, images: Array) -> Array:
    """The score of each image (sample position) among ``rows``, in ``images`` order."""
    where = {int(s): i for i, s in enumerate(table["sample"][rows])}
    missing = [int(s) for s in images if int(s) not in where]
    if missing:
        raise KitError(f"bootstrap: images {missing[:5]} have no row in the table")
    return np.asarray(table[COLUMN[detector]][rows][[where[int(s)] for s in images]])


def pools(table: Table, detector: str, cal_images: Array, held_images: Array
          ) -> list[Pool]:
    """Per-model pools; images are sample positions, in pool order."""
    found = []
    for model in np.unique(table["model"]).tolist():
        mine = table["model"] == model
        clean = mine & (table["fault"] == CLEAN)

        cal = _by_image(table, detector, clean & (table["role"] == CALIBRATION), cal_images)
        held = _by_image(table, detector, clean & (table["role"] == HELDOUT), held_images)
        fault_ids = np.unique(table["fault"][mine & (table["fault"] != CLEAN)])
        columns = [_by_image(table, detector, mine & (table["fault"] == f), held_images)
                   for f in fault_ids]
        found.append(Pool(cal, held, np.stack(columns, 1)))
    return found


def _alarm_counts(scores: Array, limits: Array) -> tuple[Array, Array]:
    """Per distinct threshold: alarms per image; and each replicate's distinct index."""
    distinct, inverse = np.unique(limits, return_inverse=True)
    if scores.ndim == 1:
        scores = scores[:, None]
    per = np.empty((len(distinct), scores.shape[0]), np.int64)
    for start in range(0, len(distinct), 256):
        chunk = distinct[start:start + 256]
        per[start:start + len(chunk)] = (scores[None] > chunk[:, None, None]).sum(-1)
    return per, inverse


def weighted_alarms(scores: Array, limits: Array, weights: Array) -> Array:
    """(R,) sum over images of weight x number of alarming rows at each replicate's limit."""
    per, inverse = _alarm_counts(scores, limits)
    return np.asarray(np.einsum("ri,ri->r", weights, per[inverse]))


def replicate_thresholds(pool: Pool, cal_counts: Array | None, rule: str, quantile: float,
                         fpr: float, replicates: int) -> Array:
    """(R,) thresholds: fixed (no calibration counts) or re-estimated per replicate."""
    if cal_counts is None:
        value = threshold(pool.calibration, quantile) if rule == "paper" else \
            matched_threshold(pool.calibration, fpr)
        return np.full(replicates, value)
    order = np.argsort(pool.calibration, kind="stable")
    ordered, counts = pool.calibration[order], cal_counts[:, order]
    if rule == "paper":
        return resampled_thresholds(ordered, counts, quantile)
    return resampled_matched_thresholds(ordered, counts, fpr)


def rates(model_pools: list[Pool], held_counts: Array, cal_counts: Array | None,
          rule: str = "paper", quantile: float = 0.99, fpr: float = 0.01
          ) -> dict[str, Array]:
    """Pooled TPR and FPR of every replicate for one detector."""
    replicates = held_counts.shape[0]
    tp = np.zeros(replicates)
    fp = np.zeros(replicates)
    positives = np.zeros(replicates)
    negatives = np.zeros(replicates)
    for pool in model_pools:
        limits = replicate_thresholds(pool, cal_counts, rule, quantile, fpr, replicates)
        tp += weighted_alarms(pool.faults, limits, held_counts)
        fp += weighted_alarms(pool.clean, limits, held_counts)
        positives += held_counts.sum(1) * pool.faults.shape[1]
        negatives += held_counts.sum(1)
    return {"tpr": tp / positives, "fpr": fp / negatives}


def describe(values: Array) -> dict[str, float]:
    """Mean, median, sd, 2.5/97.5 percentiles, min, max, share negative of replicates."""
    values = np.asarray(values, np.float64)
    lo, hi = np.percentile(values, [2.5, 97.5])
    return {"mean": float(values.mean()), "median": float(np.median(values)),
            "sd": float(values.std(ddof=1)), "p2_5": float(lo), "p97_5": float(hi),
            "min": float(values.min()), "max": float(values.max()),
            "share_negative": float(np.mean(values < 0)), "n": int(values.size)}


def holm(differences: dict[str, Array], alpha: float) -> dict[str, Any]:
    """The frozen decision rule: metamorphic superior to every baseline when every
    one-sided bootstrap test of difference > 0 rejects under Holm's step-down."""
    p = {name: float((1 + np.sum(d <= 0)) / (1 + d.size)) for name, d in differences.items()}
    order = sorted(p, key=lambda name: p[name])
    rejected = {name: False for name in p}
    for step, name in enumerate(order):
        if p[name] > alpha / (len(order) - step):
            break
        rejected[name] = True
    intervals = {name: [float(x) for x in np.percentile(d, [100 * alpha / 2,
                                                            100 * (1 - alpha / 2)])]
                 for name, d in differences.items()}
    return {"p_one_sided": p, "holm_order": order, "rejected": rejected,
            "intervals": intervals, "superior": all(rejected.values())}


def detection_replicates(table: Table, cal_images: Array, held_images: Array,
                         replicates: int, seed: int, nested: bool, quantile: float = 0.99,
                         fpr: float = 0.01) -> dict[str, Array]:
    """Every detector's TPR and FPR in every replicate (and the matched-FPR pair)."""
    rng = np.random.default_rng(seed)
    cal_counts = draw_counts(rng, len(cal_images), replicates) if nested else None
    held_counts = draw_counts(rng, len(held_images), replicates)
    out: dict[str, Array] = {}
    for detector in DETECTORS:
        found = rates(pools(table, detector, cal_images, held_images), held_counts,
                      cal_counts, "paper", quantile)
        out[f"{detector}/tpr"], out[f"{detector}/fpr"] = found["tpr"], found["fpr"]
    for detector in ("metamorphic", "maximum"):
        found = rates(pools(table, detector, cal_images, held_images), held_counts,
                      cal_counts, "matched", quantile, fpr)
        out[f"matched/{detector}/tpr"] = found["tpr"]
        out[f"matched/{detector}/fpr"] = found["fpr"]
    out["held_counts"], out["cal_counts"] = held_counts, (
        cal_counts if cal_counts is not None else np.zeros((0, len(cal_images)), np.int64))
    return out


def differences(reps: dict[str, Array]) -> dict[str, Array]:
    """Metamorphic minus each baseline, per replicate, in percentage points."""
    out = {}
    for base in ("direct", "mixed", "maximum"):
        for what in ("tpr", "fpr"):
            out[f"metamorphic-{base}/{what}"] = 100 * (reps[f"metamorphic/{what}"]
                                                      - reps[f"{base}/{what}"])
    for what in ("tpr", "fpr"):
        out[f"matched/metamorphic-maximum/{what}"] = 100 * (
            reps[f"matched/metamorphic/{what}"] - reps[f"matched/maximum/{what}"])
    return out


def localisation_replicates(table: Table, layers: dict[str, Array], models: list[str],
                            cal_counts: Array | None, held_counts: Array,
                            cal_images: Array, held_images: Array, quantile: float = 0.99,
                            chunk: int = 4) -> dict[str, Array]:
    """Top-1, top-3 and MRR per replicate for every kind, with the normalisers
    re-estimated from each calibration resample (``cal_counts``) or fixed (None). Each
    model and kind is one task, up to one process per core; their sums are added in model
    order, as one loop would add them."""
    replicates = held_counts.shape[0]
    sums = {f"{k}/{s}": np.zeros(replicates) for k in KINDS for s in ("top1", "top3", "mrr")}
    total = np.zeros(replicates)
    cal_pos = {int(s): i for i, s in enumerate(cal_images)}
    held_pos = {int(s): i for i, s in enumerate(held_images)}
    tasks, kinds = [], []
    for name in models:
        rows = layers[f"{name}/rows"]
        fault = table["fault"][rows] != CLEAN
        cal_index = np.array([cal_pos[int(s)] for s in table["sample"][rows][~fault]])
        held_index = np.array([held_pos[int(s)] for s in table["sample"][rows][fault]])
        total += held_counts[:, held_index].astype(np.float32).sum(1)
        for kind in KINDS:
            scores = layers[f"{name}/{kind}"].astype(np.float64)
            tasks.append((scores[~fault][np.argsort(cal_index)], scores[fault],
                          table["layer"][rows][fault].astype(np.int64), cal_counts,
                          len(cal_images), held_counts, held_index, quantile, chunk))
            kinds.append(kind)
    for kind, found in zip(kinds, _map(_kind_sums, tasks), strict=True):
        for i, stat in enumerate(("top1", "top3", "mrr")):
            sums[f"{kind}/{stat}"] += found[i]
    return {key: value / total for key, value in sums.items()}


def _map(function: Any, tasks: list[tuple[Any, ...]]) -> list[Any]:
    """``function`` over ``tasks`` in order, in up to one spawned process per core."""
    workers = min(len(tasks), os.cpu_count() or 1)
    if workers <= 1:
        return [function(*task) for task in tasks]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        return list(pool.map(function, *zip(*tasks, strict=True)))


def _kind_sums(clean: Array, faults: Array, truth: Array, cal_counts: Array | None,
               n_cal: int, held_counts: Array, held_index: Array, quantile: float,
               chunk: int) -> Array:
    """(3, R) float32 top-1, top-3 and reciprocal-rank sums of one model and kind
    (``held_index``: each fault row's held-out image)."""
    replicates = held_counts.shape[0]
    if cal_counts is None:
        norms = np.broadcast_to(resampled_normalisers(
            clean, np.ones((1, n_cal), np.int64), quantile), (replicates, clean.shape[1]))
    else:
        norms = resampled_normalisers(clean, cal_counts, quantile)
    weights = held_counts[:, held_index].astype(np.float32)  # (R, N)
    out = np.zeros((3, replicates), np.float32)
    for start in range(0, replicates, chunk):
        part = slice(start, start + chunk)
        rank = replicate_ranks(faults, norms[part], truth).astype(np.float32)
        w = weights[part]
        out[0, part] = (w * (rank == 1)).sum(1)
        out[1, part] = (w * (rank <= TOP_K)).sum(1)
        out[2, part] = (w / rank).sum(1)
    return out


def loop_nested(table: Table, cal_images: Array, held_images: Array, replicates: int,
                seed: int, quantile: float = 0.99) -> dict[str, Array]:
    """The nested detection bootstrap one replicate at a time (reference implementation)."""
    rng = np.random.default_rng(seed)
    cal_draws = rng.integers(0, len(cal_images), size=(replicates, len(cal_images)))
    held_draws = rng.integers(0, len(held_images), size=(replicates, len(held_images)))
    out = {f"{d}/{w}": np.zeros(replicates) for d in DETECTORS for w in ("tpr", "fpr")}
    all_pools = {d: pools(table, d, cal_images, held_images) for d in DETECTORS}
    for r in range(replicates):
        for detector in DETECTORS:
            tp = fp = pos = neg = 0.0
            for pool in all_pools[detector]:
                limit = threshold(pool.calibration[cal_draws[r]], quantile)
                tp += float((pool.faults[held_draws[r]] > limit).sum())
                fp += float((pool.clean[held_draws[r]] > limit).sum())
                pos += pool.faults[held_draws[r]].size
                neg += len(held_draws[r])
            out[f"{detector}/tpr"][r], out[f"{detector}/fpr"][r] = tp / pos, fp / neg
    return out
