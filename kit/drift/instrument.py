"""Activation sketches: an instrumented copy of a graph with one sketch output per Conv.

For each convolution output ``x`` (N, C, H, W; with BN folded this is the convolution
plus its batch norm, before the activation) the sketch is the per-channel spatial mean,
spatial standard deviation (population) and maximum ``|x|``. Each statistic is
down-sampled to at most ``max_values // 3`` values by averaging contiguous, near-equal
channel groups (``numpy.array_split`` bounds), so a layer's sketch has at most
``max_values`` entries; the output ``sketch/<i>`` (N, 3G) stacks mean, std, max|x|.
Logits keep coming from the plain graph: extra outputs change what the optimiser fuses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from kit.drift.faults import conv_layers
from kit.files import write_atomic

Array = np.ndarray[Any, Any]
PREFIX = "sketch/"


def group_matrix(channels: int, groups: int) -> Array:
    """(channels, G) averaging matrix over contiguous groups, G = min(channels, groups)."""
    bins = np.array_split(np.arange(channels), min(channels, groups))
    matrix = np.zeros((channels, len(bins)), np.float32)
    for column, members in enumerate(bins):
        matrix[members, column] = 1.0 / len(members)
    return matrix


def sketch_numpy(x: Array, max_values: int = 64) -> Array:
    """The same sketch computed in numpy from a raw (N, C, H, W) activation."""
    matrix = group_matrix(x.shape[1], max_values // 3).astype(np.float64)
    x = x.astype(np.float64)
    stats = (x.mean(axis=(2, 3)), x.std(axis=(2, 3)), np.abs(x).max(axis=(2, 3)))
    return np.concatenate([s @ matrix for s in stats], axis=1)


def _channels(model: onnx.ModelProto, weight: str) -> int:
    init = next(i for i in model.graph.initializer if i.name == weight)
    return int(init.dims[0])


def instrument(source: Path, target: Path, max_values: int = 64,
               extra: dict[str, tuple[str, int]] | None = None) -> list[str]:
    """Write ``source`` plus one ``sketch/<i>`` output per Conv to ``target``; ``extra``
    adds a sketch output per named tensor (output name -> (tensor, channels))."""
    model = onnx.load(str(source))
    graph = model.graph
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    names = []
    for layer in conv_layers(model):
        node = next(n for n in graph.node if n.name == layer.node)
        tag = f"{PREFIX}{layer.index}"
        _sketch(graph, node.output[0], tag, _channels(model, layer.weight), max_values, opset)
        names.append(tag)
    for tag, (tensor, channels) in (extra or {}).items():
        _sketch(graph, tensor, tag, channels, max_values, opset)
        names.append(tag)
    onnx.checker.check_model(model)
    write_atomic(target, model.SerializeToString())
    return names


def _sketch(graph: onnx.GraphProto, x: str, tag: str, channels: int, max_values: int,
            opset: int) -> None:
    """Append the sketch nodes of tensor ``x`` (N, C, H, W) and the output ``tag``
    (reductions take their axes as an input from opset 18 on)."""
    matrix = group_matrix(channels, max_values // 3)
    graph.initializer.append(numpy_helper.from_array(matrix, f"{tag}/groups"))

    def reduce(op: str, source: str, out: str, keepdims: int) -> onnx.NodeProto:
        if opset < 18:
            return helper.make_node(op, [source], [out], axes=[2, 3], keepdims=keepdims)
        return helper.make_node(op, [source, f"{tag}/axes"], [out], keepdims=keepdims)

    if opset >= 18:
        graph.initializer.append(numpy_helper.from_array(np.array([2, 3], np.int64),
                                                         f"{tag}/axes"))
    graph.node.extend([
        reduce("ReduceMean", x, f"{tag}/mean4", 1),
        helper.make_node("Sub", [x, f"{tag}/mean4"], [f"{tag}/centred"]),
        helper.make_node("Mul", [f"{tag}/centred", f"{tag}/centred"], [f"{tag}/sq"]),
        reduce("ReduceMean", f"{tag}/sq", f"{tag}/var", 0),
        helper.make_node("Sqrt", [f"{tag}/var"], [f"{tag}/std"]),
        reduce("ReduceMean", x, f"{tag}/mean", 0),
        helper.make_node("Abs", [x], [f"{tag}/abs"]),
        reduce("ReduceMax", f"{tag}/abs", f"{tag}/maxabs", 0),
        *[helper.make_node("MatMul", [f"{tag}/{s}", f"{tag}/groups"], [f"{tag}/{s}_g"])
          for s in ("mean", "std", "maxabs")],
        helper.make_node("Concat", [f"{tag}/mean_g", f"{tag}/std_g", f"{tag}/maxabs_g"],
                         [tag], axis=1),
    ])
    graph.output.append(helper.make_tensor_value_info(
        tag, TensorProto.FLOAT, ["batch", 3 * matrix.shape[1]]))
