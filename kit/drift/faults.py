"""Weight faults made by editing one convolution's initializer in an ONNX model.

Families (severity ``s``), applied to the BN-folded weight ``w`` of one Conv:

- ``scale``: ``w * (1 + s)``, a relative scaling;
- ``noise``: ``w + s * std(w) * z``, ``z`` standard normal from a generator seeded per fault;
- ``quantise``: symmetric uniform quantisation to ``s`` bits,
  ``round(w / q) * q`` with ``q = max|w| / (2**(s-1) - 1)``.

Only that initializer changes; the graph, every other initializer and the bias stay
byte-identical. The fault record holds the layer, family, severity, seed and the sha256
of the weight before and after and of the faulty model.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from kit.errors import KitError
from kit.files import write_atomic

Array = np.ndarray[Any, Any]
FAMILIES = ("scale", "noise", "quantise")


@dataclass(frozen=True)
class ConvLayer:
    """One Conv node of a graph: its position, node name and weight initializer."""

    index: int
    node: str
    weight: str


@dataclass(frozen=True)
class FaultRecord:
    """What a fault did, for the fault manifest."""

    layer_index: int
    layer_node: str
    weight: str
    family: str
    severity: float
    seed: int
    weight_sha256_before: str
    weight_sha256_after: str
    model_sha256: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def conv_layers(model: onnx.ModelProto) -> list[ConvLayer]:
    """Every Conv whose weight is an initializer, in graph (execution) order."""
    initializers = {init.name for init in model.graph.initializer}
    layers = [node for node in model.graph.node if node.op_type == "Conv"]
    found: list[ConvLayer] = []
    for node in layers:
        if node.input[1] not in initializers:
            raise KitError(f"Conv {node.name!r}: weight {node.input[1]!r} is not an initializer")
        found.append(ConvLayer(len(found), node.name, node.input[1]))
    return found


def perturb(weight: Array, family: str, severity: float, seed: int) -> Array:
    """The faulty weight; float32 in, float32 out."""
    w = weight.astype(np.float64)
    if family == "scale":
        out = w * (1.0 + severity)
    elif family == "noise":
        z = np.random.default_rng(seed).standard_normal(w.shape)
        out = w + severity * w.std() * z
    elif family == "quantise":
        bits = int(severity)
        if bits != severity or bits < 2:
            raise KitError(f"quantise severity must be an integer bit count >= 2, not {severity}")
        step = np.abs(w).max() / (2 ** (bits - 1) - 1)
        out = np.round(w / step) * step if step > 0 else w
    else:
        raise KitError(f"unknown fault family {family!r}; known: {FAMILIES}")
    return out.astype(weight.dtype)


def _sha(array: Array) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def inject(source: Path, target: Path, layer_index: int, family: str, severity: float,
           seed: int) -> FaultRecord:
    """Write ``source`` with conv ``layer_index`` perturbed to ``target``; returns the record."""
    model = onnx.load(str(source))
    layers = conv_layers(model)
    if not 0 <= layer_index < len(layers):
        raise KitError(f"{source}: conv index {layer_index} out of range 0..{len(layers) - 1}")
    layer = layers[layer_index]
    init = next(i for i in model.graph.initializer if i.name == layer.weight)
    before = numpy_helper.to_array(init)
    after = perturb(before, family, severity, seed)
    if np.array_equal(before, after):
        raise KitError(f"{source}: {family} at severity {severity} leaves {layer.node} unchanged")
    init.CopyFrom(numpy_helper.from_array(after, name=layer.weight))
    data = model.SerializeToString()
    write_atomic(target, data)
    return FaultRecord(layer.index, layer.node, layer.weight, family, float(severity), seed,
                       _sha(before), _sha(after), hashlib.sha256(data).hexdigest())
