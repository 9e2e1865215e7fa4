"""``nox -s bench``: the infer stage's wall time against its floor, and the nested
bootstrap's vectorised engine against a plain per-replicate loop.

The floor (kit/runtime/floor.py) runs the same inferences in one in-process onnxruntime loop of
the same runtime environment: sessions built once per model, no validation, no files.
The kit's time is the wall time of ``run_jobs`` over those jobs (process start, imports,
validation, batching, deterministic .npz writing and metadata). Target: ratio <= 1.3.

Bootstrap: 5,000 nested detection replicates over the run's primary table with
``kit.drift.bootstrap.detection_replicates`` (target <= 5 s), and the nested localisation
over the same draws (``localisation_replicates``, one process per core; timed, no
target: it ranks every layer of every fault row in every replicate); the loop
(``kit.drift.bootstrap.loop_nested``, the scalar calibration rule per replicate) runs a sample of
replicates and is extrapolated; both must give the same numbers on that sample.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from kit.drift.protocol import PROTOCOL, load_protocol
from kit.drift.stages.infer import plan
from kit.errors import KitError
from kit.files import read_json
from kit.runfolder import CPU_TIMES, Run, default_run
from kit.runtime.backends import floor_seconds, run_jobs
from kit.runtime.runtimes import get_runtime

TARGET = 1.3
BOOTSTRAP_TARGET_S = 5.0


def bench_infer(run_dir: Path | None = None, model: str = "resnet20",
                protocol_file: Path = PROTOCOL, runtime: str = "cand") -> dict[str, Any]:
    """Time one model's candidate jobs of the infer stage against the floor."""
    protocol = load_protocol(protocol_file)
    run = Run(run_dir) if run_dir else default_run(protocol["substrate_default"])
    role = "candidate" if runtime == "cand" else "reference"
    jobs = [job for job in plan(protocol, run)[role] if f"/{model}/" in job["output"]]
    if not jobs:
        raise KitError(f"{run.root}: no {runtime} jobs for {model}; run the stages first")
    floor = floor_seconds(get_runtime(runtime), jobs, run.root)
    with tempfile.TemporaryDirectory(prefix="kit-bench-") as tmp:
        start = time.perf_counter()
        run_jobs(get_runtime(runtime), jobs, run.root, Path(tmp) / "out", "venv")
        kit = time.perf_counter() - start
    result = {"model": model, "runtime": runtime, "jobs": len(jobs), "floor_s": round(floor, 3),
              "kit_s": round(kit, 3), "ratio": round(kit / floor, 3), "target": TARGET}
    print(json.dumps(result))
    return result


def bench_bootstrap(run_dir: Path | None = None, protocol_file: Path = PROTOCOL,
                    loop_replicates: int = 100) -> dict[str, Any]:
    """Time the vectorised nested bootstrap against the per-replicate loop."""
    import numpy as np

    from kit.drift import bootstrap as engine
    from kit.drift.shipped import Evidence

    protocol = load_protocol(protocol_file)
    run = Run(run_dir) if run_dir else default_run(protocol["substrate_default"])
    evidence = Evidence(run.root)
    table = evidence.table()
    cal, held = evidence.images("calibration"), evidence.images("heldout")
    replicates, seed = protocol["bootstrap"]["nested_replicates"], \
        protocol["seeds"]["bootstrap_nested"]
    start = time.perf_counter()
    reps = engine.detection_replicates(table, cal, held, replicates, seed, True,
                                       evidence.quantile)
    vectorised = time.perf_counter() - start
    start = time.perf_counter()
    engine.localisation_replicates(table, evidence.layers, evidence.models,
                                   reps["cal_counts"], reps["held_counts"], cal, held,
                                   evidence.quantile)
    localisation = time.perf_counter() - start
    start = time.perf_counter()
    slow = engine.loop_nested(table, cal, held, loop_replicates, seed, evidence.quantile)
    loop = (time.perf_counter() - start) * replicates / loop_replicates
    check = engine.detection_replicates(table, cal, held, loop_replicates, seed, True,
                                        evidence.quantile)
    agree = all(np.array_equal(check[k], slow[k]) for k in slow)
    result = {"replicates": replicates, "vectorised_s": round(vectorised, 3),
              "localisation_s": round(localisation, 2),
              "loop_s_extrapolated": round(loop, 1), "speedup": round(loop / vectorised, 1),
              "loop_sample": loop_replicates, "agree_on_sample": agree,
              "target_s": BOOTSTRAP_TARGET_S, "rows": len(table["model"])}
    print(json.dumps(result))
    return result


def passes(infer: dict[str, Any], nested: dict[str, Any]) -> bool:
    """The bench rule: infer within ``TARGET`` times its floor, and the vectorised nested
    bootstrap within ``BOOTSTRAP_TARGET_S`` and equal to the loop on its sample."""
    return bool(infer["ratio"] <= infer["target"] and nested["agree_on_sample"]
                and nested["vectorised_s"] <= nested["target_s"])


REPRODUCE_TARGET_S = 15 * 60  # full digits reproduction from a fresh clone, 2 cores
SWEEP_TARGET_S = 30 * 60  # the whole real-drift sweep on digits, 2 cores


def stage_times(run_dir: Path, target_s: float, what: str) -> bool:
    """Print each stage's wall time, CPU seconds and core utilisation as the run recorded
    them (``cpu.json``), whether their sum meets ``target_s``, and the floor the CPU
    seconds put under any schedule on the run's cores (CPU seconds / cores): when that
    floor is above the target, no parallelism on those cores can meet it without
    computing less. False when not met or not recorded."""
    path = run_dir / CPU_TIMES
    if not path.is_file():
        print(f"bench: {what}: {path} not recorded (run the stages with this kit first)")
        return False
    found = read_json(path, f"delete {path} and rerun the stages")
    for stage, entry in found.items():
        print(f"bench: {what}: {stage:14s} {entry['wall_s']:8.1f} s wall, {entry['cpu_s']:8.1f}"
              f" s CPU, {100 * entry['utilisation']:5.1f}% of {entry['cores']} cores")
    total = sum(entry["wall_s"] for entry in found.values())
    cpu = sum(entry["cpu_s"] for entry in found.values())
    cores = max(entry["cores"] for entry in found.values())
    floor = cpu / cores
    met = bool(total <= target_s)
    print(f"bench: {what}: {total:.0f} s in all (target <= {target_s:.0f} s): "
          f"{'met' if met else 'NOT met'}; {cpu:.0f} CPU s on {cores} cores: no schedule "
          f"ends before {floor:.0f} s"
          + (" (the target is below that floor)" if floor > target_s else ""))
    return met


def bench(run_dir: Path | None = None, sweep_dir: Path | None = None) -> int:
    """``python -m kit bench``: the stage times of the drift run (and of a sweep folder)
    against their targets, then both benchmarks on the run folder; exit code of the rule."""
    root = run_dir or default_run("digits").root
    timed = stage_times(root, REPRODUCE_TARGET_S, "reproduce")
    if sweep_dir is not None:
        timed = stage_times(sweep_dir, SWEEP_TARGET_S, "sweep") and timed
    nested = bench_bootstrap(run_dir)
    infer = bench_infer(run_dir)
    ok = passes(infer, nested) and timed
    print(f"bench: infer {infer['ratio']}x its floor (target <= {infer['target']}), nested "
          f"bootstrap {nested['vectorised_s']} s (target <= {nested['target_s']} s, equal to "
          f"the loop on its sample: {nested['agree_on_sample']}), nested localisation "
          f"{nested['localisation_s']} s; "
          f"{'OK' if ok else 'FAILED'}")
    return 0 if ok else 1

