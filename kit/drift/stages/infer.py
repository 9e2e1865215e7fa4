"""Stage infer: every model under every runtime cell on every image condition.

Cells (runtime, graph optimisation): ``ref`` (1.20.1, off) and ``cand`` (1.29.0, on) are
the study's pair; ``ref-on`` (1.20.1, on) and ``cand-off`` (1.29.0, off) complete the 2x2
factor isolation. The reference runs the clean model (plain and sketch graphs) on every
condition; the candidate runs the clean and every faulty model (plain and sketch) on
every condition; all four cells run the clean and every faulty plain graph on ``orig``
and the primary rotation (the factor analysis over the full fault matrix, beyond the
paper). Jobs go in batches of ``BATCH_JOBS`` to Dask (``kit.runtime.scale``), one worker
process per batch; each output depends on its job alone, so the bytes are those of a serial
run.

Resumable: a job is skipped when its output exists, hashes to what its ``.meta.json``
records, and that record names the current model's and inputs' sha256 (a damaged record
means the job runs again). Outputs are written under temporary names and renamed, so an
interrupted run leaves nothing that looks complete; the next command in the run folder
removes the temporaries (``kit/runlock.py``).
"""

from __future__ import annotations

import json
from typing import Any

from kit.drift.protocol import session_threads
from kit.files import sha256
from kit.runfolder import Run, say
from kit.runtime.runtimes import Runtime, get_runtime
from kit.runtime.scale import Batch, run_batches
from kit.runtime.worker import meta_path

BATCH_JOBS = 48  # jobs per worker process: few process starts, enough batches to share
CELLS = {"ref": ("reference", "disable_all"), "cand": ("candidate", "enable_all"),
         "ref-on": ("reference", "enable_all"), "cand-off": ("candidate", "disable_all")}


def output_path(cell: str, model: str, variant: str, graph: str, cond: str) -> str:
    """Where one inference lands, relative to ``<run>/infer``."""
    return f"{cell}/{model}/{variant}/{graph}-{cond}.npz"


def plan(protocol: dict[str, Any], run: Run) -> dict[str, list[dict[str, Any]]]:
    """Every job of the stage by runtime role, grouped so that one model file at one
    optimisation level runs all its conditions in a row."""
    fetched, split, faults = run.record("fetch"), run.record("split"), run.record("fault")
    conds = list(split["conditions"])
    primary = next(name for name, c in split["conditions"].items() if c.get("primary"))
    factor_conds = ["orig", primary]
    jobs: dict[str, list[dict[str, Any]]] = {"reference": [], "candidate": []}
    threads = session_threads(protocol)
    for model in protocol["models"]:
        entry = fetched["models"][model]
        variants = [("clean", entry["onnx"], entry["sketch_onnx"])]
        variants += [(f["id"], f["onnx"], f["sketch_onnx"])
                     for f in faults["faults"] if f["model"] == model]
        for variant, plain, sketch in variants:
            groups = [("cand", "plain", plain, conds), ("cand", "sketch", sketch, conds)]
            if variant == "clean":
                groups += [("ref", "plain", plain, conds), ("ref", "sketch", sketch, conds)]
            else:
                groups += [("ref", "plain", plain, factor_conds)]
            groups += [("ref-on", "plain", plain, factor_conds),
                       ("cand-off", "plain", plain, factor_conds)]
            for cell, graph, onnx, cell_conds in groups:
                role, level = CELLS[cell]
                for cond in cell_conds:
                    out = output_path(cell, model, variant, graph, cond)
                    jobs[role].append({"id": out.removesuffix(".npz"), "model": onnx,
                                       "inputs": f"split/inputs/{cond}.npz",
                                       "graph_optimization": level, "output": out,
                                       **threads})
    return jobs


def is_done(run: Run, job: dict[str, Any], hashes: dict[str, str], stage: str = "infer"
            ) -> bool:
    """True when the job's output (under ``<run>/<stage>``) is complete and was made from
    the current files with the job's session options."""
    output = run.stage(stage) / job["output"]
    meta = meta_path(output)
    if not output.is_file() or not meta.is_file():
        return False
    try:  # a damaged record (the file edited, the disk failing) is a job to run again
        record = json.loads(meta.read_bytes())
    except ValueError:
        return False
    if not isinstance(record, dict):
        return False
    for key, name in (("model_sha256", job["model"]), ("inputs_sha256", job["inputs"])):
        if name not in hashes:
            hashes[name] = sha256(run.root / name)
        if record.get(key) != hashes[name]:
            return False
    options = record.get("session_options", {})
    return bool(record.get("output_sha256") == sha256(output)
                and options.get("graph_optimization") == job["graph_optimization"]
                and options.get("intra_op_threads") == job.get("intra_op_threads", 1)
                and options.get("inter_op_threads") == job.get("inter_op_threads", 1))


def batches(runtime: Runtime, pending: list[dict[str, Any]], size: int = BATCH_JOBS,
            folder: str = "") -> list[Batch]:
    """Contiguous runs of at most ``size`` pending jobs (one model's jobs stay together as
    far as the size allows), one worker process each, writing under ``folder``."""
    return [Batch(runtime, tuple(pending[i:i + size]), f"{runtime.name} jobs {i + 1}-"
                  f"{min(i + size, len(pending))}", folder)
            for i in range(0, len(pending), size)]


def run_infer(protocol: dict[str, Any], run: Run, backend: str | None = None,
              scheduler: str | None = None, workers: int | None = None) -> dict[str, Any]:
    """Run every pending job in batches on Dask (``kit.runtime.scale``: a LocalCluster of
    one worker process per core by default, ``workers=1`` serial); returns the stage
    record, which no choice of scheduler or worker count changes."""
    jobs = plan(protocol, run)
    hashes: dict[str, str] = {}
    index, pending = [], []
    for role, role_jobs in jobs.items():
        runtime: Runtime = get_runtime(protocol["runtimes"][role])
        todo = [job for job in role_jobs if not is_done(run, job, hashes)]
        say(f"infer: {runtime.name}: {len(todo)} of {len(role_jobs)} jobs to run")
        pending += batches(runtime, todo)
        index += [{"id": job["id"], "runtime": runtime.name, "output": job["output"],
                   "model": job["model"], "inputs": job["inputs"],
                   "graph_optimization": job["graph_optimization"]} for job in role_jobs]
    run_batches(pending, run.root, run.stage("infer"), backend, scheduler, workers, say)
    record = {"jobs": sorted(index, key=lambda j: j["id"]), "count": len(index)}
    run.write_record("infer", record)
    return record
