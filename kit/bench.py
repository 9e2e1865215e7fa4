"""``nox -s bench``: the infer stage's wall time against its floor.

The floor (kit/floor.py) runs the same inferences in one in-process onnxruntime loop of
the same runtime environment: sessions built once per model, no validation, no files.
The kit's time is the wall time of ``run_jobs`` over those jobs (process start, imports,
validation, batching, deterministic .npz writing and metadata). Target: ratio <= 1.3.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from kit.backends import run_jobs
from kit.errors import KitError
from kit.protocol import PROTOCOL, load_protocol
from kit.runtimes import get_runtime
from kit.stages.common import Run, default_run
from kit.stages.infer import plan
from kit.venvs import ensure_runtime
from kit.worker import canonical_json

FLOOR = Path(__file__).with_name("floor.py")
TARGET = 1.3


def bench_infer(run_dir: Path | None = None, model: str = "resnet20",
                protocol_file: Path = PROTOCOL, runtime: str = "cand") -> dict[str, Any]:
    """Time one model's candidate jobs of the infer stage against the floor."""
    protocol = load_protocol(protocol_file)
    run = Run(run_dir) if run_dir else default_run(protocol["substrate_default"])
    role = "candidate" if runtime == "cand" else "reference"
    jobs = [job for job in plan(protocol, run)[role] if f"/{model}/" in job["output"]]
    if not jobs:
        raise KitError(f"{run.root}: no {runtime} jobs for {model}; run the stages first")
    python = ensure_runtime(runtime)
    with tempfile.TemporaryDirectory(prefix="kit-bench-") as tmp:
        spec = Path(tmp) / "jobs.json"
        spec.write_bytes(canonical_json({"jobs": jobs}))
        proc = subprocess.run([str(python), "-I", str(FLOOR), "--jobs", str(spec),
                               "--in-root", str(run.root)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise KitError(f"floor run failed: {proc.stderr[-2000:]}")
        floor = json.loads(proc.stdout)["seconds"]
        start = time.perf_counter()
        run_jobs(get_runtime(runtime), jobs, run.root, Path(tmp) / "out", "venv")
        kit = time.perf_counter() - start
    result = {"model": model, "runtime": runtime, "jobs": len(jobs), "floor_s": round(floor, 3),
              "kit_s": round(kit, 3), "ratio": round(kit / floor, 3), "target": TARGET}
    print(json.dumps(result))
    return result
