"""Stage score: per-case evidence tables from the raw infer outputs, and their summary.

Tables (``score/cases/<cell>-<cond>.npz``, columns in ``kit.drift.evidence.CASE_COLUMNS``):
one row per (model, clean or fault, source image) on the rotated condition ``cond`` with
the candidate cell ``cell`` against the clean reference (1.20.1, optimisation off). Clean
rows cover every image of the condition (calibration and held-out), fault rows the
held-out images only. ``cand`` tables carry localisation ranks (normalisers from the
table's own clean calibration rows: 300 on the primary rotation, 150 on the grid);
``ref``, ``ref-on`` and ``cand-off`` tables on the primary rotation complete the factor
isolation over the full fault matrix.

``score/layers.npz``: float32 per-layer localisation scores of the primary table (clean
calibration rows and held-out fault rows), so ranks can be recomputed.
``score/grid-layers.npz``: the same scores of every other localised table, keyed
``<table>/<model>/<kind>`` and ``<table>/<model>/rows``. A replay on another CPU reads them
to judge a rank that moved against the ties of its layer scores (``kit.drift.ties``).
``score/control-layers.npz``: the per-layer scores of every localised table's clean
held-out rows, keyed ``<table>/<model>/<kind>`` and ``<table>/<model>/rows``: each fault
case's unmutated control, which the control null ranks the fault's layer on
(``kit.drift.shipped.ControlNull``). The stage record names neither file, so a run's
``score.json`` keeps the shape of evidence shipped before they existed; the run manifest
and the shipped manifest hash them.
``score/protocol.yaml``: the protocol the run used. ``score/clean-logits.npz``: the
clean model's logits in every cell (accuracy, stability, factor isolation).
``score/summary.json``: every primary result (``kit.drift.analysis``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import yaml

from kit.drift import analysis
from kit.drift.detectors import Scores, score_block
from kit.drift.evidence import (
    CASE_COLUMNS,
    POSITIONS,
    ROLE_CODES,
    describe,
    read_table,
    table_name,
    write_table,
)
from kit.drift.localise import KINDS, layer_scores, normalisers, true_layer_rank
from kit.drift.stages.infer import output_path
from kit.files import canonical_json, load_npz, read_json, sha256, write_atomic, write_npz
from kit.runfolder import Progress, Run
from kit.runtime.worker import meta_path

GRID_LAYERS = "grid-layers.npz"  # under score/; kit.drift.ties reads it
CONTROL_LAYERS = "control-layers.npz"  # under score/; kit.drift.shipped.ControlNull reads it
Array = np.ndarray[Any, Any]
LEVELS = ["low", "high"]


def primary_condition(split: dict[str, Any]) -> str:
    return str(next(name for name, c in split["conditions"].items() if c.get("primary")))


def table_plan(split: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(cell, rotated condition, with localisation) of every table."""
    first = primary_condition(split)
    rotated = [name for name in split["conditions"] if name != "orig"]
    plan = [("cand", cond, True) for cond in rotated]
    return plan + [(cell, first, False) for cell in ("ref", "ref-on", "cand-off")]


class Outputs:
    """Cached reads of the infer stage's outputs."""

    def __init__(self, run: Run) -> None:
        self.run, self.cache = run, {}  # type: ignore[var-annotated]

    def get(self, cell: str, model: str, variant: str, graph: str, cond: str
            ) -> dict[str, Array]:
        key = (cell, model, variant, graph, cond)
        if key not in self.cache:
            if len(self.cache) > 8:
                self.cache.clear()
            self.cache[key] = load_npz(self.run.stage("infer")
                                       / output_path(cell, model, variant, graph, cond))
        return self.cache[key]  # type: ignore[no-any-return]


def _sketches(block: dict[str, Array], n_layers: int, rows: Array | slice) -> list[Array]:
    return [block[f"sketch/{i}"][rows] for i in range(n_layers)]


def _condition_rows(split: dict[str, Any], cond: str) -> tuple[Array, Array, Array, Array]:
    """(positions, role codes, labels, image indices) of the condition's rows."""
    rows_meta = split["rows"]
    positions = np.asarray(split["conditions"][cond]["positions"])
    role = np.array([ROLE_CODES[rows_meta[p]["role"]] for p in positions], np.int8)
    label = np.array([rows_meta[p]["label"] for p in positions], np.int16)
    image = np.array([rows_meta[p]["index"] for p in positions], np.int32)
    return positions, role, label, image


def _variant_layer_scores(outputs: Outputs, model: str, variant: str, cond: str,
                          n_layers: int, positions: Array, sel: Array, ref_o: list[Array],
                          ref_t: list[Array]) -> dict[str, Array]:
    """Float32 per-layer localisation scores of one candidate variant on the selected rows."""
    c_sk_o = outputs.get("cand", model, variant, "sketch", "orig")
    c_sk_t = outputs.get("cand", model, variant, "sketch", cond)
    raw = layer_scores(_sketches(c_sk_o, n_layers, positions[sel]),
                       [x[sel] for x in ref_o],
                       _sketches(c_sk_t, n_layers, sel), [x[sel] for x in ref_t])
    return {k: v.astype(np.float32) for k, v in raw.items()}


def _clean_normalisers(stored: dict[str, Array], role: Array, quantile: float
                       ) -> tuple[dict[str, Array], Array]:
    """Per-kind layer normalisers from the clean calibration rows, and those rows' indices."""
    cal = role == ROLE_CODES["calibration"]
    norms = {k: normalisers(stored[k][cal].astype(np.float64), quantile) for k in KINDS}
    return norms, np.flatnonzero(cal)


def _controls(model: str, stored: dict[str, Array], role: Array, offset: int
              ) -> dict[str, Array]:
    """The clean held-out rows' per-layer scores (the fault cases' unmutated controls),
    keyed ``<model>/<kind>``, with their table rows under ``<model>/rows``."""
    held = np.flatnonzero(role == ROLE_CODES["heldout"])
    return {f"{model}/rows": (offset + held).astype(np.int32),
            **{f"{model}/{k}": stored[k][held] for k in KINDS}}


def _fault_ranks(stored: dict[str, Array], norms: dict[str, Array], layer_index: int, n: int
                 ) -> tuple[dict[str, Array], Array]:
    """Per-kind rank of the faulted layer on each of the n fault rows, and those rows' indices."""
    truth = np.full(n, layer_index)
    ranks = {k: true_layer_rank(stored[k].astype(np.float64), norms[k], truth)
             .astype(np.int16) for k in KINDS}
    return ranks, np.arange(n)


def _fault_codes(fault: dict[str, Any] | None, families: list[str]) -> dict[str, int]:
    """The coded position, family, level and layer of a fault (-1 each for the clean model)."""
    if fault is None:
        return {"position": -1, "family": -1, "level": -1, "layer": -1}
    return {"position": POSITIONS.index(fault["position"]),
            "family": families.index(fault["family"]),
            "level": LEVELS.index(fault["level"]), "layer": fault["layer_index"]}


def _identity_columns(m: int, index: int, coded: dict[str, int], sample: Array, image: Array,
                      role: Array, label: Array) -> dict[str, Array]:
    """The columns naming each row's model, fault and source image."""
    n = len(sample)
    return {
        "model": np.full(n, m, np.int8), "fault": np.full(n, index, np.int16),
        "position": np.full(n, coded["position"], np.int8),
        "family": np.full(n, coded["family"], np.int8),
        "level": np.full(n, coded["level"], np.int8),
        "layer": np.full(n, coded["layer"], np.int16),
        "sample": sample.astype(np.int16), "image": image, "role": role, "label": label}


def _score_columns(s: Scores, r_o: Array, r_t: Array, c_o: Array, ranks: dict[str, Array]
                   ) -> dict[str, Array]:
    """The columns of each row's detector scores, top-1 classes and localisation ranks."""
    return {
        "e_o_norm": s.e_o_norm, "e_t_norm": s.e_t_norm, "metamorphic": s.metamorphic,
        "mixed": s.mixed, "maximum": s.maximum, "cosine": s.cosine, "ratio": s.ratio,
        "ref_top1_o": r_o.argmax(1).astype(np.int16),
        "ref_top1_t": r_t.argmax(1).astype(np.int16),
        "cand_top1_o": c_o.argmax(1).astype(np.int16),
        "stable": r_o.argmax(1) == r_t.argmax(1),
        **{f"rank_{k}": ranks[k] for k in KINDS}}


def build_table(protocol: dict[str, Any], run: Run, outputs: Outputs, cell: str, cond: str,
                localise: bool) -> tuple[dict[str, Array], dict[str, Array], dict[str, Array]]:
    """The case table of one (cell, condition) and, with localisation, its layer scores
    (clean calibration and fault rows) and its controls' (clean held-out rows)."""
    split, fetched, faults = run.record("split"), run.record("fetch"), run.record("fault")
    positions, role, label, image = _condition_rows(split, cond)
    tol = protocol["detectors"]["mixed_tolerance"]
    quantile = protocol["calibration"]["quantile"]
    families = protocol["faults"]["families"]
    columns: dict[str, list[Array]] = {name: [] for name in CASE_COLUMNS}
    layers: dict[str, Array] = {}
    controls: dict[str, Array] = {}
    offset = 0
    for m, model in enumerate(protocol["models"]):
        n_layers = int(fetched["models"][model]["sketch_outputs"])
        r_o = outputs.get("ref", model, "clean", "plain", "orig")["logits"][positions]
        r_t = outputs.get("ref", model, "clean", "plain", cond)["logits"]
        if localise:
            ref_o = _sketches(outputs.get("ref", model, "clean", "sketch", "orig"), n_layers,
                              positions)
            ref_t = _sketches(outputs.get("ref", model, "clean", "sketch", cond), n_layers,
                              slice(None))
        variants = [(-1, None)] + [(i, f) for i, f in enumerate(faults["faults"])
                                   if f["model"] == model]
        norms: dict[str, Array] = {}
        kept_layers: dict[str, list[Array]] = {k: [] for k in KINDS}
        kept_rows: list[Array] = []
        for index, fault in variants:
            variant = "clean" if fault is None else fault["id"]
            sel = np.ones(len(positions), bool) if fault is None else \
                role == ROLE_CODES["heldout"]
            c_o = outputs.get(cell, model, variant, "plain", "orig")["logits"][positions][sel]
            c_t = outputs.get(cell, model, variant, "plain", cond)["logits"][sel]
            s = score_block(c_o, r_o[sel], c_t, r_t[sel], tol["atol"], tol["rtol"])
            n = int(sel.sum())
            ranks = {k: np.zeros(n, np.int16) for k in KINDS}
            if localise:
                stored = _variant_layer_scores(outputs, model, variant, cond, n_layers,
                                               positions, sel, ref_o, ref_t)
                if fault is None:
                    norms, keep = _clean_normalisers(stored, role[sel], quantile)
                    controls.update(_controls(model, stored, role[sel], offset))
                else:
                    ranks, keep = _fault_ranks(stored, norms, fault["layer_index"], n)
                for k in KINDS:
                    kept_layers[k].append(stored[k][keep])
                kept_rows.append(offset + keep)
            block = {**_identity_columns(m, index, _fault_codes(fault, families),
                                         positions[sel], image[sel], role[sel], label[sel]),
                     **_score_columns(s, r_o[sel], r_t[sel], c_o, ranks)}
            for name, values in block.items():
                columns[name].append(np.asarray(values).astype(CASE_COLUMNS[name]))
            offset += n
        if localise:
            layers[f"{model}/rows"] = np.concatenate(kept_rows).astype(np.int32)
            layers.update({f"{model}/{k}": np.concatenate(kept_layers[k]) for k in KINDS})
    return {name: np.concatenate(parts) for name, parts in columns.items()}, layers, controls


def clean_logits(protocol: dict[str, Any], run: Run, outputs: Outputs) -> dict[str, Array]:
    """The clean model's logits: every cell on orig and the primary rotation, and the
    reference on every condition."""
    split = run.record("split")
    first = primary_condition(split)
    found = {}
    for model in protocol["models"]:
        for cell in ("ref", "ref-on", "cand", "cand-off"):
            conds = list(split["conditions"]) if cell in ("ref", "cand") else ["orig", first]
            for cond in conds:
                found[f"{cell}/{model}/{cond}"] = outputs.get(cell, model, "clean", "plain",
                                                              cond)["logits"]
    return found


def runtimes_used(run: Run, protocol: dict[str, Any]) -> dict[str, Any]:
    """Per runtime role, the versions and session options its worker recorded."""
    found = {}
    for role, cell in (("reference", "ref"), ("candidate", "cand")):
        output = run.stage("infer") / output_path(cell, protocol["models"][0], "clean", "plain",
                                                  "orig")
        meta = read_json(meta_path(output), f"delete {run.stage('infer')} and rerun the "
                         f"infer stage (python -m kit stage infer --run {run.root})")
        found[role] = {"onnxruntime": meta["onnxruntime"], "numpy": meta["numpy"],
                       "session_options": meta["session_options"]}
    return found


def codes(protocol: dict[str, Any]) -> dict[str, list[str]]:
    return {"models": list(protocol["models"]), "positions": list(POSITIONS),
            "families": list(protocol["faults"]["families"]), "levels": LEVELS,
            "roles": list(ROLE_CODES)}


def load_tables(run: Run, record: dict[str, Any]) -> dict[str, dict[str, Array]]:
    return {name: read_table(run.listed("score", d["path"], f"tables.{name}.path"), d)
            for name, d in record["tables"].items()}


def run_score(protocol: dict[str, Any], run: Run) -> dict[str, Any]:
    """Build every table, the layer scores, the clean logits and the summary."""
    split = run.record("split")
    out = run.stage("score")
    outputs = Outputs(run)
    plan = table_plan(split)
    progress = Progress("score: tables", len(plan))
    record: dict[str, Any] = {"primary_condition": primary_condition(split),
                              "codes": codes(protocol), "tables": {}}
    layers: dict[str, Array] = {}
    grid: dict[str, Array] = {}
    controls: dict[str, Array] = {}
    for cell, cond, localise in plan:
        columns, found, held = build_table(protocol, run, outputs, cell, cond, localise)
        path = out / "cases" / f"{table_name(cell, cond)}.npz"
        write_table(path, columns, CASE_COLUMNS)
        record["tables"][table_name(cell, cond)] = {
            **describe(path, run.root, columns), "cell": cell, "condition": cond,
            "localisation": localise, "reduced": split["conditions"][cond]["rows"] != "all"}
        if cond == record["primary_condition"] and localise:
            layers = found
        elif localise:
            grid.update({f"{table_name(cell, cond)}/{k}": v for k, v in found.items()})
        controls.update({f"{table_name(cell, cond)}/{k}": v for k, v in held.items()})
        progress.step(table_name(cell, cond))
    write_atomic(out / "protocol.yaml", yaml.safe_dump(protocol, sort_keys=True).encode())
    write_npz(out / "layers.npz", layers)
    write_npz(out / GRID_LAYERS, grid)
    write_npz(out / CONTROL_LAYERS, controls)
    clean = clean_logits(protocol, run, outputs)
    write_npz(out / "clean-logits.npz", clean)
    labels = np.array([row["label"] for row in split["rows"]], np.int64)
    record["layers"] = {"path": "score/layers.npz", "sha256": sha256(out / "layers.npz")}
    record["clean_logits"] = {"path": "score/clean-logits.npz",
                              "sha256": sha256(out / "clean-logits.npz")}
    record["labels"] = labels.tolist()
    record["runtimes"] = runtimes_used(run, protocol)
    tables = load_tables(run, record)
    summary = analysis.score_summary(protocol, record, tables, layers, clean, labels)
    write_atomic(out / "summary.json", canonical_json(summary))
    record["summary"] = {"path": "score/summary.json",
                         "sha256": sha256(out / "summary.json")}
    run.write_record("score", record)
    return record
