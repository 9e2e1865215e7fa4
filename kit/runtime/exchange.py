"""The one-exchange command: one model, one input .npz, one runtime, one output .npz.

``python -m kit run --runtime ref|cand --model M.onnx --inputs IN.npz --output OUT.npz``
stages the model and inputs in a private folder (the folder a container sees read-only),
runs the worker there under the chosen backend and moves the output .npz (one array per
graph output, named as in the graph) and its ``.meta.json`` into place.

The boundary, checked before any runtime sees a file (``InputRefused``, naming the
caller's file):

- the model and the inputs must be readable files. They are copied into the staging
  folder, never linked: the caller's files keep their inode, mode and bytes, and the
  worker hashes exactly the bytes it ran;
- every tensor of the model whose data is external (read with onnx: ``data_location``
  and ``external_data``) must name a file beside the model by the worker's rule
  (``kit.runtime.worker.external_file``: relative, no ``..``, not leaving the folder through a
  symbolic link). Those files are staged with the model at the same relative location;
  the worker checks them again (it is what every backend and stage runs) and hashes them
  into ``model_sha256``;
- the output must be an ``.npz`` path that is not a folder, lies under no file, does not
  lie inside a staging folder, and is not (through a symbolic link, ``..`` or a hard
  link), nor has as its ``.meta.json``, the model or the inputs;
- an output or ``.meta.json`` already there is replaced only when the kit wrote it (its
  record beside it names its bytes, ``check_replaceable``), keeping its mode; a user's
  file of either name is refused and left as it is.

Staging folders are ``.kit-exchange-<pid>-<random>`` beside the output. A killed
``kit run`` leaves its folder behind; the next ``kit run`` writing beside that output
removes every such folder whose process is gone. The worker's refusals name the staged
files; they are mapped back to the caller's.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kit.errors import InputRefused, WorkerFailed, onnxruntime_said
from kit.runtime import scratch
from kit.runtime.backends import run_jobs, select_backend, worker_error
from kit.runtime.runtimes import get_runtime
from kit.runtime.worker import (
    JobError,
    alive,
    canonical_json,
    external_file,
    meta_path,
    sha256_file,
    write_atomic,
)

STAGING_PREFIX = ".kit-exchange-"
STAGED_INPUTS = "inputs.npz"
STAGED_OUTPUT = "output.npz"
# The most rows ``kit run`` hands onnxruntime in one call (``--batch-size``, 1 to 2**20).
# The worker's job protocol bounds a batch only below (a positive integer); no input the
# worker admits (MAX_INPUT_BYTES) holds more rows of more than 2 KiB each, and 10**30 or
# 2**63 said nothing a whole-file batch does not.
MAX_BATCH_SIZE = 1 << 20


# ---------------------------------------------------------------- the boundary
def check_source(path: Path, what: str) -> Path:
    """``path`` as given, once it is a file that can be read; InputRefused otherwise."""
    if not path.is_file():
        raise InputRefused(f"{path}: {what} file not found")
    if not os.access(path, os.R_OK):
        raise InputRefused(f"{path}: the {what} file cannot be read (permission denied); "
                           "give the kit a file it may read")
    return path


def _tensors(model: Any) -> Iterator[Any]:
    """Every TensorProto in an onnx ModelProto: initializers, sparse ones, attribute
    tensors, in every graph, subgraph, function and training graph (any message field)."""
    stack = [model]
    while stack:
        message = stack.pop()
        if message.DESCRIPTOR.name == "TensorProto":
            yield message
            continue
        for field, value in message.ListFields():
            if field.type == field.TYPE_MESSAGE:
                stack.extend(value if field.is_repeated else [value])


def external_data(model: Path) -> dict[str, Path]:
    """location -> the caller's file, for each tensor of ``model`` whose data is external;
    InputRefused naming the model when it cannot be read or a location leaves its folder."""
    import onnx

    try:
        proto = onnx.load(str(model), load_external_data=False)
    except Exception as exc:  # protobuf's DecodeError and onnx's errors share no base
        raise InputRefused(f"{model}: not a readable ONNX model ({exc})") from exc
    files = {}
    for tensor in _tensors(proto):
        entries = {entry.key: entry.value for entry in tensor.external_data}
        if tensor.data_location != onnx.TensorProto.EXTERNAL and "location" not in entries:
            continue
        try:
            files[entries.get("location", "")] = external_file(model.parent,
                                                               entries.get("location"))
        except JobError as exc:
            raise InputRefused(f"{model}: tensor {tensor.name!r}: external data location "
                               f"{exc.path} {exc.what}") from exc
    return {location: model.parent / location for location in files}


def _same_file(a: Path, b: Path) -> bool:
    """True when ``a`` and ``b`` name one file (by resolved path, or one inode)."""
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # either is missing: nothing to overwrite
        return False


def check_output(output: Path, protected: dict[Path, str]) -> Path:
    """``output`` as given, once writing it and its ``.meta.json`` cannot overwrite a
    ``protected`` file (path -> what it is) and its folder can hold them."""
    if output.suffix != ".npz":
        raise InputRefused(f"{output}: the output must be an .npz file")
    for target in (output, meta_path(output)):
        if target.is_dir():
            raise InputRefused(f"{output}: {target} is a folder; give --output the path "
                               "of an .npz file to write")
        for source, what in protected.items():
            if _same_file(target, source):
                raise InputRefused(f"{output}: writing {target.name} would overwrite the "
                                   f"{what} {source}; give --output another path")
    for folder in output.parents:
        if folder.exists() or folder.is_symlink():
            if not folder.is_dir():
                raise InputRefused(f"{output}: {folder} is a file, not a folder; give "
                                   "--output a path under a folder")
            break
    inside = [part for part in output.resolve().parent.parts
              if part.startswith(STAGING_PREFIX)]
    if inside:
        raise InputRefused(f"{output}: lies inside the staging folder {inside[0]} of a kit "
                           "run; give --output a path outside it")
    return output


KIT_RECORD = {"id", "output_sha256", "runtime", "backend", "model_sha256"}


def check_replaceable(output: Path) -> None:
    """An output and its ``.meta.json`` that exist are replaced only when the kit wrote
    them: the record is the kit's (``KIT_RECORD``'s fields) and names the output's sha256,
    or that of the output a killed run was about to move in (its staging folder, its
    process gone, still holds it); anything else is the user's and refused by name."""
    meta = meta_path(output)
    if not (output.exists() or meta.exists()):
        return
    record: Any = None
    if meta.is_file() and not meta.is_symlink():
        try:
            record = json.loads(meta.read_bytes())
        except (OSError, ValueError):
            record = None
    if not (isinstance(record, dict) and set(record) >= KIT_RECORD):
        taken = meta if meta.exists() else output
        raise InputRefused(f"{taken}: a file the kit did not write (no record of the kit's "
                           "beside it); move it, or give --output another path")
    if not output.exists():
        return
    pending = {sha256_file(path) for path in output.parent.glob(
        f"{STAGING_PREFIX}*/out/{STAGED_OUTPUT}")
        if not alive(scratch.owner(path.parents[1], STAGING_PREFIX) or os.getpid())}
    if output.is_symlink() or not output.is_file() or \
            record["output_sha256"] not in {sha256_file(output), *pending}:
        raise InputRefused(f"{output}: a file the kit did not write (its bytes are not "
                           f"those {meta.name} records); move it, or give --output another "
                           "path")


# ---------------------------------------------------------------- staging
def remove_stale(folder: Path) -> list[Path]:
    """Remove the staging folders in ``folder`` whose process is gone; returns them."""
    return scratch.remove_stale(folder, STAGING_PREFIX)


@contextmanager
def staging(folder: Path) -> Iterator[Path]:
    """A private ``.kit-exchange-<pid>-<random>`` folder in ``folder``, removed on exit;
    the folders killed runs left there are removed first."""
    try:
        tmp = scratch.make(folder, STAGING_PREFIX)
    except OSError as exc:
        raise InputRefused(f"{folder}: cannot make the staging folder there "
                           f"({exc.strerror or exc}); give --output a writable folder") from exc
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def stage(source: Path, target: Path) -> None:
    """Copy ``source``'s bytes to ``target`` (``SHARED_FILE`` whatever the umask: the
    container's user reads it); the source is only read."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        shutil.copyfile(source, target)
    except OSError as exc:
        raise InputRefused(f"{source}: cannot be read ({exc.strerror or exc})") from exc
    os.chmod(target, scratch.SHARED_FILE)


# ---------------------------------------------------------------- the exchange
def _callers_names(exc: WorkerFailed, in_root: Path, staged: dict[str, Path]) -> str:
    """The worker's refusal with each staged file named as the caller gave it, and of
    onnxruntime's message what it said (``onnxruntime_said``), on one line."""
    reason = worker_error(exc.stderr) or str(exc)
    for name in sorted(staged, key=len, reverse=True):
        reason = reason.replace(str(in_root / name), str(staged[name]))
        if reason.startswith(name + ": "):
            reason = f"{staged[name]}: {reason[len(name) + 2:]}"
    return onnxruntime_said(reason)


def exchange(runtime_name: str, model: Path, inputs: Path, output: Path,
             backend: str | None = None, batch_size: int = 64) -> Path:
    """Run ``model`` on ``inputs`` under one runtime and write ``output``; returns it."""
    runtime = get_runtime(runtime_name)
    if not 1 <= batch_size <= MAX_BATCH_SIZE:
        shown = batch_size if abs(batch_size) < 10 ** 30 else f"of {len(str(batch_size))} digits"
        raise InputRefused(f"--batch-size {shown}: must be an integer from 1 to "
                           f"{MAX_BATCH_SIZE} (2**20)")
    model = check_source(Path(model), "model")
    inputs = check_source(Path(inputs), "inputs")
    weights = external_data(model)
    output = check_output(Path(output), {model: "model", inputs: "inputs", **{
        path: f"external data of {model}" for path in weights.values()}})
    check_replaceable(output)
    chosen = select_backend(backend)
    with staging(output.parent) as tmp:
        staged_in, staged_out = tmp / "in", tmp / "out"
        staged = {f"model/{os.path.normpath(location)}": path
                  for location, path in weights.items()}
        staged.update({f"model/{model.name}": model, STAGED_INPUTS: inputs})
        for name, source in staged.items():
            stage(source, staged_in / name)
        for folder in {path.parent for path in staged_in.rglob("*")}:
            os.chmod(folder, scratch.SHARED_FOLDER)  # the container enters them
        job = {"id": "exchange", "model": f"model/{model.name}", "inputs": STAGED_INPUTS,
               "output": STAGED_OUTPUT, "batch_size": batch_size}
        try:
            (result,) = run_jobs(runtime, [job], staged_in, staged_out, chosen)
        except WorkerFailed as exc:
            reason = _callers_names(exc, staged_in.resolve(), staged)
            raise WorkerFailed(f"{reason} ({runtime.name} worker, {chosen} backend)",
                               exc.stderr) from exc
        record = json.loads(meta_path(result).read_text())
        record.update(model=str(model), inputs=str(inputs), output=str(output),
                      backend=chosen, runtime=runtime.name)
        write_atomic(meta_path(result), canonical_json(record))
        try:
            for made, target in ((meta_path(result), meta_path(output)), (result, output)):
                if target.is_file():  # a file replaced keeps its mode (a user's 0600 stays)
                    os.chmod(made, target.stat().st_mode & 0o7777)
                os.replace(made, target)
        except OSError as exc:
            raise InputRefused(f"{output}: cannot be written ({exc.strerror or exc})") from exc
    return output
