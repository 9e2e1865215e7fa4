"""The ``sciml.`` recompute functions of the unified fault catalogue (``unified.json``:
every entry's flags recounted from its trials, labelled precision and recall) and of the
second task (``second_task.json``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kit.errors import KitError, Undefined
from kit.sciml import probes
from kit.sciml.stats import stat_scores, wilson
from kit.values import Value, contradictions


def _unified(ev: Any) -> list[dict[str, Any]]:
    return ev.json("unified.json")["entries"]  # type: ignore[no-any-return]


def _thresholds(ev: Any) -> dict[str, float]:
    """The thresholds the run recorded with the catalogue (``unified.json``)."""
    return ev.json("unified.json")["thresholds"]  # type: ignore[no-any-return]


def _flags(ev: Any, entry: dict[str, Any]) -> dict[str, bool]:
    """An entry's flags recounted: the MGN mutants from their trials in ``mgn_faults.json``,
    the probes from each trial's metrics against the unmutated subject's, at the recorded
    thresholds."""
    family = entry["family"]
    if family == "mgn":
        trials = ev.json("mgn_faults.json")["mutants"][entry["kind"]]["trials"]
        hits = {d: sum(t["detected"][d] for t in trials) for d in probes.DETECTORS[family]}
    else:
        trials, limits = entry["trials"], _thresholds(ev)
        hits = {d: sum(probes.fires(d, t["metrics"][d], t["control"][d],
                                    limits["permutation"], limits["ratio"]) for t in trials)
                for d in probes.DETECTORS[family]}
    return {d: probes.flagged(k, len(trials)) for d, k in hits.items()}


def _labels(ev: Any, entry: dict[str, Any]) -> dict[str, bool] | None:
    if entry["family"] == "mgn":
        return None
    return probes.label(entry["label_metrics"]["probe"], entry["label_metrics"]["reference"],
                        _thresholds(ev)["label_tolerance"])


def unified_size(ev: Any, family: str | None = None) -> Value:
    """Entries of the unified catalogue (of one family: ``mgn``, ``pinn``, ``fno``)."""
    entries = [e for e in _unified(ev) if family is None or e["family"] == family]
    if family == "mgn":
        mutants = ev.json("mgn_faults.json")["mutants"]
        if len(entries) != len(mutants):
            raise KitError(f"{ev.root}/unified.json: {len(entries)} MGN entries, "
                           f"mgn_faults.json has {len(mutants)} mutants")
    return len(entries)


def _confusion(ev: Any, detector: str) -> dict[str, int]:
    labelled = ((entry, _labels(ev, entry)) for entry in _unified(ev))
    return stat_scores((_flags(ev, entry)[detector], labels[detector])
                       for entry, labels in labelled
                       if labels is not None and detector in labels)


def unified_pr(ev: Any, detector: str, field: str) -> Value:
    """Labelled precision or recall of a detector over the probes, recounted from trial
    metrics and label measurements; or one of the counts (``entries``, ``targeted``,
    ``true_positives``, ``false_positives``), both (``precision_recall``) or an interval
    (``wilson_precision``, ``wilson_recall``)."""
    c = _confusion(ev, detector)
    fractions = {"precision": (c["true_positives"], c["true_positives"] + c["false_positives"]),
                 "recall": (c["true_positives"], c["targeted"])}
    if field in c:
        return c[field]

    def share(name: str) -> tuple[int, int]:
        hits, n = fractions[name]
        if n == 0:
            raise Undefined(f"{ev.root}/unified.json: {detector} {name} undefined (n = 0)")
        return hits, n

    if field == "precision_recall":
        return [hits / n for hits, n in (share("precision"), share("recall"))]
    name = field.removeprefix("wilson_")
    if name not in fractions:
        raise KitError(f"unknown unified precision/recall field {field!r}")
    hits, n = share(name)
    return list(wilson(hits, n)) if field.startswith("wilson_") else hits / n


def unified_flagged(ev: Any, detector: str = "any", family: str | None = None) -> Value:
    """Entries flagged by a detector (``any``: by at least one), recounted."""
    count = 0
    for entry in _unified(ev):
        if family is not None and entry["family"] != family:
            continue
        flags = _flags(ev, entry)
        count += any(flags.values()) if detector == "any" else flags.get(detector, False)
    return count


def recount_unified(record: Any, faults: dict[str, Any]) -> list[str]:
    """Every stored field of ``unified.json`` its trials contradict (``unified_again``)."""
    if not isinstance(record, dict) or not isinstance(record.get("entries"), list):
        return ["no 'entries' list"]
    return contradictions(record, unified_again(record, faults), "", "its trials")


def unified_again(record: dict[str, Any], faults: dict[str, Any]) -> dict[str, Any]:
    """The catalogue a record's own trials give: each entry's detections, trial count, flags
    and labels recounted (the MGN mutants' from ``mgn_faults.json``, the probes' from their
    trial metrics and label measurements at the recorded thresholds), then the size,
    families, flag rates, any-detector rate and labelled precision and recall computed
    again from those entries (``probes.unified_catalogue``)."""
    limits = record.get("thresholds", {})
    probes_again = []
    for entry in (e for e in record["entries"] if e.get("family") != "mgn"):
        trials = entry["trials"]
        hits = {d: sum(probes.fires(d, t["metrics"][d], t["control"][d],
                                    limits["permutation"], limits["ratio"]) for t in trials)
                for d in probes.DETECTORS[entry["family"]]}
        probes_again.append({
            **entry, "detections": hits,
            "flagged": {d: probes.flagged(k, len(trials)) for d, k in hits.items()},
            "labels": probes.label(entry["label_metrics"]["probe"],
                                   entry["label_metrics"]["reference"],
                                   limits["label_tolerance"])})
    again = probes.unified_catalogue(faults, [e for e in probes_again if e["family"] == "pinn"],
                                     [e for e in probes_again if e["family"] == "fno"])
    again["thresholds"] = limits
    return again


def second_density_ratio(ev: Any) -> Value:
    m = ev.json("second_task.json")["measured"]
    return float(m["density_max"] / m["density_min"])


def second_permutation_max(ev: Any) -> Value:
    return float(max(ev.json("second_task.json")["permutation_violations"]))


FUNCTIONS: tuple[Callable[..., Value], ...] = (
    unified_size, unified_pr, unified_flagged, second_density_ratio, second_permutation_max)
