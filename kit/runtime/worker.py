"""The tensor-exchange worker: runs ONNX models under one onnxruntime, nothing else.

This file is copied as-is into both runtime images and is run by the ``venv`` backend
from its own virtual environment, so it imports only numpy, onnxruntime and the standard
library (onnxruntime lazily, so that the orchestrator can reuse the .npz helpers without
it). Never import the ``kit`` package from here.

Usage::

    python worker.py --jobs JOBS.json --in-root IN --out-root OUT
    python worker.py --serve --in-root IN --out-root OUT    (one jobs file per stdin line)

``JOBS.json`` holds ``{"jobs": [JOB, ...]}``; each JOB names a model and an input .npz
(paths relative to IN), an output .npz (relative to OUT), the graph optimisation level and
the thread counts. Every job is validated before any runs, so bad input writes nothing.
Rows run ``batch_size`` at a time and every output must carry them on its first axis; a
job with ``"whole": true`` feeds its inputs as they are in one call and keeps each output
as it comes (a tensor laid out by attention head or by sequence position has no batch
axis), so its inputs need share no first axis either (a MatMul of (3, 4) and (4, 5)).
Each output .npz holds one array per graph output, keyed by the output's name, and a
``.meta.json`` beside it records the runtime, session options and the sha256 of model,
inputs and output. Both are written to a temporary name and renamed. Errors print
``worker: error: FILE: WHAT`` on stderr and exit with status 2.

External data (a tensor whose bytes sit in the file its ``location`` names) must lie
beside the model: a location that is absolute, has a ``..`` part, resolves through a
symbolic link out of the model's folder, is onnxruntime's in-memory tag or names no file
is refused before any runtime sees the model. onnx is in neither runtime, so the worker
reads the locations from the protobuf wire format (``external_tensors``).
``model_sha256`` then covers the .onnx and each external file (the .onnx's own sha256
when there is none) and ``model_external_data`` gives each file's sha256.

An input .npz is judged from its members' .npy headers before any data is read or
inflated (``npz_headers``): every member a plain .npy, numeric or fixed-width text for a
string input (no pickle, no object dtype), no name twice, each member's size what its
header declares, at most ``MAX_INPUT_BYTES`` declared in all, names, dtypes and static
dims those of the graph.
NaN or infinite inputs are refused, not recorded: the studies compare outputs by
distance, and one NaN would void every distance it touches. A job with ``"nonfinite":
true`` (``kit audit``'s, whose comparison counts a NaN on one side only as infinitely far
and equal NaN as equal) takes them, and its record counts them (``nonfinite_inputs``).
A model that onnxruntime cannot load or run (a Conv whose weights have the wrong channel
count) is a refusal naming the model and the onnxruntime version, never a traceback.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import lzma
import math
import os
import re
import sys
import tempfile
import time
import zipfile
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]  # any dtype, any shape

# The kit's one temporary name, for files and folders: ``.NAME.kit<pid>-<8 random>.tmp``
# (``.old.tmp`` for a folder moved aside), made beside its target and renamed over it.
# Only the kit makes such names, and the pid says whether the writer still runs: a
# temporary is removed by another process only once its writer is gone.
TEMPORARY = re.compile(r"\.(?P<name>.+)\.kit(?P<pid>[1-9][0-9]{0,9})-[a-z0-9_]{8}(\.old)?\.tmp")

# Every level any release names; which a release offers is its own enum's (offered_levels).
GRAPH_LEVELS = ("disable_all", "enable_basic", "enable_extended", "enable_layout", "enable_all")
JOB_KEYS = {
    "id", "model", "inputs", "output", "graph_optimization",
    "intra_op_threads", "inter_op_threads", "batch_size", "whole", "nonfinite",
}
# onnxruntime's tensor type names for the dtypes the kit exchanges.
ORT_DTYPES = {
    "tensor(float)": np.dtype("float32"), "tensor(double)": np.dtype("float64"),
    "tensor(float16)": np.dtype("float16"), "tensor(int64)": np.dtype("int64"),
    "tensor(int32)": np.dtype("int32"), "tensor(int16)": np.dtype("int16"),
    "tensor(int8)": np.dtype("int8"), "tensor(uint64)": np.dtype("uint64"),
    "tensor(uint32)": np.dtype("uint32"), "tensor(uint16)": np.dtype("uint16"),
    "tensor(uint8)": np.dtype("uint8"), "tensor(bool)": np.dtype("bool"),
}
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)
# The most bytes the arrays of one input .npz may declare, checked from the .npy headers
# before any data is read or decompressed: far above the studies' largest input file (a
# CIFAR test set, 10,000 images, 123 MB), far below what a zip bomb declares.
MAX_INPUT_BYTES = 2 << 30
# What reading an untrusted .npz can raise: zip structure, each member's codec, numpy
# (zipfile raises NotImplementedError for a member stored with a compression method it
# does not implement, such as Deflate64 or PPMd).
NPZ_ERRORS = (zipfile.BadZipFile, zlib.error, lzma.LZMAError, EOFError, OSError, ValueError,
              KeyError, NotImplementedError, RuntimeError)  # RuntimeError covers RecursionError
Declared = dict[str, tuple[tuple[int, ...], np.dtype[Any]]]  # array name -> shape, dtype


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
    timestamps, stored uncompressed so no zlib version enters the bytes); a scalar stays
    a scalar (``np.ascontiguousarray`` would make it one element long)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for name in sorted(arrays):
            payload = io.BytesIO()
            np.lib.format.write_array(  # type: ignore[no-untyped-call]
                payload, np.asarray(arrays[name], order="C"), allow_pickle=False)
            info = zipfile.ZipInfo(name + ".npy", date_time=ZIP_EPOCH)
            info.external_attr = 0o644 << 16
            archive.writestr(info, payload.getvalue())
    return buffer.getvalue()


def temporary_prefix(name: str) -> str:
    """The start of this process's temporary name for ``name`` (``TEMPORARY``), for
    ``tempfile``'s ``prefix``, with ``suffix=".tmp"`` (or ``".old.tmp"``)."""
    return f".{name}.kit{os.getpid()}-"


PID_MAX = 1 << 22  # Linux's largest pid_max: no process has a larger pid


def alive(pid: int) -> bool:
    """Whether a process with this pid runs on this machine (none outside 1 .. PID_MAX:
    ``os.kill`` would take 0 or a negative pid for a process group, and overflow on a
    pid past a C int)."""
    if not 0 < pid <= PID_MAX:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def stale(name: str) -> bool:
    """Whether ``name`` is one of the kit's temporaries whose writer is gone."""
    found = TEMPORARY.fullmatch(name)
    return found is not None and not alive(int(found["pid"]))


def umask() -> int:
    """This process's umask, read from the ``Umask:`` line of Linux's ``/proc/self/status``
    (nothing changed); where that line is missing, ``os.umask`` set to 0o077 and restored
    at once (a file another thread makes in between gets the stricter mode)."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    found = os.umask(0o077)
    os.umask(found)
    return found


def file_mode(path: Path, new: int | None = None) -> int:
    """The mode for a file written to ``path``: the mode of the file there (a user's 0600
    stays 0600), else ``new`` or, by default, what the umask gives a new file."""
    try:
        return os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        return 0o666 & ~umask() if new is None else new


def write_atomic(path: Path, data: bytes, new: int | None = None) -> None:
    """Write bytes to a temporary name beside ``path`` and rename it into place, with the
    mode ``file_mode`` gives (``new``: a new file's mode, by default the umask's)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=temporary_prefix(path.name), suffix=".tmp",
                               dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, file_mode(path, new))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_npz(path: Path, arrays: dict[str, Array], new: int | None = None) -> None:
    """Deterministic, atomic .npz writer shared by the worker and the orchestrator."""
    write_atomic(path, npz_bytes(arrays), new)


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
    for key in ("whole", "nonfinite"):
        if not isinstance(filled.setdefault(key, False), bool):
            raise JobError(where, f"{key} must be true or false")
    if not str(filled["output"]).endswith(".npz"):
        raise JobError(str(filled["output"]), "output must end in .npz")
    return filled


# ---------------------------------------------------------------- the model's external data
# onnxruntime reads a tensor stored as external data from the file its ``location`` names,
# relative to the model's folder: 1.20.1 follows any path (``../../etc/passwd`` becomes
# weights) and reads ORT_MEMORY_TAG as a raw memory address. onnx is in neither runtime
# lock, so the worker reads the few fields it needs from the protobuf wire format itself:
# for each message kind, the fields (onnx.proto numbers) that nest a kind that can hold a
# tensor, and a TensorProto's name, external_data entries and data_location.
ONNX_NESTING = {
    "model": {7: "graph", 20: "training", 25: "function"},  # ModelProto
    "training": {1: "graph", 2: "graph"},  # TrainingInfoProto
    "graph": {1: "node", 5: "tensor", 15: "sparse"},  # GraphProto
    "function": {7: "node", 11: "attribute"},  # FunctionProto
    "node": {5: "attribute"},  # NodeProto
    "attribute": {5: "tensor", 6: "graph", 10: "tensor", 11: "graph", 22: "sparse",
                  23: "sparse"},  # AttributeProto t g tensors graphs sparse_tensor(s)
    "sparse": {1: "tensor", 2: "tensor"},  # SparseTensorProto values, indices
}
TENSOR_NAME, TENSOR_EXTERNAL_DATA, TENSOR_DATA_LOCATION, EXTERNAL = 8, 13, 14, 1
ORT_MEMORY_TAG = "*/_ORT_MEM_ADDR_/*"


def _varint(data: memoryview, at: int) -> tuple[int, int]:
    value = shift = 0
    while shift < 64:
        if at >= len(data):
            break
        byte = data[at]
        value, at, shift = value | (byte & 0x7F) << shift, at + 1, shift + 7
        if byte < 0x80:
            return value, at
    raise ValueError(f"a truncated or overlong varint at byte {at}")


def _fields(data: memoryview) -> Iterator[tuple[int, int | memoryview]]:
    """(field number, value) of one protobuf message: an int for a varint, the bytes of a
    length-delimited field; fixed-width fields are skipped."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
            yield number, value
            continue
        if wire == 2:
            length, at = _varint(data, at)
            end = at + length
        elif wire in (1, 5):
            end = at + (8 if wire == 1 else 4)
        else:
            raise ValueError(f"protobuf wire type {wire} at byte {at}")
        if end > len(data):
            raise ValueError(f"field {number} runs past the end of its message")
        if wire == 2:
            yield number, data[at:end]
        at = end


def _external_entry(tensor: memoryview) -> tuple[str, str | None] | None:
    """(tensor name, its location or None) when the tensor's data is external."""
    name, location, external = "", None, False
    for number, value in _fields(tensor):
        if number == TENSOR_NAME and isinstance(value, memoryview):
            name = bytes(value).decode("utf-8")
        elif number == TENSOR_DATA_LOCATION and value == EXTERNAL:
            external = True
        elif number == TENSOR_EXTERNAL_DATA and isinstance(value, memoryview):
            entry = {key: bytes(text).decode("utf-8") for key, text in _fields(value)
                     if isinstance(text, memoryview)}
            if entry.get(1) == "location":
                location, external = entry.get(2, ""), True
    return (name, location) if external else None


def external_tensors(model: bytes) -> list[tuple[str, str | None]]:
    """(name, location) of every tensor of an ONNX model whose data is external (marked
    so, or naming a location), in any graph, subgraph, function or training graph;
    ValueError when the bytes are not a protobuf message."""
    found = []
    stack: list[tuple[str, memoryview]] = [("model", memoryview(model))]
    while stack:  # a stack, not recursion: a model may nest graphs deeply
        kind, message = stack.pop()
        if kind == "tensor":
            entry = _external_entry(message)
            found += [entry] if entry else []
            continue
        nesting = ONNX_NESTING[kind]
        stack += [(nesting[number], value) for number, value in _fields(message)
                  if number in nesting and isinstance(value, memoryview)]
    return found


def external_file(folder: Path, location: str | None) -> Path:
    """The file an external-data ``location`` names, once it is a relative path without
    ``..`` that stays in ``folder`` (symbolic links resolved) and is a file there;
    JobError(location, why) otherwise."""
    shown = repr(location or "")
    fix = ("; keep the data beside the model (onnx.save_model(..., save_as_external_data="
           "True, location='NAME.bin'))")
    if not location or "\0" in location:
        raise JobError(shown, "is empty: the tensor is marked external but names no "
                              "file" + fix)
    if location == ORT_MEMORY_TAG:
        raise JobError(shown, "is onnxruntime's in-memory tag: the data would be read "
                              "from a raw memory address" + fix)
    if os.path.isabs(location):
        raise JobError(shown, "is an absolute path, outside the model's folder" + fix)
    if ".." in Path(location).parts:
        raise JobError(shown, "climbs out of the model's folder with '..'" + fix)
    resolved = (folder / location).resolve()
    if not resolved.is_relative_to(folder.resolve()):
        raise JobError(shown, f"resolves through a symbolic link to {resolved}, outside "
                              "the model's folder" + fix)
    if not resolved.is_file():
        raise JobError(shown, "is not a file beside the model" + fix)
    return resolved


def model_files(model: Path, shown: str) -> dict[str, Path]:
    """The model's external data files (location -> file), each checked by
    ``external_file``; JobError naming the model before any runtime sees it."""
    if not model.is_file():
        raise JobError(shown, "model not found")
    try:
        tensors = external_tensors(model.read_bytes())
    except (OSError, ValueError) as exc:
        raise JobError(shown, f"not a readable ONNX model ({exc})") from exc
    files = {}
    for name, location in tensors:
        try:
            files[str(location)] = external_file(model.parent, location)
        except JobError as exc:
            raise JobError(shown, f"tensor {name!r}: external data location {exc.path} "
                                  f"{exc.what}") from exc
    return files


def model_sha256(model: Path, files: dict[str, Path]) -> str:
    """sha256 over the .onnx bytes then, for each external file in sorted order of
    location, a NUL, the location, a NUL, its size (8 bytes, big-endian) and its bytes;
    for a model without external data, the sha256 of the .onnx alone."""
    digest = hashlib.sha256(model.read_bytes())
    for location in sorted(files):
        data = files[location].read_bytes()
        digest.update(b"\0" + location.encode() + b"\0" + len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


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
        raise JobError(shown, f"the model does not load under onnxruntime {ort.__version__}: "
                              f"{_one_line(exc)}") from exc


# ---------------------------------------------------------------- inputs, headers first
def _npy_header(member: Any, name: str, shown: str) -> tuple[tuple[int, ...], np.dtype[Any]]:
    """The shape and dtype a .npy member declares; its data is not read."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(member)  # type: ignore[no-untyped-call]
    except ValueError as exc:
        raise JobError(shown, f"member {name!r} is not a .npy array (a pickle, or another "
                              "format?); write the inputs with numpy.savez") from exc
    readers = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}
    if version not in readers:
        raise JobError(shown, f"member {name!r} is a .npy file of version {version}; "
                              "write the inputs with numpy.savez (versions 1.0 and 2.0)")
    shape, _, dtype = readers[version](member)  # type: ignore[no-untyped-call]
    if dtype.hasobject:
        raise JobError(shown, f"member {name!r} holds Python objects (dtype {dtype}), which "
                              "only a pickle can read; the worker reads numeric arrays only")
    if any(dim < 0 for dim in shape):
        raise JobError(shown, f"member {name!r} declares the shape {shape}")
    return tuple(shape), dtype


def _headers(archive: zipfile.ZipFile, shown: str) -> Declared:
    twice = sorted(name for name, count in Counter(archive.namelist()).items() if count > 1)
    if twice:
        raise JobError(shown, f"the archive holds {twice} more than once (a zip keeps the "
                              "last silently); write the inputs again with numpy.savez")
    declared: Declared = {}
    total = 0
    for info in archive.infolist():
        if not info.filename.endswith(".npy"):
            raise JobError(shown, f"member {info.filename!r} is not a .npy array")
        with archive.open(info) as member:
            shape, dtype = _npy_header(member, info.filename, shown)
            offset = member.tell()
        nbytes = math.prod(shape) * dtype.itemsize
        total += nbytes
        if total > MAX_INPUT_BYTES:
            raise JobError(shown, f"member {info.filename!r} declares {shape} {dtype}, "
                                  f"past {MAX_INPUT_BYTES} bytes for one input file; "
                                  "split the inputs into smaller files")
        if info.file_size != offset + nbytes:
            raise JobError(shown, f"member {info.filename!r} declares {shape} {dtype} "
                                  f"({nbytes} bytes) but holds {info.file_size - offset}")
        declared[info.filename[: -len(".npy")]] = (shape, dtype)
    return declared


def npz_headers(path: Path, shown: str) -> Declared:
    """Each array's declared shape and dtype, from the .npy headers of an input .npz
    alone (no data read or decompressed); JobError for a member that is no plain numeric
    .npy array, a name held twice, or declared sizes past MAX_INPUT_BYTES."""
    if not path.is_file():
        raise JobError(shown, "input .npz not found")
    try:
        with zipfile.ZipFile(path) as archive:
            return _headers(archive, shown)
    except NPZ_ERRORS as exc:
        raise JobError(shown, f"not a readable .npz archive ({_one_line(exc)})") from exc


def read_inputs(path: Path, shown: str, declared: Declared,
                nonfinite: bool = False) -> dict[str, Array]:
    """The arrays of an input .npz whose headers ``declared`` passed, each finite unless
    ``nonfinite``."""
    arrays = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for name, (shape, dtype) in declared.items():
                with archive.open(name + ".npy") as member:
                    array = np.lib.format.read_array(  # type: ignore[no-untyped-call]
                        member, allow_pickle=False)
                if array.shape != shape or array.dtype != dtype:
                    raise JobError(shown, f"member {name!r}.npy changed while it was read")
                arrays[name] = array
    except NPZ_ERRORS as exc:
        raise JobError(shown, f"not a readable .npz archive ({_one_line(exc)})") from exc
    if not nonfinite:
        refuse_nonfinite(nonfinite_counts(arrays), shown)
    return arrays


def nonfinite_count(array: Array) -> int:
    """How many of a floating-point array's values are NaN or infinite (0 for any other)."""
    return array.size - int(np.count_nonzero(np.isfinite(array))) \
        if array.dtype.kind in "fc" else 0


def nonfinite_counts(arrays: dict[str, Array]) -> dict[str, int]:
    """The arrays that hold NaN or infinite values, and how many each."""
    return {name: n for name, array in arrays.items() if (n := nonfinite_count(array))}


def refuse_nonfinite(counts: dict[str, int], shown: str) -> None:
    """A job without ``"nonfinite": true`` takes finite inputs only (module docstring)."""
    if counts:
        name, bad = min(counts.items())
        raise JobError(shown, f"input {name!r} holds {bad} NaN or infinite value(s); "
                              "the worker takes finite inputs only")


def _check_inputs(session: Any, declared: Declared, shown: str, whole: bool) -> int | None:
    """Names, dtypes and static dims must match the graph; returns the batch size N, the
    first axis every input but a declared scalar shares. A ``whole`` job feeds its inputs
    as they are, so they need share none (N is None where they share none)."""
    wanted = {meta.name: meta for meta in session.get_inputs()}
    missing = sorted(set(wanted) - set(declared))
    extra = sorted(set(declared) - set(wanted))
    if missing:
        raise JobError(shown, f"missing graph input(s) {missing}; the file has "
                              f"{sorted(declared)}")
    if extra:
        raise JobError(shown, f"array(s) {extra} are not inputs of the graph {sorted(wanted)}")
    sizes = set()
    for name, meta in wanted.items():
        shape, found = declared[name]
        text = meta.type == "tensor(string)"  # fed as fixed-width text of any width
        dtype = found if text and found.kind == "U" else ORT_DTYPES.get(meta.type)
        if dtype is None:
            raise JobError(shown, f"input {name!r} has dtype {found}, the graph wants text "
                                  "(numpy str_)" if text else
                                  f"input {name!r} has unsupported type {meta.type}")
        if found != dtype:
            raise JobError(shown, f"input {name!r} has dtype {found}, the graph wants {dtype}")
        if len(shape) != len(meta.shape) or any(
                isinstance(dim, int) and shape[axis] != dim
                for axis, dim in enumerate(meta.shape)):
            raise JobError(shown, f"input {name!r} has shape {shape}, "
                                  f"the graph wants {meta.shape}")
        if not shape and not meta.shape:  # a scalar the graph declares: fed whole to every run
            continue
        if (not shape or shape[0] == 0) and not whole:
            raise JobError(shown, f"input {name!r} has no batch axis or an empty batch")
        sizes.add(shape[0] if shape else 0)
    if whole:
        return sizes.pop() if len(sizes) == 1 else None
    if not sizes:
        raise JobError(shown, "no input carries a batch axis (every input is a scalar)")
    if len(sizes) != 1:
        raise JobError(shown, f"inputs disagree on the batch size: {sorted(sizes)}")
    return int(sizes.pop())


# ---------------------------------------------------------------- execution
# Element types numpy has no dtype for (bfloat16, the float8, float4 and 4- or 2-bit ints).
NARROW = re.compile(r"\((bfloat16|float8\w*|float4\w*|u?int[24])\)")


def _run_batched(session: Any, arrays: dict[str, Array], n: int | None,
                 batch: int, shown: str, whole: bool = False) -> dict[str, Array]:
    """Every row, ``batch`` at a time, each output concatenated along its batch axis; a
    ``whole`` job feeds its inputs as they are in one call and keeps each output as it
    comes (a tensor with no batch axis, such as an attention score laid out by head, or a
    scalar, included; ``n`` is then the inputs' shared first axis or None). A scalar input
    goes whole to every call; a string output is kept as fixed-width text (``storable``)."""
    import onnxruntime as ort

    rows = n or 1  # a whole job's inputs that share no first axis: one run of them
    batch = rows if whole else batch
    names = [meta.name for meta in session.get_outputs()]
    for meta in session.get_outputs():
        if NARROW.search(str(meta.type)):
            raise JobError(shown, f"graph output {meta.name!r} is {meta.type}, a type numpy "
                                  "lacks (onnxruntime refuses it or hands over its raw bytes "
                                  "as uint8); cast it to a wider type in the graph (kit audit "
                                  "does so itself)")
    chunks: dict[str, list[Array]] = {name: [] for name in names}
    for start in range(0, rows, batch):
        feed = {key: value if value.ndim == 0 or whole else value[start:start + batch]
                for key, value in arrays.items()}
        try:
            values = session.run(names, feed)
        except Exception as exc:  # onnxruntime raises its own unexported exception types
            raise JobError(shown, f"the model does not run under onnxruntime "
                                  f"{ort.__version__} (rows {start} to "
                                  f"{min(start + batch, rows) - 1}): "
                                  f"{_one_line(exc)}") from exc
        for name, value in zip(names, values, strict=True):
            value = storable(value, name, shown)
            if not whole and (value.ndim == 0 or value.shape[0] != min(batch, rows - start)):
                raise JobError(shown, f"graph output {name!r} has no batch axis "
                                      f"(shape {value.shape}); it cannot be batched")
            chunks[name].append(value)
    return {name: parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
            for name, parts in chunks.items()}


def storable(value: Any, name: str, shown: str) -> Array:
    """One output as a .npy array stores it without a pickle: a tensor as it is, a string
    tensor (onnxruntime gives an array of Python ``str``) as fixed-width text, a sequence
    of tensors stacked; a map, a ragged sequence or an empty optional (onnxruntime gives
    None) is a JobError naming the output."""
    if value is None:
        raise JobError(shown, f"graph output {name!r} is an empty optional (it holds no value "
                              "on this run); the worker stores tensors only")
    try:
        array = np.asarray(value)
    except ValueError as exc:  # a sequence of tensors of other shapes
        raise JobError(shown, f"graph output {name!r} is a sequence of tensors of other "
                              "shapes; the worker stores tensors only") from exc
    if array.dtype.hasobject:
        if not all(isinstance(item, str) for item in array.flat):
            kinds = sorted({type(item).__name__ for item in array.flat})
            raise JobError(shown, f"graph output {name!r} holds Python objects ({kinds}: a "
                                  "map or a sequence of maps); the worker stores tensors only")
        array = array.astype(np.str_)
    return array


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


def _job_list(jobs_file: Path, out_root: Path) -> tuple[list[dict[str, Any]], list[Path]]:
    """Every job of the list, validated, and the output path of each (no two the same)."""
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
    return jobs, outputs


def offered_levels() -> list[str]:
    """The graph optimisation levels this onnxruntime offers, lowest first (its own enum)."""
    import onnxruntime as ort

    members = ort.GraphOptimizationLevel.__members__
    return [name.removeprefix("ORT_").lower()
            for name, value in sorted(members.items(), key=lambda item: int(item[1]))]


def describe() -> dict[str, Any]:
    """What this runtime is: its onnxruntime version and the levels it offers."""
    import onnxruntime as ort

    return {"onnxruntime": ort.__version__, "levels": offered_levels(),
            "numpy": np.__version__}


def _check_levels(jobs: list[dict[str, Any]], jobs_file: Path) -> None:
    """Refuse, before any job, a level this release does not offer."""
    lacking = sorted({job["graph_optimization"] for job in jobs} - set(offered_levels()))
    if lacking:
        raise JobError(str(jobs_file), f"onnxruntime {describe()['onnxruntime']} offers no "
                                       f"graph optimisation level {', '.join(lacking)} "
                                       f"(it offers {', '.join(offered_levels())})")


def run_jobs(jobs_file: Path, in_root: Path, out_root: Path) -> list[Path]:
    """Validate every job (paths, input headers, and the inputs against the graph on the
    first session of each model and inputs pair), then run them all in this process;
    returns output paths. A session that fails to build at a later level fails its job when
    it runs: the outputs before it are whole, each with its record."""
    jobs, outputs = _job_list(jobs_file, out_root)
    _check_levels(jobs, jobs_file)

    # One session is kept at a time (a stage has hundreds of models; jobs come grouped by
    # model), and each distinct input file is read once.
    current: dict[tuple[Any, ...], Any] = {}
    loaded: dict[Path, dict[str, Array]] = {}
    external: dict[Path, dict[str, Path]] = {}

    def session_for(model: Path, job: dict[str, Any]) -> Any:
        key = (model, job["graph_optimization"], job["intra_op_threads"],
               job["inter_op_threads"])
        if key not in current:
            if model not in external:  # checked before any runtime sees the model
                external[model] = model_files(model, job["model"])
            current.clear()
            current[key] = _session(model, job["model"], job)
        return current[key]

    digests: dict[Path, str] = {}  # each file hashed once: the run's jobs share them

    def hashed(path: Path) -> str:  # a model with its external data, or an inputs file
        if path not in digests:
            digests[path] = model_sha256(path, external[path]) if path in external \
                else sha256_file(path)
        return digests[path]

    prepared = _prepare(jobs, outputs, in_root, session_for, loaded)
    started = time.monotonic()
    for done, (job, model, inputs, output, n) in enumerate(prepared, 1):
        session, arrays = session_for(model, job), loaded[inputs]
        results = _run_batched(session, arrays, n, job["batch_size"], job["model"],
                               job["whole"])
        data = npz_bytes(results)
        record = {
            **_session_record(session, job),
            "id": job["id"], "model": job["model"], "inputs": job["inputs"],
            "output": job["output"], "batch_size": job["batch_size"], "n": n,
            "model_sha256": hashed(model), "inputs_sha256": hashed(inputs),
            "output_sha256": hashlib.sha256(data).hexdigest(),
            "graph_outputs": sorted(results),
            **({"whole": True} if job["whole"] else {}),  # outputs need no batch axis
            **({"nonfinite_inputs": sum(map(nonfinite_count, arrays.values()))}
               if job["nonfinite"] else {}),
        }
        if external[model]:
            record["model_external_data"] = {location: sha256_file(path) for location, path
                                             in sorted(external[model].items())}
        write_atomic(output, data)
        write_atomic(meta_path(output), canonical_json(record))
        elapsed = time.monotonic() - started
        rate = done / elapsed if elapsed > 0 else float("inf")
        print(f"worker: progress {done}/{len(prepared)} jobs, {rate:.2f} jobs/s, "
              f"eta {(len(prepared) - done) / rate:.0f} s", file=sys.stderr, flush=True)
    return outputs


def _prepare(jobs: list[dict[str, Any]], outputs: list[Path], in_root: Path,
             session_for: Any, loaded: dict[Path, dict[str, Array]]
             ) -> list[tuple[dict[str, Any], Path, Path, Path, int | None]]:
    """Each job's model, inputs, output and rows, every input file read once its headers
    fit the graph. A graph's inputs are the same at every level and thread count: each
    model and inputs pair (batched or whole) is checked once, on the first job's session,
    which the run then reuses."""
    declared: dict[Path, Declared] = {}
    counted: dict[Path, dict[str, int]] = {}  # of each inputs file: NaN or infinite values
    checked: dict[tuple[Path, Path, bool], int | None] = {}
    prepared = []
    for job, output in zip(jobs, outputs, strict=True):
        model = _inside(in_root, job["model"], "model")
        inputs = _inside(in_root, job["inputs"], "inputs")
        if inputs not in declared:
            declared[inputs] = npz_headers(inputs, job["inputs"])
        key = (model, inputs, job["whole"])
        if key not in checked:
            checked[key] = _check_inputs(session_for(model, job), declared[inputs],
                                         job["inputs"], job["whole"])
        if inputs not in loaded:  # read only once the headers fit a graph
            loaded[inputs] = read_inputs(inputs, job["inputs"], declared[inputs], True)
        if inputs not in counted:
            counted[inputs] = nonfinite_counts(loaded[inputs])
        if not job["nonfinite"]:
            refuse_nonfinite(counted[inputs], job["inputs"])
        prepared.append((job, model, inputs, output, checked[key]))
    return prepared


def meta_path(output: Path) -> Path:
    """The metadata file that accompanies an output .npz."""
    return output.with_name(output.name[: -len(".npz")] + ".meta.json")


def die_with_parent() -> None:
    """``kit.procs.die_with_parent``, copied (the worker never imports the kit): a worker
    whose starter names itself in ``KIT_PARENT_PID`` is SIGKILLed by Linux when that
    starter ends, and exits at once if it has ended already."""
    named = os.environ.pop("KIT_PARENT_PID", None)
    if not named:
        return
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(1, signal.SIGKILL, 0, 0, 0) != 0:  # PR_SET_PDEATHSIG
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if str(os.getppid()) != named:
        print(f"worker: error: the process that started this one ({named}) is gone",
              file=sys.stderr)
        os._exit(3)


def serve(in_root: Path, out_root: Path) -> int:
    """``--serve``: one process for every job list of a command (``kit.runtime.serve``).
    Each stdin line names a jobs file, run as ``--jobs`` runs one; one JSON line answers it
    on stdout, ``{"wrote": N}`` or ``{"error": "FILE: WHAT"}``, and the next line is read.
    Anything else printed goes to stderr, so stdout holds the answers alone. End of input
    ends the process (exit 0); an unexpected error ends it with a traceback."""
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    for line in sys.stdin:
        try:
            answer: dict[str, Any] = {"wrote": len(run_jobs(Path(line.strip()), in_root,
                                                            out_root))}
        except JobError as exc:
            answer = {"error": str(exc)}
        answers.write(json.dumps(answer, sort_keys=True) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    die_with_parent()
    parser = argparse.ArgumentParser(prog="worker", description=__doc__.split("\n")[0])
    parser.add_argument("--describe", action="store_true",
                        help="print the onnxruntime version and its levels as JSON, run nothing")
    parser.add_argument("--jobs", type=Path)
    parser.add_argument("--serve", action="store_true",
                        help="read one jobs file's path per line from stdin (serve)")
    parser.add_argument("--in-root", type=Path)
    parser.add_argument("--out-root", type=Path)
    args = parser.parse_args(argv)
    if args.describe:
        print(json.dumps(describe(), sort_keys=True))
        return 0
    if args.in_root is None or args.out_root is None or (args.jobs is not None) == args.serve:
        parser.error("--in-root, --out-root and one of --jobs or --serve are required")
    if args.serve:
        return serve(args.in_root, args.out_root)
    try:
        outputs = run_jobs(args.jobs, args.in_root, args.out_root)
    except JobError as exc:
        print(f"worker: error: {exc}", file=sys.stderr)
        return 2
    print(f"worker: wrote {len(outputs)} output(s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
