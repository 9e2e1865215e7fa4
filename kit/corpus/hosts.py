"""Hosts of the corpus's detector study (``kit/protocols/corpus-detectors.yaml``): a corpus
case's node(s) written into one of the drift study's digits models, the way a user's model
meets the op.

A shape-preserving case goes on the stem convolution's output, before its activation: the
case's node(s) read that output and every former consumer reads the case's output instead.
A case placed ``linear`` goes on the first convolution output that no activation reads (a
residual branch before its Add, a linear bottleneck). A case that halves the spatial size
replaces the first MaxPool with that output size. The
case's output tensor is ``case/out``; the host's sketch graph adds its sketch
(``sketch/case``) to the convolutions' sketches, in graph order. Weights are not changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference, version_converter

from kit.drift.faults import conv_layers
from kit.drift.instrument import PREFIX, instrument
from kit.errors import KitError
from kit.files import write_atomic

OUT = "case/out"
CASE_SKETCH = f"{PREFIX}case"


@dataclass(frozen=True)
class Hosted:
    """Where a case sits in one host, or why the host cannot hold it."""

    hosted: bool
    placement: str
    layers: tuple[str, ...] = ()    # sketch outputs in graph order, the case's among them
    channels: int = 0

    def describe(self) -> dict[str, Any]:
        return {"hosted": self.hosted, "placement": self.placement, "layers": list(self.layers)}


def case_nodes(spec: dict[str, Any], source: str) -> tuple[list[Any], list[Any]]:
    """The case's node(s) reading ``source`` and writing ``case/out``, with initializers."""
    op = str(spec["op"])
    attrs = {k: v for k, v in spec.items() if k in ("kernel_shape", "strides", "ceil_mode",
                                                   "count_include_pad")}
    if op in ("AveragePool", "MaxPool"):
        return [helper.make_node(op, [source], [OUT], name="case/pool", pads=spec["pads"],
                                 **attrs)], []
    if op in ("Pad+AveragePool", "Pad+MaxPool"):
        pool = op.split("+")[1]
        inits = [numpy_helper.from_array(np.asarray(spec["pads"], np.int64), "case/pads"),
                 numpy_helper.from_array(np.asarray(0.0, np.float32), "case/value")]
        return [helper.make_node("Pad", [source, "case/pads", "case/value"], ["case/padded"],
                                 name="case/pad", mode="constant"),
                helper.make_node(pool, ["case/padded"], [OUT], name="case/pool",
                                 pads=spec["pool_pads"], **attrs)], inits
    raise KitError(f"corpus-detectors: no host placement for op {op!r}")


def _spatial(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    inferred = shape_inference.infer_shapes(model)
    return {v.name: tuple(d.dim_value for d in v.type.tensor_type.shape.dim)
            for v in inferred.graph.value_info}


ACTIVATIONS = ("Relu", "Clip")
PLACEMENTS = ("stem", "linear", "replaces")


def _linear_conv(model: onnx.ModelProto) -> onnx.NodeProto | None:
    """The first convolution (graph order) whose output no activation reads."""
    graph = model.graph
    for layer in conv_layers(model):
        node: onnx.NodeProto = next(n for n in graph.node if n.name == layer.node)
        readers = [n.op_type for n in graph.node if node.output[0] in n.input]
        if readers and not any(op in ACTIVATIONS for op in readers):
            return node
    return None


def embed(model: onnx.ModelProto, spec: dict[str, Any], placement: str) -> Hosted:
    """Write the case into ``model`` (in place) at ``placement`` (stem, linear or
    replaces); a placement the model cannot take is returned as not hosted with the
    reason."""
    if placement not in PLACEMENTS:
        raise KitError(f"corpus-detectors: placement {placement!r} is none of "
                       f"{', '.join(PLACEMENTS)}")
    graph = model.graph
    stem = next(n for n in graph.node if n.name == conv_layers(model)[0].node)
    if placement == "linear":
        found = _linear_conv(model)
        if found is None:
            return Hosted(False, "every convolution output is read by an activation")
        stem = found
    channels = int(next(i for i in graph.initializer if i.name == stem.input[1]).dims[0])
    if placement == "replaces":
        shapes = _spatial(model)
        pools = [n for n in graph.node if n.op_type == "MaxPool"
                 and shapes.get(n.output[0], (0,))[-1] * 2 == shapes.get(n.input[0], (0,))[-1]]
        if not pools:
            return Hosted(False, "no MaxPool halving the feature map to replace")
        old = pools[0]
        nodes, inits = case_nodes(spec, old.input[0])
        consumers_of, placement = old.output[0], f"replaces {old.name}"
        at = list(graph.node).index(old)
        graph.node.remove(old)
        channels = shapes[old.input[0]][1]
    else:
        nodes, inits = case_nodes(spec, stem.output[0])
        consumers_of, placement = stem.output[0], f"on {stem.name}'s output"
        at = list(graph.node).index(stem) + 1
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name == consumers_of:
                node.input[i] = OUT
    for offset, node in enumerate(nodes):
        graph.node.insert(at + offset, node)
    graph.initializer.extend(inits)
    return Hosted(True, placement, channels=channels)


def write_host(plain: Path, spec: dict[str, Any], placement: str, target: Path,
               max_values: int) -> Hosted:
    """The host's plain graph at ``target`` and its sketch graph beside it
    (``<stem>.sketch.onnx``); nothing is written for a host that cannot hold the case."""
    model = onnx.load(str(plain))
    opset = int(spec.get("opset", 0))
    if opset and opset > model.opset_import[0].version:
        model = version_converter.convert_version(model, opset)
    hosted = embed(model, spec, placement)
    if not hosted.hosted:
        return hosted
    onnx.checker.check_model(model, full_check=True)
    write_atomic(target, model.SerializeToString(deterministic=True))
    sketch = target.with_name(target.name.removesuffix(".onnx") + ".sketch.onnx")
    names = instrument(target, sketch, max_values, {CASE_SKETCH: (OUT, hosted.channels)})
    return Hosted(True, hosted.placement, tuple(graph_order(onnx.load(str(target)), names)),
                  hosted.channels)


def graph_order(model: onnx.ModelProto, names: list[str]) -> list[str]:
    """Sketch outputs ordered by the graph position of the tensor each one reads."""
    position = {out: i for i, node in enumerate(model.graph.node) for out in node.output}
    layers = {f"{PREFIX}{layer.index}": layer.node for layer in conv_layers(model)}
    node_out = {n.name: n.output[0] for n in model.graph.node}

    def read(name: str) -> int:
        return position[OUT] if name == CASE_SKETCH else position[node_out[layers[name]]]

    return sorted(names, key=read)
