"""The named functions that recompute each drift claim from raw per-case evidence.

An evidence folder has the run folder's layout (``fetch/fetch.json``, ``split/split.json``,
``fault/fault.json``, ``score/...``), so a full run folder and the shipped evidence read the
same way. Every function takes the evidence and the claim's arguments and returns a plain
number (rates in percent, differences in percentage points), a pair, or a boolean. They
call ``kit.drift.analysis`` and ``kit.drift.bootstrap`` (the functions the stages use); stored
summaries are never read back as results.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from kit.drift import analysis
from kit.drift import bootstrap as engine
from kit.drift.localise import TOP_K
from kit.drift.shipped import NO_RANKS, Evidence
from kit.errors import KitError, RecountError
from kit.files import sha256
from kit.values import Value, constant, recorded

Array = np.ndarray[Any, Any]


def _pct(x: float) -> float:
    return 100.0 * x


def protocol_value(ev: Evidence, path: str, length: bool = False) -> Value:
    """A protocol setting (slash path); its length with ``length``."""
    node: Any = ev.protocol
    for part in path.split("/"):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return len(node) if length else node


def runtime_version(ev: Evidence, role: str) -> Value:
    """The onnxruntime version that ran ``role`` (from the workers' own records)."""
    return str(ev.record["runtimes"][role]["onnxruntime"])


def runtime_configurations(ev: Evidence) -> Value:
    """Distinct (onnxruntime version, graph optimisation) pairs the workers recorded."""
    return len({(r["onnxruntime"], r["session_options"]["graph_optimization"])
                for r in ev.record["runtimes"].values()})


def conv_layers(ev: Evidence, model: str) -> Value:
    """The instrumented convolutions of ``model``: the layer sketches its per-layer scores
    hold (``score/layers.npz``), which the fetch record's count must equal."""
    recorded = int(ev.json("fetch/fetch.json")["models"][model]["sketch_outputs"])
    counted = int(ev.layers[f"{model}/direct"].shape[1])
    if recorded != counted:
        raise RecountError(f"{ev.root / 'fetch/fetch.json'}: models/{model}/sketch_outputs is "
                       f"{recorded}, but score/layers.npz scores {counted} layers")
    return counted


def sample_count(ev: Evidence, role: str | None = None) -> Value:
    rows = ev.json("split/split.json")["rows"]
    return sum(1 for r in rows if role is None or r["role"] == role)


def sample_overlap(ev: Evidence) -> Value:
    rows = ev.json("split/split.json")["rows"]
    cal = {r["index"] for r in rows if r["role"] == "calibration"}
    return len(cal & {r["index"] for r in rows if r["role"] == "heldout"})


def fault_count(ev: Evidence, axis: str | None = None) -> Value:
    faults = ev.json("fault/fault.json")["faults"]
    return len(faults) if axis is None else len({f[axis] for f in faults})


def case_count(ev: Evidence, kind: str) -> Value:
    t = ev.table()
    held = t["role"] == analysis.HELDOUT
    return int((held & ((t["fault"] != analysis.CLEAN) if kind == "fault"
                        else (t["fault"] == analysis.CLEAN))).sum())


def rate(ev: Evidence, detector: str, what: str = "tpr", model: str | None = None,
         count: bool = False) -> Value:
    """Held-out TPR or FPR of a detector (percent, or the count), pooled or one model."""
    entry = ev.rates[detector] if model is None else ev.rates[detector]["per_model"][model]
    return int(entry[what]["count"]) if count else _pct(entry[what]["rate"])


def rate_difference(ev: Evidence, a: str, b: str, what: str = "tpr",
                    model: str | None = None) -> Value:
    return float(rate(ev, a, what, model)) - float(rate(ev, b, what, model))  # type: ignore[arg-type]


def auc(ev: Evidence, detector: str, which: str) -> Value:
    return float(ev.primary[detector][which])


def every_model(ev: Evidence, quantity: str) -> Value:
    """Direct above metamorphic on every model (``tpr`` or localisation ``top1``)."""
    if quantity == "tpr":
        return all(rate(ev, "direct", "tpr", m) > rate(ev, "metamorphic", "tpr", m)  # type: ignore[operator]
                   for m in ev.models)
    loc = ev.localisation
    return all(loc["direct"]["per_model"][m]["top1"] > loc["metamorphic"]["per_model"][m]["top1"]
               for m in ev.models)


def _cells(ev: Evidence) -> list[dict[str, Any]]:
    codes = ev.record["codes"]
    return ev.memo("cells", lambda: analysis.pooled_cells(  # type: ignore[no-any-return]
        analysis.fault_cells(ev.table(), codes, ev.quantile), ("position", "family", "level")))


def cell_rate(ev: Evidence, detector: str, position: str, family: str, level: str) -> Value:
    """TPR (percent) of one fault cell pooled over models."""
    for cell in _cells(ev):
        if (cell["position"], cell["family"], cell["level"]) == (position, family, level):
            return _pct(cell[detector]["rate"])
    raise KitError(f"no fault cell {position}/{family}/{level} in the evidence")


def cell_gap(ev: Evidence, position: str, family: str, level: str) -> Value:
    return float(cell_rate(ev, "direct", position, family, level)) - float(  # type: ignore[arg-type]
        cell_rate(ev, "metamorphic", position, family, level))  # type: ignore[arg-type]


def saturated(ev: Evidence, cells: list[list[str]]) -> Value:
    """Both principal detectors at 100% in every listed (family, level) at every layer."""
    return all(cell_rate(ev, d, p, fam, lv) == 100.0 for d in ("metamorphic", "direct")
               for fam, lv in cells for p in ev.record["codes"]["positions"])


def localisation(ev: Evidence, kind: str, stat: str, model: str | None = None) -> Value:
    entry = ev.localisation[kind] if model is None else ev.localisation[kind]["per_model"][model]
    return float(entry[stat]) if stat == "mrr" else _pct(entry[stat])


def localisation_difference(ev: Evidence, a: str, b: str, stat: str = "top1") -> Value:
    return float(localisation(ev, a, stat)) - float(localisation(ev, b, stat))  # type: ignore[arg-type]


def localisation_ratio(ev: Evidence, a: str, b: str, stat: str = "top1") -> Value:
    return float(localisation(ev, a, stat)) / float(localisation(ev, b, stat))  # type: ignore[arg-type]


def grid(ev: Evidence, condition: str, field: str) -> Value:
    """One Table 4 cell; ``condition`` is a grid key (``primary``, ``rot5-bilinear``...)."""
    row = ev.sensitivity[condition]
    if field == "difference":
        return float(row["difference_pts"])
    if field == "stability":
        return _pct(row["reference_stability"]["rate"])
    if field.startswith("top1/"):
        if "top1" not in row:
            raise KitError(NO_RANKS)  # a null without its controls' layer scores
        return _pct(row["top1"][field.split("/")[1]])
    detector, what = field.split("/")
    return _pct(row[detector][what]["rate"])


def _grid_conditions(ev: Evidence) -> list[str]:
    return [k for k, row in ev.sensitivity.items()
            if row["split"] == "reduced" and k != "primary-reduced"]


def grid_all_negative(ev: Evidence) -> Value:
    return all(float(grid(ev, c, "difference")) < 0 for c in _grid_conditions(ev))  # type: ignore[arg-type]


def grid_range(ev: Evidence, field: str, end: str | None = None) -> Value:
    """[min, max] of a quantity over the reduced-split conditions (or one ``end``)."""
    values = [float(grid(ev, c, field)) for c in _grid_conditions(ev)]  # type: ignore[arg-type]
    found = {"low": min(values), "high": max(values)}
    if end is not None:
        if end not in found:
            raise KitError(f"grid_range: end must be 'low' or 'high', not {end!r}")
        return found[end]
    return [found["low"], found["high"]]


def geometry(ev: Evidence, field: str) -> Value:
    """Spearman rho, discordant mean cosines, or a stable/unstable subgroup quantity."""
    geo = ev.memo("geometry", lambda: analysis.geometry(ev.table(), ev.quantile))
    if field in ("spearman_rho", "cosine_difference"):
        return float(geo[field])
    group, _, what = field.partition("/")
    if what == "mean_cosine":
        return float(geo[group]["mean_cosine"])
    if what == "n":
        return int(geo[group]["n"])
    return _pct(geo[group][what]["rate"])


def accuracy(ev: Evidence, model: str | None, which: str) -> Value:
    labels = np.asarray(ev.record["labels"])
    found = ev.memo("accuracy", lambda: analysis.accuracy(
        ev.clean, labels, ev.models, ev.record["primary_condition"]))
    if model is None:
        return _pct(found[f"mean_{which}"])
    return _pct(found[model][which]["rate"])


def factor(ev: Evidence, factor_name: str, stat: str) -> Value:
    """``version`` or ``opt``: max |logit difference| over both levels of the other factor,
    every model and both conditions, or the prediction disagreement count."""
    found = ev.memo("factor", lambda: analysis.factor_clean(
        ev.clean, ev.models, ["orig", ev.record["primary_condition"]]))
    pairs = [v for k, v in found.items() if k.startswith(factor_name + "_")]
    if stat == "max_abs":
        return max(float(p["max_abs"]) for p in pairs)
    if stat == "log10_max_abs":
        worst = max(float(p["max_abs"]) for p in pairs)
        return math.floor(math.log10(worst)) if worst > 0 else float("-inf")
    return sum(int(p["disagree"]) for p in pairs)


def boot(ev: Evidence, which: str, quantity: str, stat: str) -> Value:
    """A bootstrap summary recomputed from the table with the protocol's seeds. Rates in
    percent, differences in points; ``interval`` is the 2.5/97.5 percentile pair."""
    reps = ev.bootstrap(which)
    values = reps[quantity] * (100 if quantity.endswith(("/tpr", "/fpr"))
                               and "-" not in quantity else 1)
    summary = engine.describe(values)
    if stat == "interval":
        return [summary["p2_5"], summary["p97_5"]]
    if stat == "extremes":
        return [summary["min"], summary["max"]]
    if stat == "width":
        return summary["p97_5"] - summary["p2_5"]
    return float(summary[stat])


def boot_widening(ev: Evidence) -> Value:
    """Nested over fixed width of the metamorphic-minus-direct TPR interval."""
    q = "metamorphic-direct/tpr"
    return float(boot(ev, "nested", q, "width")) / float(boot(ev, "fixed", q, "width"))  # type: ignore[arg-type]


def boot_separated(ev: Evidence) -> Value:
    """The nested direct TPR interval lies wholly above the metamorphic one."""
    direct = boot(ev, "nested", "direct/tpr", "interval")
    meta = boot(ev, "nested", "metamorphic/tpr", "interval")
    return bool(direct[0] > meta[1])  # type: ignore[index,operator]


def decision(ev: Evidence, which: str = "nested") -> Value:
    """The frozen rule's outcome: metamorphic superior to both baselines (Holm)."""
    reps = ev.bootstrap(which)
    return bool(engine.holm({b: reps[f"metamorphic-{b}/tpr"] for b in engine.DECISION_BASELINES},
                            float(ev.protocol["bootstrap"]["alpha"]))["superior"])


def replay(ev: Evidence, what: str = "identical") -> Value:
    """From ``replay.json`` (written by ``verify --replay``): whether the replayed run's
    hashed outputs equal the first run's, and whether both manifests checked out."""
    found = ev.json("replay.json")
    first = ev.json("run-manifest.json")["files"]
    if found["first_manifest_sha256"] != sha256(ev.root / "run-manifest.json"):
        raise KitError(f"{ev.root}/replay.json: it compared another first run")
    if what == "identical":
        return bool(found["identical"] and found["compared"] == len(first))
    return bool(found["first_manifest_ok"] and found["replay_manifest_ok"])


def width_multiplier(ev: Evidence, model: str = "mobilenetv2_x0_5") -> Value:
    """The width multiplier in a model name such as ``mobilenetv2_x0_5``."""
    if model not in ev.models:
        raise KitError(f"{ev.root}: no model {model!r} in the evidence")
    return float(model.rsplit("_x", 1)[1].replace("_", "."))


def reduced_split(ev: Evidence) -> Value:
    reduced = ev.protocol["sample"]["reduced"]
    return [int(reduced["calibration"]), int(reduced["heldout"])]


def top_k(ev: Evidence) -> Value:
    """The localisation cut-off recorded besides top-1 (``kit.drift.localise.TOP_K``)."""
    del ev
    return TOP_K


def nominal_fpr(ev: Evidence) -> Value:
    return 100.0 * (1.0 - ev.quantile)


def saturated_recorded(ev: Evidence, cells: list[list[str]]) -> Value:
    """``saturated`` read from the per-cell rates the score stage recorded."""
    wanted = {tuple(c) for c in cells}
    rows = [r for r in ev.json("score/summary.json")["fault_cells"]
            if (r["family"], r["level"]) in wanted]
    if not rows:
        raise KitError(f"{ev.root}/score/summary.json: no fault cells {sorted(wanted)}")
    return all(r[d]["count"] == r[d]["n"] for r in rows for d in ("metamorphic", "direct"))


def factor_cells(ev: Evidence) -> Value:
    """Runtime cells (version x optimisation) the evidence holds tables for."""
    return len({d["cell"] for d in ev.record["tables"].values()})


def decision_comparisons(ev: Evidence) -> Value:
    del ev
    return len(engine.DECISION_BASELINES)


RECOMPUTE: dict[str, Callable[..., Value]] = {
    f"drift.{fn.__name__}": fn for fn in (
        protocol_value, runtime_version, runtime_configurations, conv_layers, sample_count,
        sample_overlap,
        fault_count, case_count, rate, rate_difference, auc, every_model, cell_rate, cell_gap,
        saturated, localisation, localisation_difference, localisation_ratio, grid,
        grid_all_negative, grid_range, geometry, accuracy, factor, boot, boot_widening,
        boot_separated, decision, replay, constant, width_multiplier, reduced_split,
        top_k, nominal_fpr, factor_cells, decision_comparisons, recorded, saturated_recorded)}
