"""The benchmark floor: the same inferences as a job list, in one in-process
onnxruntime loop with no validation and no files written (numpy, onnxruntime and the
standard library only, run by a runtime's own interpreter like the worker).

    python floor.py --jobs JOBS.json --in-root IN      prints {"seconds": S, "jobs": N}
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="floor")
    parser.add_argument("--jobs", type=Path, required=True)
    parser.add_argument("--in-root", type=Path, required=True)
    args = parser.parse_args(argv)
    jobs = json.loads(args.jobs.read_text())["jobs"]
    inputs = {}
    for job in jobs:
        if job["inputs"] not in inputs:
            with np.load(args.in_root / job["inputs"]) as archive:
                inputs[job["inputs"]] = {k: archive[k] for k in archive.files}
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
            sessions[key] = ort.InferenceSession(str(args.in_root / job["model"]), options,
                                                 providers=["CPUExecutionProvider"])
        session, feed = sessions[key], inputs[job["inputs"]]
        n, batch = len(next(iter(feed.values()))), job.get("batch_size", 64)
        for begin in range(0, n, batch):
            session.run(None, {k: v[begin:begin + batch] for k, v in feed.items()})
    print(json.dumps({"seconds": time.perf_counter() - start, "jobs": len(jobs)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
