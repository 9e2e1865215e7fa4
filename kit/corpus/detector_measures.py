"""The detector study's measures of one host (a corpus case in one digits model), computed
from the host's evidence arrays alone (``detectors/evidence/<case>/<model>.npz``), so that the
run and verify compute them with one definition. Imports nothing of the runtime layer.

Evidence arrays (float32 logits as the worker wrote them, rows split by role)::

    logits/<cell>/<cond>/<role>   cell: reference, clean, positive; cond: orig, rotated;
                                  role: calibration, heldout
    control/<release>/<cond>      the host model without the case's node, every image, at
                                  enable_all; release: affected, fixed
    polygraphy/<cell>             per held-out image, Polygraphy's default check failed
                                  (clean, positive; recorded by the run, run again by
                                  verify --deep)
    layers/<cell>/<kind>          raw localisation scores (kit/drift/localise.py), float32:
                                  clean on the calibration images, positive on the held-out
    labels                        the held-out images' labels
    truth                         (1,) the index of the case's sketch among the layers

Parameters (``Params``) come from the committed protocols.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kit.drift.detectors import DETECTORS, Scores, score_block
from kit.drift.drift_measures import Calibration, calibrate, replicate_rates
from kit.drift.localise import KINDS, normalisers, summary, true_layer_rank
from kit.stats import percentile_interval

Array = np.ndarray[Any, Any]
CELLS = ("reference", "clean", "positive")
CONDS = ("orig", "rotated")
ROLES = ("calibration", "heldout")


@dataclass(frozen=True)
class Params:
    """The protocol's numbers the measures use."""

    quantile: float          # the paper's calibration rule (drift protocol)
    fpr: float               # the matched rule's false-alarm rate
    replicates: int
    seed: int
    interval: float
    atol: float
    rtol: float


def params(protocol: dict[str, Any], drift: dict[str, Any]) -> Params:
    boot = protocol["bootstrap"]
    tol = drift["detectors"]["mixed_tolerance"]
    return Params(quantile=float(drift["calibration"]["quantile"]),
                  fpr=round(1.0 - float(drift["calibration"]["quantile"]), 12),
                  replicates=int(boot["nested_replicates"]), seed=int(boot["seed"]),
                  interval=float(boot["interval"]), atol=float(tol["atol"]),
                  rtol=float(tol["rtol"]))


def cell_scores(arrays: dict[str, Array], cell: str, role: str, p: Params) -> Scores:
    """The drift study's detector scores of ``cell`` against the reference on ``role``."""
    def get(c: str, cond: str) -> Array:
        return arrays[f"logits/{c}/{cond}/{role}"]

    return score_block(get(cell, "orig"), get("reference", "orig"), get(cell, "rotated"),
                       get("reference", "rotated"), p.atol, p.rtol)


def _rates(values: Array, calibration: Calibration, name: str, p: Params) -> dict[str, Any]:
    alarms = values > calibration.thresholds[name]
    return {"rate": float(alarms.mean()), "alarms": int(alarms.sum()), "n": len(values),
            "interval": percentile_interval(replicate_rates(values, calibration, name),
                                            p.interval)}


def detection(arrays: dict[str, Array], p: Params) -> dict[str, Any]:
    """TPR (positive) and realised FPR (clean) of every detector at the matched threshold,
    with paired nested intervals; the paper's rule beside it; Polygraphy's as recorded."""
    calibration_scores = cell_scores(arrays, "clean", "calibration", p)
    held = {cell: cell_scores(arrays, cell, "heldout", p) for cell in ("clean", "positive")}
    n_held = len(held["positive"].direct)
    matched = calibrate(calibration_scores, p.quantile, p.replicates, p.seed, n_held, p.fpr)
    paper = calibrate(calibration_scores, p.quantile, 1, p.seed, n_held)
    out: dict[str, Any] = {}
    for name in DETECTORS:
        out[name] = {
            "threshold": matched.thresholds[name],
            "tpr": _rates(held["positive"].detector(name), matched, name, p),
            "fpr": _rates(held["clean"].detector(name), matched, name, p),
            "margin": _margin(held["positive"].detector(name), matched.thresholds[name]),
            "paper_rule": {"threshold": paper.thresholds[name],
                           "tpr": float((held["positive"].detector(name)
                                         > paper.thresholds[name]).mean()),
                           "fpr": float((held["clean"].detector(name)
                                         > paper.thresholds[name]).mean())}}
    difference = (replicate_rates(held["positive"].direct, matched, "direct")
                  - replicate_rates(held["positive"].metamorphic, matched, "metamorphic"))
    out["direct_minus_metamorphic"] = {
        "value": out["direct"]["tpr"]["rate"] - out["metamorphic"]["tpr"]["rate"],
        "interval": percentile_interval(difference, p.interval)}
    out["polygraphy"] = {cell_rate: _fails(arrays[f"polygraphy/{cell}"], matched, p)
                         for cell_rate, cell in (("tpr", "positive"), ("fpr", "clean"))}
    return out


def _margin(values: Array, limit: float) -> float | None:
    """The smallest positive score over the threshold: how far the weakest positive clears
    the clean calibration (None for a zero threshold, where no ratio exists)."""
    return float(np.min(values)) / limit if limit > 0 else None


def _fails(fails: Array, calibration: Calibration, p: Params) -> dict[str, Any]:
    fails = np.asarray(fails, bool)
    rates = (calibration.held_counts * fails[None, :]).sum(axis=1) / len(fails)
    return {"rate": float(fails.mean()), "alarms": int(fails.sum()), "n": len(fails),
            "interval": percentile_interval(rates, p.interval)}


def localisation(arrays: dict[str, Array], p: Params) -> dict[str, Any]:
    """Top-1, top-3 and MRR of the case's sketch per localiser kind (pessimistic ranks),
    each layer normalised by its threshold on the clean calibration scores."""
    truth = int(arrays["truth"][0])
    out = {}
    for kind in KINDS:
        clean = arrays[f"layers/clean/{kind}"].astype(np.float64)
        positive = arrays[f"layers/positive/{kind}"].astype(np.float64)
        ranks = true_layer_rank(positive, normalisers(clean, p.quantile),
                                np.full(len(positive), truth))
        out[kind] = summary(ranks)
    return out


def host_measures(arrays: dict[str, Array], p: Params) -> dict[str, Any]:
    """Every measure of one host."""
    reference = arrays["logits/reference/orig/heldout"]
    control = max(float(np.abs(arrays[f"control/affected/{c}"].astype(np.float64)
                               - arrays[f"control/fixed/{c}"].astype(np.float64)).max())
                  for c in CONDS)
    positive = arrays["logits/positive/orig/heldout"].astype(np.float64)
    return {"accuracy": float((reference.argmax(1) == arrays["labels"]).mean()),
            "release_control": control,
            "max_abs_logit": float(np.abs(positive - reference.astype(np.float64)).max()),
            "flips": int((positive.argmax(1) != reference.argmax(1)).sum()),
            "detection": detection(arrays, p), "localisation": localisation(arrays, p)}
