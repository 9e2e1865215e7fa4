"""The real-drift sweep (``kit/protocols/realdrift.yaml``): the clean models under every
onnxruntime release x graph optimisation level x intra-op threads, against one reference
cell (1.20.1, disable_all, 1 thread). ``nox -s sweep`` / ``python -m kit sweep``.

Run folder (default ``runs/sweep-digits``), resumable like the drift stages:

    fetch/, split/        the drift study's stages (the same bytes as a drift run)
    sweep/models/         each model exported with BatchNormalization kept (+ sketch graph),
                          from the training weights fetch's record names (the cache's, or
                          the shipped ones under claims/drift/weights/digits); the folded
                          export is fetch's
    sweep/levels.json     what each release's own worker says it offers
    sweep/cells/<release>/<level>-t<threads>/<model>.<export>/<graph>-<cond>.npz
                          one job each (+ ``.meta.json``), skipped on a rerun when complete
    sweep/cells.json      the per-case evidence: one row per cell, model and export
    sweep/sweep.json      the stage record

Before any job: every release is known and locked, its environment answers, and every
level asked for is one it offers; otherwise a ``kit: error:`` naming it. Job batches (one
per release, model and export) go to ``kit.runtime.scale`` (Dask, or serial).
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kit.drift.drift_measures import (
    Calibration,
    Logits,
    alarm_rates,
    calibrate,
    drift_measures,
    max_abs_difference,
    outputs_digest,
    scores,
)
from kit.drift.export import export_onnx
from kit.drift.instrument import instrument
from kit.drift.polygraphy_check import fault_matrix, polygraphy_fails, version
from kit.drift.protocol import PROTOCOL, load_protocol
from kit.drift.stages.fetch import training_weights
from kit.drift.stages.infer import is_done
from kit.drift.stages.pipeline import digits_images
from kit.drift.sweep_report import write_report
from kit.errors import ConfigError, KitError
from kit.files import canonical_json, load_npz, read_json, read_yaml, sha256, write_atomic
from kit.paths import ROOT
from kit.procs import stop_children
from kit.runfolder import CPU_TIMES, TRAINING_CACHE, Run, cpu_seconds, record_timing, say
from kit.runlock import hold
from kit.runtime.backends import describe_runtime
from kit.runtime.runtimes import Runtime, levels_offered, release_runtime
from kit.runtime.scale import Batch, run_batches

REALDRIFT = ROOT / "kit" / "protocols" / "realdrift.yaml"
GRAPHS = ("plain", "sketch")
Cell = tuple[str, str, int]  # release, level, intra-op threads
MAX_THREADS = 256  # onnxruntime's intra-op pool on any machine the kit targets


def load_sweep_protocol(path: Path = REALDRIFT) -> dict[str, Any]:
    """The sweep protocol, checked for what the sweep reads."""
    protocol = read_yaml(path)
    needed = ("releases", "threads", "reference_cell", "pair", "exports", "seeds")
    missing = [key for key in needed if not isinstance(protocol, dict) or key not in protocol]
    if missing:
        raise ConfigError(f"{path}: the sweep protocol lacks {missing}")
    return dict(protocol)


def cell_of(entry: dict[str, Any]) -> Cell:
    return (str(entry["release"]), str(entry["level"]), int(entry["threads"]))


def cell_name(cell: Cell) -> str:
    return f"{cell[0]}/{cell[1]}-t{cell[2]}"


def choose_releases(protocol: dict[str, Any], asked: list[str] | None) -> list[str]:
    """The releases to sweep (all of the protocol's by default); the reference and the
    pair's candidate must be among them."""
    releases = [str(r) for r in protocol["releases"]]
    chosen = releases if not asked else list(dict.fromkeys(asked))
    unknown = [r for r in chosen if r not in releases]
    if unknown:
        raise ConfigError(f"{REALDRIFT}: release(s) {', '.join(unknown)} not in the sweep's "
                          f"releases ({', '.join(releases)})")
    needed = {cell_of(protocol["reference_cell"])[0], cell_of(protocol["pair"]["candidate"])[0]}
    if not needed <= set(chosen):
        raise ConfigError(f"the sweep needs the reference and pair releases "
                          f"{', '.join(sorted(needed))} among --releases")
    return sorted(chosen, key=lambda r: tuple(int(p) for p in r.split(".")))


def release_levels(runtimes: dict[str, Runtime], asked: list[str] | None,
                   backend: str | None) -> dict[str, dict[str, Any]]:
    """Each release's worker description and the levels swept on it; a level asked for
    that a release lacks is a ConfigError before any job. The workers answer (and missing
    environments are built) up to one per core at a time; stopped (Ctrl-C, SIGTERM), the
    builds and workers the threads wait on are killed before they are waited for."""
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        try:
            answers = list(pool.map(lambda runtime: describe_runtime(runtime, backend),
                                    runtimes.values()))
        except KeyboardInterrupt:
            stop_children()
            raise
    described = {}
    for (release, runtime), said in zip(runtimes.items(), answers, strict=True):
        offered = list(said["levels"])
        levels = offered if not asked else list(dict.fromkeys(asked))
        lacking = [level for level in levels if level not in offered]
        if lacking:
            raise ConfigError(f"onnxruntime {release} ({runtime.lock.name}) offers no graph "
                              f"optimisation level {', '.join(lacking)}; it offers "
                              f"{', '.join(offered)}")
        described[release] = {**said, "runtime": runtime.name, "swept": levels}
    return described


def check_levels(chosen: list[str], asked: list[str] | None) -> None:
    """A level asked for that a chosen release lacks, by ``releases.toml``'s [levels]
    (``levels_offered``): a ConfigError before any model is trained or environment built
    (``release_levels`` then checks each worker's own word)."""
    for release in chosen:
        offered = levels_offered(release)
        lacking = [level for level in dict.fromkeys(asked or []) if level not in offered]
        if lacking:
            raise ConfigError(f"onnxruntime {release} offers no graph optimisation level "
                              f"{', '.join(lacking)}; it offers {', '.join(offered)} "
                              "(kit/runtime/releases.toml)")


def thread_counts(protocol: dict[str, Any], threads: list[int] | None) -> list[int]:
    """The intra-op thread counts swept: each a positive integer no larger than
    ``MAX_THREADS`` (a ConfigError naming the others)."""
    counts = sorted({int(t) for t in (threads or protocol["threads"])})
    wrong = [t for t in counts if not 1 <= t <= MAX_THREADS]
    if wrong:
        raise ConfigError(f"intra-op thread counts must be 1 to {MAX_THREADS}, not "
                          f"{', '.join(map(str, wrong))}")
    return counts


def cells(protocol: dict[str, Any], levels: dict[str, dict[str, Any]],
          threads: list[int] | None) -> list[Cell]:
    """Every cell of the sweep, the reference and the pair's candidate included."""
    counts = thread_counts(protocol, threads)
    found = [(release, level, n) for release, info in levels.items()
             for level in info["swept"] for n in counts]
    for entry in (protocol["reference_cell"], protocol["pair"]["candidate"]):
        if cell_of(entry) not in found:
            raise ConfigError(f"the sweep needs the cell {cell_name(cell_of(entry))}; "
                              "keep its level and thread count")
    return found


def export_unfolded(drift: dict[str, Any], run: Run) -> dict[str, dict[str, dict[str, str]]]:
    """Each model's graphs per export: folded (fetch's) and BN kept (exported here from
    the same weights, checked against fetch's record)."""
    from kit.drift.models import load_checkpoint

    fetched = run.record("fetch")
    if fetched["substrate"] != "digits":
        raise KitError(f"{run.root}: the sweep runs on the digits substrate, whose weights "
                       "the kit trains; this folder was fetched for "
                       f"{fetched['substrate']!r}")
    keys = read_json(run.root / TRAINING_CACHE, f"rerun fetch in {run.root}")["models"]
    graphs = {}
    for name in drift["models"]:
        entry = fetched["models"][name]
        weights = training_weights(run, name, keys.get(name, {}), entry["weights_sha256"])
        plain = run.stage("sweep") / "models" / f"{name}.unfolded.onnx"
        if not plain.is_file():
            model = load_checkpoint(name, weights, fetched["classes"])
            export_onnx(model, plain, (1, 3, 32, 32), batchnorm="kept",
                        opset=drift["export"]["opset"])
        sketch = plain.with_name(f"{name}.unfolded.sketch.onnx")
        if not sketch.is_file():
            instrument(plain, sketch, drift["instrumentation"]["max_values"])
        graphs[name] = {
            "folded": {"plain": entry["onnx"], "sketch": entry["sketch_onnx"]},
            "unfolded": {"plain": plain.relative_to(run.root).as_posix(),
                         "sketch": sketch.relative_to(run.root).as_posix()}}
    return graphs


def output_path(cell: Cell, model: str, export: str, graph: str, cond: str) -> str:
    """Where one sweep job lands, relative to ``<run>/sweep``."""
    return f"cells/{cell_name(cell)}/{model}.{export}/{graph}-{cond}.npz"


def plan(all_cells: list[Cell], graphs: dict[str, dict[str, dict[str, str]]],
         conds: list[str]) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """Every job, by (release, model, export): one worker process each."""
    batches: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for cell, (model, exports) in itertools.product(all_cells, graphs.items()):
        for export, paths in exports.items():
            for graph, cond in itertools.product(GRAPHS, conds):
                out = output_path(cell, model, export, graph, cond)
                batches.setdefault((cell[0], model, export), []).append({
                    "id": out.removesuffix(".npz"), "model": paths[graph],
                    "inputs": f"split/inputs/{cond}.npz", "graph_optimization": cell[1],
                    "intra_op_threads": cell[2], "output": out})
    return batches


def measure(run: Run, protocol: dict[str, Any], drift: dict[str, Any], all_cells: list[Cell],
            graphs: dict[str, Any], conds: list[str]) -> dict[str, Any]:
    """The per-case evidence: every cell's measures against the reference cell, one
    process per model and export (up to one per core); rows in model, export, cell order."""
    split = run.record("split")
    roles = [row["role"] for row in split["rows"]]
    held = [i for i, role in enumerate(roles) if role == "heldout"]
    cal = [i for i, role in enumerate(roles) if role == "calibration"]
    blocks = [(model, export) for model, exports in graphs.items() for export in exports]
    args = (run, protocol, drift, all_cells, conds, held, cal)
    workers = min(len(blocks), os.cpu_count() or 1)
    if workers == 1:
        found = [_measure_block(*args, model, export) for model, export in blocks]
    else:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            found = list(pool.map(_measure_block, *zip(*[(*args, m, e) for m, e in blocks],
                                                          strict=True)))
    reference = cell_of(protocol["reference_cell"])
    candidate = cell_of(protocol["pair"]["candidate"])
    return {"polygraphy": version(), "reference_cell": cell_name(reference),
            "pair": [cell_name(reference), cell_name(candidate)], "conditions": conds,
            "heldout_images": len(held), "calibration_images": len(cal),
            "thresholds": {f"{m}.{e}": thresholds for (m, e), (_, thresholds)
                           in zip(blocks, found, strict=True)},
            "rows": [row for rows, _ in found for row in rows]}


def _measure_block(run: Run, protocol: dict[str, Any], drift: dict[str, Any],
                   all_cells: list[Cell], conds: list[str], held: list[int], cal: list[int],
                   model: str, export: str) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """One model and export: the pair's thresholds, then every cell's row."""
    source, rotated = conds
    reference = cell_of(protocol["reference_cell"])
    candidate = cell_of(protocol["pair"]["candidate"])
    boot = drift["bootstrap"]

    def load(cell: Cell, rows_of: list[int]) -> Logits:
        return _logits(run, cell, model, export, conds, rows_of)

    pair = calibrate(scores(load(candidate, cal), load(reference, cal), source, rotated,
                            drift["detectors"]["mixed_tolerance"]),
                     drift["calibration"]["quantile"], boot["nested_replicates"],
                     protocol["seeds"]["alarm_bootstrap"], len(held))
    ref_held = load(reference, held)
    plain: dict[Cell, dict[str, Any]] = {}
    measured: dict[str, dict[str, Any]] = {}  # outputs digest -> their measures
    rows = []
    for cell in all_cells:
        found = load(cell, held)
        plain[cell] = found.logits
        key = outputs_digest(found)
        if key not in measured:
            measured[key] = _measures(found, ref_held, pair, conds, drift, boot["interval"])
        row = {"release": cell[0], "level": cell[1], "threads": cell[2], "model": model,
               "export": export, **measured[key]}
        one = plain.get((cell[0], cell[1], 1))  # cells list 1 thread first
        row["vs_one_thread"] = None if one is None else max_abs_difference(found.logits, one)
        rows.append(row)
    return rows, pair.thresholds


def _logits(run: Run, cell: Cell, model: str, export: str, conds: list[str],
            rows: list[int]) -> Logits:
    base = run.stage("sweep")
    logits, sketches = {}, {}
    for cond in conds:
        plain = load_npz(base / output_path(cell, model, export, "plain", cond))
        sketch = load_npz(base / output_path(cell, model, export, "sketch", cond))
        logits[cond] = plain["logits"][rows]
        sketches[cond] = {name: array[rows] for name, array in sketch.items()
                          if name.startswith("sketch/")}
    return Logits(logits, sketches)


def _measures(logits: Logits, reference: Logits, pair: Calibration, conds: list[str],
              drift: dict[str, Any], interval: float) -> dict[str, Any]:
    """One cell's measures against the reference: a function of its outputs alone, so the
    block computes them once per distinct outputs (most cells repeat another's bits) and
    Polygraphy is called once per distinct pair of arrays."""
    source, rotated = conds
    cell_scores = scores(logits, reference, source, rotated,
                         drift["detectors"]["mixed_tolerance"])
    polygraphy = polygraphy_fails(reference.logits[source], logits.logits[source])
    return {**drift_measures(logits, reference, source),
            "alarms": alarm_rates(cell_scores, pair, interval),
            "polygraphy": {"alarms": int(polygraphy.sum()), "n": len(polygraphy),
                           "rate": float(polygraphy.mean())}}


def run_sweep(run_dir: Path, *, protocol_file: Path = REALDRIFT,
              drift_protocol: Path = PROTOCOL, releases: list[str] | None = None,
              levels: list[str] | None = None, threads: list[int] | None = None,
              backend: str | None = None, scheduler: str | None = None,
              workers: int | None = None, drift_run: Path | None = None,
              models: str = "train") -> dict[str, Any]:
    """Run (or resume) the sweep in ``run_dir``; returns its record. ``drift_run``: a
    finished drift run whose fault matrix Polygraphy is also put to
    (``sweep/polygraphy/fault-matrix.json``); ``models``: fetch trains the digits models
    or takes the shipped ones (and the export with BatchNormalization kept the shipped
    training weights)."""
    protocol = load_sweep_protocol(protocol_file)
    drift = load_protocol(drift_protocol)
    chosen = choose_releases(protocol, releases)
    thread_counts(protocol, threads)  # before any model is trained or environment built
    check_levels(chosen, levels)
    runtimes = {release: release_runtime(release) for release in chosen}
    with hold(run_dir) as root:
        run = Run(root)
        conds = digits_images(run, backend, drift_protocol, models)  # timed as fetch, split
        started, cpu = time.monotonic(), cpu_seconds()
        described = release_levels(runtimes, levels, backend)  # builds missing environments
        all_cells = cells(protocol, described, threads)
        graphs = export_unfolded(drift, run)
        run.forget("sweep")
        write_atomic(run.stage("sweep") / "levels.json", canonical_json(described))
        started, cpu = _timed(run, "sweep-setup", started, cpu)
        _execute(run, runtimes, plan(all_cells, graphs, conds), backend, scheduler, workers)
        started, cpu = _timed(run, "sweep-jobs", started, cpu)
        evidence = measure(run, protocol, drift, all_cells, graphs, conds)
        write_atomic(run.stage("sweep") / "cells.json", canonical_json(evidence))
        if drift_run is not None:
            write_atomic(run.stage("sweep") / "polygraphy" / "fault-matrix.json",
                         canonical_json(fault_matrix(Run(drift_run))))
        record = {"protocol_sha256": sha256(protocol_file), "releases": chosen,
                  "cells": [cell_name(c) for c in all_cells], "models": list(graphs),
                  "exports": sorted(next(iter(graphs.values()))), "rows": len(evidence["rows"]),
                  "drift_run": None if drift_run is None else drift_run.name}
        run.write_record("sweep", record)
        write_report(root)
        _timed(run, "sweep-measures", started, cpu)
        say(f"sweep: {len(all_cells)} cells x {len(graphs)} model(s) x 2 exports measured "
            f"({root}; times in {root / CPU_TIMES})")
        return record


def _timed(run: Run, stage: str, started: float, cpu: float) -> tuple[float, float]:
    """Record one step's wall and CPU seconds since (started, cpu); returns the new mark."""
    now, used = time.monotonic(), cpu_seconds()
    record_timing(run, stage, now - started, used - cpu)
    return now, used


def _execute(run: Run, runtimes: dict[str, Runtime],
             batches: dict[tuple[str, str, str], list[dict[str, Any]]], backend: str | None,
             scheduler: str | None, workers: int | None) -> None:
    hashes: dict[str, str] = {}
    pending = []
    total = sum(len(jobs) for jobs in batches.values())
    for (release, model, export), jobs in batches.items():
        todo = [job for job in jobs if not is_done(run, job, hashes, stage="sweep")]
        if todo:
            pending.append(Batch(runtimes[release], tuple(todo), f"{release} {model}.{export}"))
    say(f"sweep: {sum(len(b.jobs) for b in pending)} of {total} jobs to run in "
        f"{len(pending)} batches")
    run_batches(pending, run.root, run.stage("sweep"), backend, scheduler, workers, say)
