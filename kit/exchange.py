"""The one-exchange command: one model, one input .npz, one runtime, one output .npz.

``python -m kit run --runtime ref|cand --model M.onnx --inputs IN.npz --output OUT.npz``
stages the model and inputs in a private folder (the folder a container sees read-only),
runs the worker there under the chosen backend and moves the output .npz (one array per
graph output, named as in the graph) and its ``.meta.json`` into place.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from kit.backends import run_jobs, select_backend
from kit.errors import KitError
from kit.runtimes import get_runtime
from kit.worker import canonical_json, meta_path, write_atomic


def _stage(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
    os.chmod(target, 0o644)


def exchange(runtime_name: str, model: Path, inputs: Path, output: Path,
             backend: str | None = None, batch_size: int = 64) -> Path:
    """Run ``model`` on ``inputs`` under one runtime and write ``output``; returns it."""
    runtime = get_runtime(runtime_name)
    for path, what in ((model, "model"), (inputs, "inputs")):
        if not Path(path).is_file():
            raise KitError(f"{path}: {what} file not found")
    output = Path(output)
    if output.suffix != ".npz":
        raise KitError(f"{output}: the output must be an .npz file")
    chosen = select_backend(backend)
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".kit-exchange-", dir=output.parent) as tmp:
        staged_in, staged_out = Path(tmp, "in"), Path(tmp, "out")
        staged_in.mkdir()
        os.chmod(tmp, 0o755)
        os.chmod(staged_in, 0o755)
        _stage(Path(model), staged_in / "model.onnx")
        _stage(Path(inputs), staged_in / "inputs.npz")
        job = {"id": "exchange", "model": "model.onnx", "inputs": "inputs.npz",
               "output": "output.npz", "batch_size": batch_size}
        try:
            (result,) = run_jobs(runtime, [job], staged_in, staged_out, chosen)
        except KitError as exc:
            # Name the caller's files, not the staged copies.
            message = str(exc).replace("model.onnx", str(model))
            raise type(exc)(message.replace("inputs.npz", str(inputs))) from exc
        record = json.loads(meta_path(result).read_text())
        record.update(model=str(model), inputs=str(inputs), output=str(output),
                      backend=chosen, runtime=runtime.name)
        os.replace(result, output)
        write_atomic(meta_path(output), canonical_json(record))
    return output
