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

On the shipped models (``--models shipped``) the choices are the shipped evidence's: the
threshold is clean drift of order 1e-6, the order by which onnxruntime's kernels differ
between instruction sets, so on another CPU the rule may pick a neighbouring grid value
(2 of 27 on an AMD EPYC without AVX-512) and the study would inject other faults than the
evidence's. The stage still probes every grid value on this CPU and writes what the rule
chooses here to ``severity-here.json`` (run metadata, never shipped), naming every choice
that differs from the shipped one; ``severity.json`` is the shipped file, sha256-checked
against the shipped run manifest, and the faults injected are the evidence's.
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
from kit.errors import KitError
from kit.files import canonical_json, load_npz, read_json, sha256, write_atomic, write_npz
from kit.runfolder import SHIPPED_MANIFEST, Progress, Run, say
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


def shipped_choices(protocol: dict[str, Any], run: Run, shipped: Path
                    ) -> tuple[bytes, dict[tuple[str, str, str], tuple[int, int]]]:
    """The shipped ``fault/severity.json`` (its bytes) and its (low, high) grid indices by
    (model, position, family), once its sha256 is the shipped run manifest's, the run's
    models are the shipped ones and every choice lies on this protocol's grid."""
    path = shipped / "fault" / "severity.json"
    listed = read_json(shipped / SHIPPED_MANIFEST).get("files", {}).get("fault/severity.json")
    if not path.is_file() or sha256(path) != listed:
        raise KitError(f"{path}: missing or its sha256 differs from {shipped / SHIPPED_MANIFEST};"
                       " restore the checkout (git checkout claims) or use --models train")
    theirs = read_json(shipped / "fetch" / "fetch.json").get("models", {})
    for name, entry in run.record("fetch")["models"].items():
        if entry["onnx_sha256"] != theirs.get(name, {}).get("onnx_sha256"):
            raise KitError(f"{run.root}: its {name} is not the shipped model ({shipped}/fetch/"
                           "fetch.json), so the shipped severities do not apply; fetch it "
                           "with --models shipped or run fault with --models train")
    grids, found = protocol["faults"]["severity_grids"], {}
    data = path.read_bytes()
    for entry in read_json(path).get("selection", []):
        key = (entry.get("model"), entry.get("position"), entry.get("family"))
        grid = grids.get(key[2], [])
        if entry.get("grid") != grid or entry.get("low") not in grid \
                or entry.get("high") not in grid:
            raise KitError(f"{path}: the choice for {'/'.join(map(str, key))} is not on this "
                           "protocol's severity grid; use --models train")
        found[key] = (grid.index(entry["low"]), grid.index(entry["high"]))
    wanted = {(m, p, f) for m in protocol["models"] for p in POSITIONS
              for f in protocol["faults"]["families"]}
    if set(found) != wanted:
        raise KitError(f"{path}: its choices cover {len(set(found) & wanted)} of the "
                       f"protocol's {len(wanted)} model, layer and family coordinates; use "
                       "--models train")
    return data, found


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


def _select(protocol: dict[str, Any], run: Run, name: str, plain: Path, limit: float,
            probes: list[Probe], layers: list[Any], where: dict[str, int],
            taken: dict[tuple[str, str, str], tuple[int, int]] | None
            ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One model's faults and the rule's choices on this CPU: each (position, family) at
    the rule's low and high severity, or at ``taken``'s (the shipped choices)."""
    families, grids = protocol["faults"]["families"], protocol["faults"]["severity_grids"]
    step = protocol["faults"]["severity_rule"]["high_step"]
    r_clean = load_npz(run.stage("fault") / "probe" / "ref" / name / "clean.npz")["logits"]
    faults: list[dict[str, Any]] = []
    evidence: list[dict[str, Any]] = []
    for position in POSITIONS:
        for family in families:
            rows = [p for p in probes if p[0] == position and p[1] == family]
            medians = [float(np.median(direct_l2(load_npz(
                run.stage("fault") / "probe" / "cand" / name / f"{position}-{family}-{gi}.npz"
            )["logits"], r_clean))) for _, _, gi, _, _ in rows]
            low, high, note = choose(medians, limit, step)
            evidence.append({
                "model": name, "position": position, "family": family,
                "layer_index": where[position], "layer_node": layers[where[position]].node,
                "threshold": limit, "grid": grids[family], "median_direct_l2": medians,
                "probe_model_sha256": [r.model_sha256 for *_, r in rows],
                "low": grids[family][low], "high": grids[family][high], "note": note})
            if taken is not None:
                low, high = taken[(name, position, family)]
            faults += _chosen_faults(protocol, run, name, plain, where[position], rows,
                                     {"low": low, "high": high})
    return faults, evidence


def _write_selection(out: Path, evidence: list[dict[str, Any]],
                     shipped: tuple[bytes, dict[tuple[str, str, str], tuple[int, int]]] | None
                     ) -> None:
    """``severity.json``: this CPU's choices, or the shipped file with this CPU's beside it
    in ``severity-here.json`` naming every choice that differs (module docstring)."""
    if shipped is None:
        write_atomic(out / "severity.json", canonical_json({"selection": evidence}))
        return
    data, taken = shipped
    differ = [e for e in evidence
              if (e["grid"].index(e["low"]), e["grid"].index(e["high"]))
              != taken[(e["model"], e["position"], e["family"])]]
    write_atomic(out / "severity-here.json", canonical_json({
        "selection": evidence, "injected": "the shipped choices (fault/severity.json)",
        "differs_from_shipped": [f"{e['model']}-{e['position']}-{e['family']}"
                                 for e in differ]}))
    write_atomic(out / "severity.json", data)
    say(f"fault: the shipped severities injected; the rule on this CPU chooses otherwise in "
        f"{len(differ)} of {len(evidence)} ({out / 'severity-here.json'})")


def run_fault(protocol: dict[str, Any], run: Run, backend: str | None = None,
              scheduler: str | None = None, workers: int | None = None,
              shipped: Path | None = None) -> dict[str, Any]:
    """Probe severities, write the chosen faulty models and the fault manifest. The clean
    and probe jobs go in batches to ``kit.runtime.scale`` (Dask by default). ``shipped``:
    the shipped evidence folder whose severity choices are injected (module docstring)."""
    fetched = run.record("fetch")
    given = None if shipped is None else shipped_choices(protocol, run, shipped)
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
        found, chosen = _select(protocol, run, name, plain, limit, probes, layers, where,
                                None if given is None else given[1])
        faults += found
        evidence += chosen
        shutil.rmtree(probe / "models" / name)
        progress.step(name)
    result = {"faults": faults, "count": len(faults)}
    _write_selection(out, evidence, given)
    run.write_record("fault", result)
    return result
