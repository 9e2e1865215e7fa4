"""The tensor-exchange worker: runs ONNX models under one onnxruntime, nothing else.

This file is copied as-is into both runtime images and is run by the ``venv`` backend
from its own virtual environment, so it imports only numpy, onnxruntime and the standard
library (onnxruntime lazily, so that the orchestrator can reuse the .npz helpers without
it). Never import the ``kit`` package from here.

Usage::

    python worker.py --jobs JOBS.json --in-root IN --out-root OUT

``JOBS.json`` holds ``{"jobs": [JOB, ...]}``; each JOB names a model and an input .npz
(paths relative to IN), an output .npz (relative to OUT), the graph optimisation level and
the thread counts. Every job is validated before any runs, so bad input writes nothing.
Each output .npz holds one array per graph output, keyed by the output's name, and a
``.meta.json`` beside it records the runtime, session options and the sha256 of model,
inputs and output. Both are written to a temporary name and renamed. Errors print
``worker: error: FILE: WHAT`` on stderr and exit with status 2.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]  # any dtype, any shape

GRAPH_LEVELS = ("disable_all", "enable_basic", "enable_extended", "enable_all")
JOB_KEYS = {
    "id", "model", "inputs", "output", "graph_optimization",
    "intra_op_threads", "inter_op_threads", "batch_size",
}
# onnxruntime's tensor type names for the dtypes the kit exchanges.
ORT_DTYPES = {
    "tensor(float)": np.dtype("float32"), "tensor(double)": np.dtype("float64"),
    "tensor(float16)": np.dtype("float16"), "tensor(int64)": np.dtype("int64"),
    "tensor(int32)": np.dtype("int32"), "tensor(int8)": np.dtype("int8"),
    "tensor(uint8)": np.dtype("uint8"), "tensor(bool)": np.dtype("bool"),
}
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


class JobError(Exception):
    """A job that cannot run; ``path`` names the offending file as the job gave it."""

    def __init__(self, path: str, what: str) -> None:
        super().__init__(f"{path}: {what}")
        self.path = path
        self.what = what


# ---------------------------------------------------------------- deterministic files
def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def canonical_json(obj: Any) -> bytes:
    """JSON with sorted keys and a fixed layout, newline-terminated."""
    return (json.dumps(obj, sort_keys=True, indent=1, ensure_ascii=True) + "\n").encode()


def npz_bytes(arrays: dict[str, Array]) -> bytes:
    """An .npz archive whose bytes depend only on the arrays (sorted names, fixed
    timestamps, stored uncompressed so no zlib version enters the bytes)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for name in sorted(arrays):
            payload = io.BytesIO()
            np.lib.format.write_array(  # type: ignore[no-untyped-call]
                payload, np.ascontiguousarray(arrays[name]), allow_pickle=False)
            info = zipfile.ZipInfo(name + ".npy", date_time=ZIP_EPOCH)
            info.external_attr = 0o644 << 16
            archive.writestr(info, payload.getvalue())
    return buffer.getvalue()


def write_atomic(path: Path, data: bytes) -> None:
    """Write bytes to a temporary name beside ``path`` and rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_npz(path: Path, arrays: dict[str, Array]) -> None:
    """Deterministic, atomic .npz writer shared by the worker and the orchestrator."""
    write_atomic(path, npz_bytes(arrays))


def read_npz(path: Path, shown: str | None = None) -> dict[str, Array]:
    """Load every array of an .npz (no pickles); a damaged file raises JobError."""
    shown = shown or str(path)
    if not path.is_file():
        raise JobError(shown, "input .npz not found")
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError) as exc:
        raise JobError(shown, f"not a readable .npz archive ({exc})") from exc


# ---------------------------------------------------------------- validation
def _inside(root: Path, relative: str, shown_kind: str) -> Path:
    """Resolve ``relative`` under ``root``; refuse anything that leaves it."""
    if not isinstance(relative, str) or not relative:
        raise JobError(str(relative), f"{shown_kind} path must be a non-empty string")
    if os.path.isabs(relative):
        raise JobError(relative, f"{shown_kind} path must be relative to the mounted folder")
    resolved = (root / relative).resolve()
    if not resolved.is_relative_to(root.resolve()):
        raise JobError(relative, f"{shown_kind} path is outside the mounted folder {root}")
    return resolved


def validate_job(job: Any, index: int) -> dict[str, Any]:
    """Check one job's fields and fill the defaults (1 thread, batch 64)."""
    where = f"job {index}"
    if not isinstance(job, dict):
        raise JobError(where, "a job must be a JSON object")
    unknown = set(job) - JOB_KEYS
    if unknown:
        raise JobError(where, f"unknown job keys {sorted(unknown)}")
    for key in ("model", "inputs", "output", "graph_optimization"):
        if key not in job:
            raise JobError(where, f"missing job key {key!r}")
    if job["graph_optimization"] not in GRAPH_LEVELS:
        raise JobError(where, f"graph_optimization must be one of {GRAPH_LEVELS}")
    filled = {"id": str(index), "intra_op_threads": 1, "inter_op_threads": 1,
              "batch_size": 64, **job}
    for key in ("intra_op_threads", "inter_op_threads", "batch_size"):
        value = filled[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise JobError(where, f"{key} must be a positive integer")
    if not str(filled["output"]).endswith(".npz"):
        raise JobError(str(filled["output"]), "output must end in .npz")
    return filled


def _session(model: Path, shown: str, job: dict[str, Any]) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(
        ort.GraphOptimizationLevel, "ORT_" + job["graph_optimization"].upper())
    options.intra_op_num_threads = job["intra_op_threads"]
    options.inter_op_num_threads = job["inter_op_threads"]
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3
    if not model.is_file():
        raise JobError(shown, "model not found")
    try:
        return ort.InferenceSession(str(model), sess_options=options,
                                    providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own unexported exception types
        raise JobError(shown, f"onnxruntime cannot load the model ({exc})") from exc


def _check_inputs(session: Any, arrays: dict[str, Array], shown: str) -> int:
    """Names, dtypes and static dims must match the graph; returns the batch size N."""
    wanted = {meta.name: meta for meta in session.get_inputs()}
    missing = sorted(set(wanted) - set(arrays))
    extra = sorted(set(arrays) - set(wanted))
    if missing:
        raise JobError(shown, f"missing graph input(s) {missing}; the file has {sorted(arrays)}")
    if extra:
        raise JobError(shown, f"array(s) {extra} are not inputs of the graph {sorted(wanted)}")
    sizes = set()
    for name, meta in wanted.items():
        array = arrays[name]
        dtype = ORT_DTYPES.get(meta.type)
        if dtype is None:
            raise JobError(shown, f"input {name!r} has unsupported type {meta.type}")
        if array.dtype != dtype:
            raise JobError(shown, f"input {name!r} has dtype {array.dtype}, "
                                  f"the graph wants {dtype}")
        if array.ndim != len(meta.shape):
            raise JobError(shown, f"input {name!r} has shape {array.shape}, "
                                  f"the graph wants {meta.shape}")
        for axis, dim in enumerate(meta.shape):
            if isinstance(dim, int) and array.shape[axis] != dim:
                raise JobError(shown, f"input {name!r} has shape {array.shape}, "
                                      f"the graph wants {meta.shape}")
        if array.ndim == 0 or array.shape[0] == 0:
            raise JobError(shown, f"input {name!r} has no batch axis or an empty batch")
        sizes.add(array.shape[0])
    if len(sizes) != 1:
        raise JobError(shown, f"inputs disagree on the batch size: {sorted(sizes)}")
    return int(sizes.pop())


# ---------------------------------------------------------------- execution
def _run_batched(session: Any, arrays: dict[str, Array], n: int,
                 batch: int, shown: str) -> dict[str, Array]:
    names = [meta.name for meta in session.get_outputs()]
    chunks: dict[str, list[Array]] = {name: [] for name in names}
    for start in range(0, n, batch):
        feed = {key: value[start:start + batch] for key, value in arrays.items()}
        for name, value in zip(names, session.run(names, feed), strict=True):
            if value.ndim == 0 or value.shape[0] != min(batch, n - start):
                raise JobError(shown, f"graph output {name!r} has no batch axis "
                                      f"(shape {value.shape}); it cannot be batched")
            chunks[name].append(value)
    return {name: np.concatenate(parts, axis=0) for name, parts in chunks.items()}


def _session_record(session: Any, job: dict[str, Any]) -> dict[str, Any]:
    import onnxruntime as ort

    return {
        "onnxruntime": ort.__version__,
        "numpy": np.__version__,
        "providers": session.get_providers(),
        "session_options": {
            "graph_optimization": job["graph_optimization"],
            "intra_op_threads": job["intra_op_threads"],
            "inter_op_threads": job["inter_op_threads"],
            "execution_mode": "sequential",
        },
    }


def run_jobs(jobs_file: Path, in_root: Path, out_root: Path) -> list[Path]:
    """Validate every job, then run them all in this process; returns output paths."""
    try:
        spec = json.loads(jobs_file.read_text())
    except (OSError, ValueError) as exc:
        raise JobError(str(jobs_file), f"cannot read the job list ({exc})") from exc
    if not isinstance(spec, dict) or not isinstance(spec.get("jobs"), list) or not spec["jobs"]:
        raise JobError(str(jobs_file), 'the job list must be {"jobs": [ ... ]} with >= 1 job')
    jobs = [validate_job(job, i) for i, job in enumerate(spec["jobs"])]
    outputs = [_inside(out_root, job["output"], "output") for job in jobs]
    if len(set(outputs)) != len(outputs):
        raise JobError(str(jobs_file), "two jobs write the same output")

    # One session is kept at a time (a stage has hundreds of models; jobs come grouped by
    # model), and each distinct input file is read once.
    current: dict[tuple[Any, ...], Any] = {}
    loaded: dict[Path, dict[str, Array]] = {}

    def session_for(model: Path, job: dict[str, Any]) -> Any:
        key = (model, job["graph_optimization"], job["intra_op_threads"],
               job["inter_op_threads"])
        if key not in current:
            current.clear()
            current[key] = _session(model, job["model"], job)
        return current[key]

    prepared = []
    for job, output in zip(jobs, outputs, strict=True):
        model = _inside(in_root, job["model"], "model")
        inputs = _inside(in_root, job["inputs"], "inputs")
        if inputs not in loaded:
            loaded[inputs] = read_npz(inputs, job["inputs"])
        n = _check_inputs(session_for(model, job), loaded[inputs], job["inputs"])
        prepared.append((job, model, inputs, output, n))

    started = time.monotonic()
    for done, (job, model, inputs, output, n) in enumerate(prepared, 1):
        session, arrays = session_for(model, job), loaded[inputs]
        results = _run_batched(session, arrays, n, job["batch_size"], job["model"])
        data = npz_bytes(results)
        record = {
            **_session_record(session, job),
            "id": job["id"], "model": job["model"], "inputs": job["inputs"],
            "output": job["output"], "batch_size": job["batch_size"], "n": n,
            "model_sha256": sha256_file(model), "inputs_sha256": sha256_file(inputs),
            "output_sha256": hashlib.sha256(data).hexdigest(),
            "graph_outputs": sorted(results),
        }
        write_atomic(output, data)
        write_atomic(meta_path(output), canonical_json(record))
        elapsed = time.monotonic() - started
        rate = done / elapsed if elapsed > 0 else float("inf")
        print(f"worker: progress {done}/{len(prepared)} jobs, {rate:.2f} jobs/s, "
              f"eta {(len(prepared) - done) / rate:.0f} s", file=sys.stderr, flush=True)
    return outputs


def meta_path(output: Path) -> Path:
    """The metadata file that accompanies an output .npz."""
    return output.with_name(output.name[: -len(".npz")] + ".meta.json")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="worker", description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=Path, required=True)
    parser.add_argument("--in-root", type=Path, required=True)
    parser.add_argument("--out-root", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        outputs = run_jobs(args.jobs, args.in_root, args.out_root)
    except JobError as exc:
        print(f"worker: error: {exc}", file=sys.stderr)
        return 2
    print(f"worker: wrote {len(outputs)} output(s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
