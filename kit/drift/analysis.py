"""Every result of the drift study from the per-case tables, as plain functions.

The score stage calls these to write its summary; ``verify`` calls the same functions on
the shipped tables to recompute each claim. Inputs are trusted tables (``kit.drift.evidence``
checked them); held-out fault rows are positives, held-out clean rows negatives; every
threshold comes from clean calibration rows of the same model only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kit.drift.calibrate import alarms, matched_threshold, threshold
from kit.drift.detectors import COLUMN, DETECTORS
from kit.drift.evidence import ROLE_CODES, table_name
from kit.drift.localise import KINDS, normalisers, summary, true_layer_rank

Array = np.ndarray[Any, Any]
Table = dict[str, Array]
CLEAN = -1
HELDOUT = ROLE_CODES["heldout"]
CALIBRATION = ROLE_CODES["calibration"]


def calibration_scores(table: Table, detector: str, model: int) -> Array:
    """Clean calibration scores of one model."""
    rows = (table["model"] == model) & (table["fault"] == CLEAN) & (table["role"] == CALIBRATION)
    return np.asarray(table[COLUMN[detector]][rows])


def thresholds(table: Table, detector: str, quantile: float = 0.99,
               matched_fpr: float | None = None) -> dict[int, float]:
    """Per-model threshold (the paper's rule, or the matched-FPR rule when given)."""
    found = {}
    for model in np.unique(table["model"]).tolist():
        scores = calibration_scores(table, detector, model)
        found[model] = (threshold(scores, quantile) if matched_fpr is None
                        else matched_threshold(scores, matched_fpr))
    return found


def case_alarms(table: Table, detector: str, limits: dict[int, float]) -> Array:
    """Alarm of every row at its model's threshold."""
    limit = np.array([limits[m] for m in table["model"].tolist()]) if len(table["model"]) \
        else np.zeros(0)
    return alarms(table[COLUMN[detector]], limit)


def rate(flags: Array) -> dict[str, Any]:
    return {"count": int(flags.sum()), "n": int(flags.size),
            "rate": float(flags.mean()) if flags.size else float("nan")}


def detection(table: Table, detector: str, limits: dict[int, float],
              where: Array | None = None) -> dict[str, Any]:
    """Held-out TPR and FPR (counts and rates), optionally within a row subset."""
    flags = case_alarms(table, detector, limits)
    keep = table["role"] == HELDOUT
    if where is not None:
        keep = keep & where
    fault = table["fault"] != CLEAN
    return {"tpr": rate(flags[keep & fault]), "fpr": rate(flags[keep & ~fault])}


def threshold_free(table: Table, detector: str, where: Array | None = None) -> dict[str, float]:
    """AUROC and AUPRC (scikit-learn) of held-out fault vs held-out clean rows."""
    keep = table["role"] == HELDOUT
    if where is not None:
        keep = keep & where
    truth = (table["fault"][keep] != CLEAN).astype(int)
    scores = table[COLUMN[detector]][keep]
    from sklearn.metrics import average_precision_score, roc_auc_score  # where used

    return {"auroc": float(roc_auc_score(truth, scores)),
            "auprc": float(average_precision_score(truth, scores))}


def primary(table: Table, models: list[str], quantile: float = 0.99,
            free: bool = True) -> dict[str, Any]:
    """Table 1 and 2: every detector's thresholds, rates and (with ``free``) AUROC/AUPRC,
    pooled and per model. Without ``free`` scikit-learn is never imported: a claim that
    reads only rates answers without it (``kit.drift.shipped.Evidence.rates``)."""
    def scored(detector: str, where: Array | None = None) -> dict[str, float]:
        return threshold_free(table, detector, where) if free else {}

    result: dict[str, Any] = {}
    for detector in DETECTORS:
        limits = thresholds(table, detector, quantile)
        entry = {"thresholds": {models[m]: v for m, v in limits.items()},
                 **detection(table, detector, limits), **scored(detector),
                 "per_model": {}}
        for m, name in enumerate(models):
            mine = table["model"] == m
            entry["per_model"][name] = {**detection(table, detector, limits, mine),
                                        **scored(detector, mine)}
        result[detector] = entry
    return result


def matched(table: Table, fpr: float, detectors: tuple[str, ...] = ("metamorphic", "maximum")
            ) -> dict[str, Any]:
    """Beyond the paper: rates at thresholds matched to the same calibration FPR."""
    out = {}
    for detector in detectors:
        limits = thresholds(table, detector, matched_fpr=fpr)
        cal = case_alarms(table, detector, limits)[(table["fault"] == CLEAN)
                                                  & (table["role"] == CALIBRATION)]
        out[detector] = {**detection(table, detector, limits), "calibration_fpr": rate(cal)}
    return out


def fault_cells(table: Table, codes: dict[str, list[str]], quantile: float = 0.99
                ) -> list[dict[str, Any]]:
    """TPR of every detector in every fault cell (model x layer x family x severity)."""
    limits = {d: thresholds(table, d, quantile) for d in DETECTORS}
    flags = {d: case_alarms(table, d, limits[d]) for d in DETECTORS}
    held = (table["role"] == HELDOUT) & (table["fault"] != CLEAN)
    cells = []
    for m, model in enumerate(codes["models"]):
        for p, position in enumerate(codes["positions"]):
            for f, family in enumerate(codes["families"]):
                for lv, level in enumerate(codes["levels"]):
                    rows = held & (table["model"] == m) & (table["position"] == p) \
                        & (table["family"] == f) & (table["level"] == lv)
                    cells.append({"model": model, "position": position, "family": family,
                                  "level": level,
                                  **{d: rate(flags[d][rows]) for d in DETECTORS}})
    return cells


def pooled_cells(cells: list[dict[str, Any]], keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """Cells pooled over the coordinates not in ``keys`` (e.g. over models)."""
    groups: dict[tuple[str, ...], dict[str, Any]] = {}
    for cell in cells:
        key = tuple(cell[k] for k in keys)
        entry = groups.setdefault(key, {**dict(zip(keys, key, strict=True)),
                                        **{d: {"count": 0, "n": 0} for d in DETECTORS}})
        for d in DETECTORS:
            entry[d]["count"] += cell[d]["count"]
            entry[d]["n"] += cell[d]["n"]
    for entry in groups.values():
        for d in DETECTORS:
            entry[d]["rate"] = entry[d]["count"] / entry[d]["n"]
    return list(groups.values())


def localisation(table: Table, models: list[str], ranks: dict[str, Array] | None = None
                 ) -> dict[str, Any]:
    """Top-1, top-3 and MRR of every kind over held-out fault rows, overall and per model.
    ``ranks`` defaults to the table's rank columns."""
    held = (table["role"] == HELDOUT) & (table["fault"] != CLEAN)
    out: dict[str, Any] = {}
    for kind in KINDS:
        column = ranks[kind] if ranks is not None else table[f"rank_{kind}"]
        out[kind] = {**summary(column[held]), "per_model": {
            name: summary(column[held & (table["model"] == m)])
            for m, name in enumerate(models)}}
    return out


def ranks_from_layers(table: Table, layers: dict[str, Array], models: list[str],
                      quantile: float = 0.99) -> dict[str, Array]:
    """Recompute every row's true-layer rank from the per-layer scores (fault rows;
    0 for clean rows), with normalisers from the clean calibration rows."""
    out = {kind: np.zeros(len(table["model"]), np.int16) for kind in KINDS}
    for _m, name in enumerate(models):
        rows = layers[f"{name}/rows"]
        clean_cal = (table["fault"][rows] == CLEAN) & (table["role"][rows] == CALIBRATION)
        fault = table["fault"][rows] != CLEAN
        for kind in KINDS:
            scores = layers[f"{name}/{kind}"].astype(np.float64)
            norms = normalisers(scores[clean_cal], quantile)
            rank = true_layer_rank(scores[fault], norms, table["layer"][rows][fault])
            out[kind][rows[fault]] = rank
    return out


def geometry(table: Table, quantile: float = 0.99) -> dict[str, Any]:
    """Spearman rho of cosine vs cancellation ratio; mean cosine of discordant cases;
    detection in the reference-stable and -unstable subgroups."""
    held = (table["role"] == HELDOUT) & (table["fault"] != CLEAN)
    both = held & (table["e_o_norm"] > 0) & (table["e_t_norm"] > 0)
    from scipy.stats import spearmanr  # imported where used: verify loads this module

    rho = spearmanr(table["cosine"][both], table["ratio"][both])
    limits = {d: thresholds(table, d, quantile) for d in ("direct", "metamorphic")}
    direct = case_alarms(table, "direct", limits["direct"])
    meta = case_alarms(table, "metamorphic", limits["metamorphic"])
    only_direct, only_meta = both & direct & ~meta, both & meta & ~direct

    def mean_cos(rows: Array) -> float:
        return float(np.mean(table["cosine"][rows])) if rows.any() else float("nan")

    groups = {}
    for name, rows in (("stable", held & table["stable"]), ("unstable", held & ~table["stable"])):
        groups[name] = {"n": int(rows.sum()), "direct": rate(direct[rows]),
                        "metamorphic": rate(meta[rows])}
    return {"spearman_rho": float(rho.statistic), "spearman_p": float(rho.pvalue),
            "n": int(both.sum()), "direct_only": {"n": int(only_direct.sum()),
                                                  "mean_cosine": mean_cos(only_direct)},
            "metamorphic_only": {"n": int(only_meta.sum()), "mean_cosine": mean_cos(only_meta)},
            "cosine_difference": mean_cos(only_direct) - mean_cos(only_meta), **groups}


def accuracy(clean: dict[str, Array], labels: Array, models: list[str], rotated: str
             ) -> dict[str, Any]:
    """Reference top-1 accuracy on the source images and top-1 stability under the
    rotation, per model and their mean, from the clean reference logits."""
    out: dict[str, Any] = {}
    for name in models:
        r_o, r_t = clean[f"ref/{name}/orig"], clean[f"ref/{name}/{rotated}"]
        out[name] = {"accuracy": rate(r_o.argmax(1) == labels),
                     "stability": rate(r_o.argmax(1) == r_t.argmax(1))}
    out["mean_accuracy"] = float(np.mean([out[n]["accuracy"]["rate"] for n in models]))
    out["mean_stability"] = float(np.mean([out[n]["stability"]["rate"] for n in models]))
    return out


FACTOR_PAIRS = {"version_at_opt_off": ("cand-off", "ref"),
                "version_at_opt_on": ("cand", "ref-on"),
                "opt_at_version_ref": ("ref-on", "ref"),
                "opt_at_version_cand": ("cand", "cand-off")}


def factor_clean(clean: dict[str, Array], models: list[str], conds: list[str]
                 ) -> dict[str, Any]:
    """The 2x2 factor isolation on clean inputs: max and median |logit difference| and
    prediction disagreement of each one-factor change, per model and condition."""
    out: dict[str, Any] = {}
    for pair, (a, b) in FACTOR_PAIRS.items():
        entry: dict[str, Any] = {"cells": [a, b]}
        for name in models:
            for cond in conds:
                x, y = clean[f"{a}/{name}/{cond}"], clean[f"{b}/{name}/{cond}"]
                diff = np.abs(x.astype(np.float64) - y.astype(np.float64))
                entry[f"{name}/{cond}"] = {
                    "max_abs": float(diff.max()), "median_abs": float(np.median(diff)),
                    "disagree": rate(x.argmax(1) != y.argmax(1))}
        entry["max_abs"] = max(v["max_abs"] for k, v in entry.items() if "/" in k)
        entry["disagree"] = sum(v["disagree"]["count"] for k, v in entry.items() if "/" in k)
        out[pair] = entry
    return out


def factor_detection(table: Table, quantile: float = 0.99) -> dict[str, Any]:
    """Beyond the paper: every detector's held-out TPR/FPR when this cell is the candidate."""
    return {d: detection(table, d, thresholds(table, d, quantile)) for d in DETECTORS}


def score_summary(protocol: dict[str, Any], record: dict[str, Any], tables: dict[str, Any],
                  layers: dict[str, Array], clean: dict[str, Array], labels: Array
                  ) -> dict[str, Any]:
    """Every primary result from the tables: ``score/summary.json`` (the stage score
    writes it; a replay judge recomputes it from shipped evidence, ``kit.drift.ties``)."""
    models, quantile = record["codes"]["models"], protocol["calibration"]["quantile"]
    first = record["primary_condition"]
    table = tables[table_name("cand", first)]
    cells = fault_cells(table, record["codes"], quantile)
    recomputed = ranks_from_layers(table, layers, models, quantile)
    return {
        "primary": primary(table, models, quantile),
        "matched_fpr": matched(table, protocol["calibration"]["matched_fpr"]),
        "fault_cells": cells,
        "cells_over_models": pooled_cells(cells, ("position", "family", "level")),
        "cells_by_family": pooled_cells(cells, ("family", "level")),
        "localisation": localisation(table, models),
        "localisation_recomputed_equal": all(
            np.array_equal(recomputed[k], table[f"rank_{k}"]) for k in KINDS),
        "geometry": geometry(table, quantile),
        "accuracy": accuracy(clean, labels, models, first),
        "factor_clean": factor_clean(clean, models, ["orig", first]),
        "factor_detection": {cell: factor_detection(
            tables[table_name(cell, first)], quantile)
            for cell in ("ref", "ref-on", "cand-off", "cand")},
    }
