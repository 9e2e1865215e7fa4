"""Stage fault: the 54 faulty candidate models, severities chosen from calibration only.

For each model the early, middle and late convolutions are the first, middle
(``floor(L/2)``) and last Conv in graph order. For each layer and family the stage probes
every severity of the protocol's grid on the 300 calibration images (faulty candidate
against clean reference, original images), and takes as the low severity the first grid
value whose median ||e_o|| exceeds that model's clean calibration direct-L2 threshold, and
as the high one the value ``high_step`` entries further along the grid. Held-out images
are never looked at. Probe models are deleted once chosen; their hashes and medians stay
in ``severity.json``. Every fault's seed comes from the protocol's fault seed and its
coordinates, so re-injecting gives the same bytes.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from kit.drift.calibrate import threshold
from kit.drift.detectors import direct_l2
from kit.drift.evidence import POSITIONS
from kit.drift.faults import FaultRecord, conv_layers, inject
from kit.drift.instrument import instrument
from kit.drift.protocol import session_threads
from kit.drift.stages.infer import batches
from kit.files import canonical_json, load_npz, write_atomic, write_npz
from kit.runfolder import Progress, Run, say
from kit.runtime.runtimes import get_runtime
from kit.runtime.scale import run_batches

PROBE_BATCH = 30  # probe jobs per worker process: 117 per model make four batches
# One probe model: (position, family, grid index, seed, injection record).
Probe = tuple[str, str, int, int, FaultRecord]


def layer_indices(n_convs: int) -> dict[str, int]:
    """Graph-order conv index of the early, middle and late layer."""
    early, middle, late = POSITIONS
    return {early: 0, middle: n_convs // 2, late: n_convs - 1}


def fault_seed(base: int, *coordinates: int) -> int:
    """A 32-bit seed for one fault from the protocol seed and its coordinates."""
    return int(np.random.SeedSequence([base, *coordinates]).generate_state(1)[0])


def fault_id(model: str, position: str, family: str, level: str) -> str:
    return f"{model}-{position}-{family}-{level}"


def choose(medians: list[float], limit: float, step: int) -> tuple[int, int, str]:
    """(low index, high index, note) on a grid ordered by increasing severity."""
    above = [i for i, m in enumerate(medians) if m > limit]
    last = len(medians) - 1
    if not above:
        return last - step, last, "no grid severity exceeded the threshold: grid end taken"
    low = above[0]
    if low + step > last:
        return last - step, last, "boundary near the grid end: the last step taken"
    return low, low + step, "first severity above the threshold"


def _calibration_inputs(run: Run) -> Path:
    split = run.record("split")
    cal = [row["position"] for row in split["rows"] if row["role"] == "calibration"]
    source = load_npz(run.stage("split") / "inputs" / "orig.npz")["input"]
    target = run.stage("fault") / "probe" / "calibration.npz"
    write_npz(target, {"input": source[np.asarray(cal)]})
    return target


def _probe_jobs(protocol: dict[str, Any], run: Run, mi: int, name: str, plain: Path,
                where: dict[str, int], inputs: str
                ) -> tuple[list[Probe], list[dict[str, Any]]]:
    """Every grid severity's probe model of one model, and the jobs scoring them on calibration."""
    families, grids = protocol["faults"]["families"], protocol["faults"]["severity_grids"]
    probe = run.stage("fault") / "probe"
    probes: list[Probe] = []
    jobs: list[dict[str, Any]] = []
    threads = session_threads(protocol)
    for pi, position in enumerate(POSITIONS):
        for fi, family in enumerate(families):
            for gi, severity in enumerate(grids[family]):
                seed = fault_seed(protocol["seeds"]["faults"], mi, pi, fi, gi)
                target = probe / "models" / name / f"{position}-{family}-{gi}.onnx"
                record = inject(plain, target, where[position], family, severity, seed)
                probes.append((position, family, gi, seed, record))
                jobs.append({"id": target.stem, "model": target.relative_to(run.root)
                             .as_posix(), "inputs": inputs,
                             "output": f"{name}/{target.stem}.npz", **threads})
    return probes, jobs


def _chosen_faults(protocol: dict[str, Any], run: Run, name: str, plain: Path, layer: int,
                   rows: list[Probe], levels: dict[str, int]) -> list[dict[str, Any]]:
    """The manifest entries of the low and high faults, their models and sketches written."""
    grids = protocol["faults"]["severity_grids"]
    found = []
    for level, index in levels.items():
        position, family, gi, seed, _ = rows[index]
        fid = fault_id(name, position, family, level)
        target = run.stage("fault") / "models" / name / f"{fid}.onnx"
        record = inject(plain, target, layer, family, grids[family][gi], seed)
        sketch = target.with_name(f"{fid}.sketch.onnx")
        instrument(target, sketch, protocol["instrumentation"]["max_values"])
        found.append({"id": fid, "model": name, "position": position, "level": level,
                      "onnx": target.relative_to(run.root).as_posix(),
                      "sketch_onnx": sketch.relative_to(run.root).as_posix(),
                      **record.as_dict()})
    return found


def run_fault(protocol: dict[str, Any], run: Run, backend: str | None = None,
              scheduler: str | None = None, workers: int | None = None) -> dict[str, Any]:
    """Probe severities, write the chosen faulty models and the fault manifest. The clean
    and probe jobs go in batches to ``kit.runtime.scale`` (Dask by default)."""
    fetched = run.record("fetch")
    out = run.stage("fault")
    probe = out / "probe"
    inputs = _calibration_inputs(run).relative_to(run.root).as_posix()
    ref, cand = get_runtime(protocol["runtimes"]["reference"]), \
        get_runtime(protocol["runtimes"]["candidate"])
    clean_jobs = [{"id": name, "model": fetched["models"][name]["onnx"], "inputs": inputs,
                   "output": f"{name}/clean.npz", **session_threads(protocol)}
                  for name in protocol["models"]]
    say("fault: clean calibration logits under both runtimes")
    run_batches(batches(ref, clean_jobs, folder="ref") + batches(cand, clean_jobs, folder="cand"),
                run.root, probe, backend, scheduler, workers)

    families, grids = protocol["faults"]["families"], protocol["faults"]["severity_grids"]
    step = protocol["faults"]["severity_rule"]["high_step"]
    faults: list[dict[str, Any]] = []
    evidence: list[dict[str, Any]] = []
    progress = Progress("fault: models", len(protocol["models"]))
    for mi, name in enumerate(protocol["models"]):
        plain = run.listed("fetch", fetched["models"][name]["onnx"], f"models.{name}.onnx")
        r_clean = load_npz(probe / "ref" / name / "clean.npz")["logits"]
        c_clean = load_npz(probe / "cand" / name / "clean.npz")["logits"]
        limit = threshold(direct_l2(c_clean, r_clean), protocol["calibration"]["quantile"])
        layers = conv_layers(onnx.load(str(plain)))
        where = layer_indices(len(layers))
        probes, jobs = _probe_jobs(protocol, run, mi, name, plain, where, inputs)
        run_batches(batches(cand, jobs, size=PROBE_BATCH, folder="cand"), run.root, probe,
                    backend, scheduler, workers)
        for position in POSITIONS:
            for family in families:
                rows = [p for p in probes if p[0] == position and p[1] == family]
                medians = [float(np.median(direct_l2(load_npz(
                    probe / "cand" / name / f"{position}-{family}-{gi}.npz")["logits"],
                    r_clean))) for _, _, gi, _, _ in rows]
                low, high, note = choose(medians, limit, step)
                evidence.append({
                    "model": name, "position": position, "family": family,
                    "layer_index": where[position], "layer_node": layers[where[position]].node,
                    "threshold": limit, "grid": grids[family], "median_direct_l2": medians,
                    "probe_model_sha256": [r.model_sha256 for *_, r in rows],
                    "low": grids[family][low], "high": grids[family][high], "note": note})
                faults += _chosen_faults(protocol, run, name, plain, where[position], rows,
                                         {"low": low, "high": high})
        shutil.rmtree(probe / "models" / name)
        progress.step(name)
    result = {"faults": faults, "count": len(faults)}
    write_atomic(out / "severity.json", canonical_json({"selection": evidence}))
    run.write_record("fault", result)
    return result
