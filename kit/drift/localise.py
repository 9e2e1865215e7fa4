"""Layer localisation from activation sketches.

For layer l, a_o,l = sketch_cand(x) - sketch_ref(x) and a_t,l the same on the rotated
image. Raw scores per layer:

    direct       ||a_o,l||
    metamorphic  ||a_t,l - a_o,l||
    maximum      max(||a_o,l||, ||a_t,l||)

Each raw score is divided by that layer's clean calibration threshold (the calibration
rule of ``kit.drift.calibrate`` on the layer's clean calibration scores) before ranking. A layer
whose clean threshold is exactly 0 scores +inf when it moves at all and 0 otherwise.
Ranks are pessimistic: the true layer's rank is 1 + the number of other layers scoring at
least as high, so ties never favour the method.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kit.drift.calibrate import resampled_thresholds, threshold

Array = np.ndarray[Any, Any]
KINDS = ("direct", "metamorphic", "maximum")
TOP_K = 3  # the cut-off recorded besides top-1 (the paper's top three)


def layer_scores(c_o: list[Array], r_o: list[Array], c_t: list[Array], r_t: list[Array]
                 ) -> dict[str, Array]:
    """(N, L) raw scores of each kind from per-layer sketch blocks (N, S_l)."""
    direct, meta, maximum = [], [], []
    for co, ro, ct, rt in zip(c_o, r_o, c_t, r_t, strict=True):
        a_o = co.astype(np.float64) - ro.astype(np.float64)
        a_t = ct.astype(np.float64) - rt.astype(np.float64)
        n_o, n_t = np.linalg.norm(a_o, axis=1), np.linalg.norm(a_t, axis=1)
        direct.append(n_o)
        meta.append(np.linalg.norm(a_t - a_o, axis=1))
        maximum.append(np.maximum(n_o, n_t))
    return {"direct": np.stack(direct, 1), "metamorphic": np.stack(meta, 1),
            "maximum": np.stack(maximum, 1)}


def normalisers(clean_calibration: Array, quantile: float = 0.99) -> Array:
    """(L,) per-layer clean thresholds from (N_cal, L) clean calibration scores."""
    return np.array([threshold(clean_calibration[:, layer], quantile)
                     for layer in range(clean_calibration.shape[1])])


def resampled_normalisers(clean_calibration: Array, counts: Array, quantile: float = 0.99
                          ) -> Array:
    """(R, L) normalisers of every calibration resample (``counts`` (R, N_cal))."""
    order = np.argsort(clean_calibration, axis=0, kind="stable")
    columns = []
    for layer in range(clean_calibration.shape[1]):
        pool = clean_calibration[order[:, layer], layer]
        columns.append(resampled_thresholds(pool, counts[:, order[:, layer]], quantile))
    return np.stack(columns, 1)


def normalised(scores: Array, norms: Array) -> Array:
    """scores / norms with the zero-threshold convention; broadcasts (..., L)."""
    safe = np.where(norms > 0, norms, 1.0)
    return np.where(norms > 0, scores / safe, np.where(scores > 0, np.inf, 0.0))


def true_layer_rank(scores: Array, norms: Array, true_layer: Array) -> Array:
    """1-based pessimistic rank of the true layer per row; norms (L,) or (R, 1, L)."""
    ratio = normalised(scores, norms)
    true = np.take_along_axis(ratio, np.broadcast_to(
        true_layer[:, None], (*ratio.shape[:-1], 1)), axis=-1)
    ahead = (ratio >= true).sum(axis=-1) - 1
    return np.asarray(1 + ahead)


def replicate_ranks(scores: Array, norms: Array, true_layer: Array) -> Array:
    """(R, N) ``true_layer_rank`` of every row (``scores`` (N, L)) under every replicate's
    normalisers (``norms`` (R, L)): the same divisions and comparisons, in one pass each."""
    positive = norms > 0
    ratio = scores[None, :, :] / np.where(positive, norms, 1.0)[:, None, :]
    if not positive.all():  # the zero-threshold convention, on the columns that need it
        fill = np.where(scores > 0, np.inf, 0.0)
        replicate, layer = np.nonzero(~positive)
        ratio[replicate, :, layer] = fill[:, layer].T
    true = ratio[:, np.arange(len(true_layer)), true_layer]
    return np.asarray(1 + np.count_nonzero(ratio >= true[:, :, None], axis=-1) - 1)


def summary(ranks: Array) -> dict[str, float]:
    """Top-1, top-3 accuracy and mean reciprocal rank of a set of ranks."""
    ranks = np.asarray(ranks, np.float64)
    return {"top1": float(np.mean(ranks == 1)), "top3": float(np.mean(ranks <= TOP_K)),
            "mrr": float(np.mean(1.0 / ranks)), "n": int(ranks.size)}
