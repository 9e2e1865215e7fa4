"""A loader for DeepMind's cylinder_flow data (MeshGraphNets), without TensorFlow.

A dataset folder holds ``meta.json`` and ``<split>.tfrecord``. Each record is one
trajectory, a ``tf.train.Example`` whose features are raw array bytes (one bytes value per
field); ``meta.json`` gives each field's dtype, shape (-1 = the number of nodes or cells)
and whether it is ``static`` (one frame, tiled over time) or ``dynamic``. Records are
framed as TFRecord (length, masked CRC32C of the length, data, masked CRC32C of the data);
the kit checks both CRCs (the ``tfrecord`` package's reader skips them) and parses each
``Example`` with the ``tfrecord`` package's protobuf. Bad input raises KitError naming
the file and the record.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from kit.errors import KitError

Array = np.ndarray[Any, Any]
DTYPES = {"float32": np.float32, "int32": np.int32, "int64": np.int64}


def read_meta(folder: Path) -> dict[str, Any]:
    path = folder / "meta.json"
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # ValueError: JSON and UTF-8 decoding errors
        raise KitError(f"{path}: cannot read the dataset description ({exc})") from exc
    for key in ("field_names", "features", "trajectory_length"):
        if key not in meta:
            raise KitError(f"{path}: missing {key!r}")
    for name in meta["field_names"]:
        field = meta["features"].get(name)
        if field is None or field.get("dtype") not in DTYPES or "shape" not in field:
            raise KitError(f"{path}: field {name!r} lacks a supported dtype or a shape")
    return meta  # type: ignore[no-any-return]


def _decode(name: str, raw: bytes, field: dict[str, Any], length: int, shown: Path
            ) -> Array:
    values = np.frombuffer(raw, dtype=DTYPES[field["dtype"]])
    shape = list(field["shape"])
    known = int(np.prod([s for s in shape if s != -1]))
    if known == 0 or values.size % known:
        raise KitError(f"{shown}: field {name!r} has {values.size} values, not a multiple "
                       f"of its shape {shape}")
    array = values.reshape([s if s != -1 else values.size // known for s in shape])
    if field["type"] == "static":
        array = np.tile(array, [length] + [1] * (array.ndim - 1))
    elif array.shape[0] != length:
        raise KitError(f"{shown}: dynamic field {name!r} has {array.shape[0]} frames, "
                       f"meta.json says {length}")
    return array


def _masked_crc(data: bytes) -> int:
    import crc32c

    crc = crc32c.crc32c(data)
    return ((crc >> 15) | (crc << 17)) + 0xA282EAD8 & 0xFFFFFFFF


def records(path: Path) -> Iterator[bytes]:
    """The payload of every record, after checking both CRCs."""
    data = path.read_bytes()
    offset, index = 0, 0
    while offset < len(data):
        if offset + 12 > len(data):
            raise KitError(f"{path}: record {index}: truncated header")
        header = data[offset:offset + 8]
        length = struct.unpack("<Q", header)[0]
        (crc,) = struct.unpack("<I", data[offset + 8:offset + 12])
        if crc != _masked_crc(header):
            raise KitError(f"{path}: record {index}: length CRC mismatch")
        start, end = offset + 12, offset + 12 + length
        if end + 4 > len(data):
            raise KitError(f"{path}: record {index}: truncated payload")
        payload = data[start:end]
        if struct.unpack("<I", data[end:end + 4])[0] != _masked_crc(payload):
            raise KitError(f"{path}: record {index}: payload CRC mismatch")
        yield payload
        offset, index = end + 4, index + 1


def trajectories(folder: Path, split: str) -> Iterator[dict[str, Array]]:
    """Every trajectory of ``<folder>/<split>.tfrecord`` as a dict of arrays."""
    from tfrecord import example_pb2

    meta = read_meta(folder)
    path = folder / f"{split}.tfrecord"
    if not path.is_file():
        raise KitError(f"{path}: no such split")
    for index, payload in enumerate(records(path)):
        example = example_pb2.Example.FromString(payload)
        features = example.features.feature
        missing = [n for n in meta["field_names"] if n not in features]
        if missing:
            raise KitError(f"{path}: record {index}: fields {missing} missing")
        yield {name: _decode(name, features[name].bytes_list.value[0],
                             meta["features"][name], int(meta["trajectory_length"]), path)
               for name in meta["field_names"]}


def write_dataset(folder: Path, split: str, trajectories_: list[dict[str, Array]],
                  meta: dict[str, Any]) -> None:
    """Write trajectories in the same format (for tests and for exporting the kit's data)."""
    from tfrecord.writer import TFRecordWriter

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "meta.json").write_text(json.dumps(meta, indent=1))
    writer = TFRecordWriter(str(folder / f"{split}.tfrecord"))
    for trajectory in trajectories_:
        record = {}
        for name in meta["field_names"]:
            array = np.ascontiguousarray(trajectory[name],
                                         DTYPES[meta["features"][name]["dtype"]])
            if meta["features"][name]["type"] == "static":
                array = array[:1]
            record[name] = (array.tobytes(), "byte")
        writer.write(record)
    writer.close()


def study_trajectory(folder: Path, split: str, index: int, frames: int) -> dict[str, Array]:
    """Record ``index`` of a split in the layout the MeshGraphNet study reads: the first
    frame's ``mesh_pos`` (N, 2), ``cells`` (C, 3) and ``node_type`` (N, 1), and the first
    ``frames`` velocity frames (T, N, 2), as float64 and int64."""
    for position, found in enumerate(trajectories(folder, split)):
        if position < index:
            continue
        missing = [n for n in ("mesh_pos", "cells", "node_type", "velocity") if n not in found]
        if missing:
            raise KitError(f"{folder}/{split}.tfrecord: record {index} lacks {missing}")
        if len(found["velocity"]) < frames:
            raise KitError(f"{folder}/{split}.tfrecord: record {index} has "
                           f"{len(found['velocity'])} frames, the study needs {frames}")
        return {"mesh_pos": found["mesh_pos"][0].astype(np.float64),
                "cells": found["cells"][0].astype(np.int64),
                "node_type": found["node_type"][0].reshape(-1, 1).astype(np.int64),
                "velocity": found["velocity"][:frames].astype(np.float64)}
    raise KitError(f"{folder}/{split}.tfrecord: no record {index}")
