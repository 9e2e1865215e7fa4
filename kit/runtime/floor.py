"""The benchmark floor: the same inferences as a job list, in one in-process
onnxruntime loop with no validation and no files written (numpy, onnxruntime and the
standard library only, run by a runtime's own interpreter like the worker).

    python floor.py --jobs JOBS.json --in-root IN      prints {"seconds": S, "jobs": N}

The inputs are read by the worker beside this file (``worker.py``, loaded by path: the
runtime's interpreter has no ``kit`` package): each .npz refused from its headers before
any allocation past ``MAX_INPUT_BYTES``, the one cap ``kit run`` applies. Whatever goes
wrong is one line, ``floor: error: FILE: WHAT``, and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

import onnxruntime as ort

WORKER = Path(__file__).with_name("worker.py")


def load_worker() -> Any:
    """The kit's worker module, from beside this file."""
    spec = importlib.util.spec_from_file_location("kit_worker", WORKER)
    if spec is None or spec.loader is None:
        raise ImportError(f"{WORKER}: not loadable")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_feeds(jobs: list[dict[str, Any]], in_root: Path, worker: Any) -> dict[str, Any]:
    """Each job's inputs, once per file, through the worker's capped reader."""
    inputs = {}
    for job in jobs:
        if job["inputs"] not in inputs:
            path = in_root / job["inputs"]
            declared = worker.npz_headers(path, str(path))
            if not declared:
                raise worker.JobError(str(path), "the archive holds no arrays")
            inputs[job["inputs"]] = worker.read_inputs(path, str(path), declared,
                                                       bool(job.get("nonfinite")))
    return inputs


def measure(jobs: list[dict[str, Any]], in_root: Path, inputs: dict[str, Any]) -> float:
    """The seconds every job's inferences take, sessions built once per model and level; a
    ``whole`` job's inputs in one call, as they are (the worker's rule)."""
    start = time.perf_counter()
    sessions: dict[tuple[str, str], ort.InferenceSession] = {}
    for job in jobs:
        key = (job["model"], job["graph_optimization"])
        if key not in sessions:
            sessions.clear()
            options = ort.SessionOptions()
            options.graph_optimization_level = getattr(
                ort.GraphOptimizationLevel, "ORT_" + job["graph_optimization"].upper())
            options.intra_op_num_threads = options.inter_op_num_threads = 1
            options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            sessions[key] = ort.InferenceSession(str(in_root / job["model"]), options,
                                                 providers=["CPUExecutionProvider"])
        session, feed = sessions[key], inputs[job["inputs"]]
        if job.get("whole"):  # one call with the inputs as they are, as the worker runs it
            session.run(None, feed)
            continue
        n, batch = len(next(iter(feed.values()))), job.get("batch_size", 64)
        for begin in range(0, n, batch):
            session.run(None, {k: v[begin:begin + batch] for k, v in feed.items()})
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="floor")
    parser.add_argument("--jobs", type=Path, required=True)
    parser.add_argument("--in-root", type=Path, required=True)
    args = parser.parse_args(argv)
    jobs = json.loads(args.jobs.read_text())["jobs"]
    worker = load_worker()
    try:
        seconds = measure(jobs, args.in_root, read_feeds(jobs, args.in_root, worker))
    except worker.JobError as exc:
        print(f"floor: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # onnxruntime raises its own unexported exception types
        said = str(exc).strip().splitlines() or [""]
        print(f"floor: error: {args.in_root}: onnxruntime {ort.__version__} does not run the "
              f"jobs ({type(exc).__name__}: {said[0][:300]})", file=sys.stderr)
        return 2
    print(json.dumps({"seconds": seconds, "jobs": len(jobs)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
