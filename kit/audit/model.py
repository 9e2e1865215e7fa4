"""The audit's inputs, checked before anything runs, and the instrumented copy of the model.

- ``parse_cell``: ``RELEASE[/LEVEL]`` against the kit's hash-locked releases
  (``kit/runtime/releases.toml``) and the levels that release offers;
- ``load_model``: an ONNX file onnx can parse and check;
- ``external_files``: the files its external data lies in (every model over 2 GB has
  them), each inside the model's folder by the worker's own rule, so the audit carries
  them with the model into its work folder;
- ``check_inputs``: an ``.npz`` whose arrays are exactly the graph's inputs (not its
  initializers), with their element types (a string input as numpy's fixed-width text,
  which the worker feeds as it is), ranks and every fixed dimension; the first axis
  is the batch of inputs the audit splits and scores (``input_count``, ``sliced``), but
  for a scalar input the graph declares (rank 0), which goes whole with every run; with
  ``--sets`` every array carries one more leading axis, of input sets, each set fed as
  the model takes it (for a model whose inputs share no first axis: ``rows``);
- ``widen``: the audit's copy of the model with each graph output of a type onnxruntime's
  Python binding gives numpy no array for (bfloat16, float8: ``WIDENED``) cast exactly to a
  type it does (float32), under the output's own name, the cast recorded (``compared_as``);
- ``probe``: a copy of the model that also outputs every tensor of a known element type
  (floating point, bfloat16 and float8 widened as above, integer or boolean; compared
  exactly unless floating) that a node of the protocol's compute op types produces
  (``localisation.op_types``), in graph order, each with the nodes upstream of it that no
  exposed tensor separates from it (``upstream``: where a move first seen there may start,
  a node the optimiser fuses or moves data through being left unexposed so as not to stop
  the fusion under audit).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from kit.errors import ConfigError, FileFormatError, first_line
from kit.files import load_npz, read_yaml, write_atomic
from kit.runtime.scratch import SHARED_FILE, SHARED_FOLDER

PROTOCOL = Path(__file__).resolve().parents[1] / "protocols" / "audit.yaml"
LEVELS = ("disable_all", "enable_basic", "enable_extended", "enable_layout", "enable_all")
T = TensorProto
FLOAT_TYPES = (T.FLOAT, T.DOUBLE, T.FLOAT16)
INTEGER_TYPES = (T.INT8, T.INT16, T.INT32, T.INT64, T.UINT8, T.UINT16, T.UINT32, T.UINT64,
                 T.BOOL)
# Element types onnxruntime's Python binding hands numpy no array for: 1.20.1 and 1.29.0
# raise "No corresponding Numpy type for Tensor Type" on a bfloat16 or float8 output (but
# 1.29.0 gives float8e4m3fn's raw bytes as uint8), and 1.29.0 on int4 and int2. The
# audit's copies of the model cast each such tensor to the type here, which holds every
# value of it exactly (``widen``). Both releases cast the NARROW_FLOATS; only 1.29.0 int4
# and int2 (1.20.1 then refuses the copy by the Cast's name, which names the tensor and
# its type); neither runs a model holding float8e8m0 or float4e2m1.
NARROW_FLOATS = (T.BFLOAT16, T.FLOAT8E4M3FN, T.FLOAT8E4M3FNUZ, T.FLOAT8E5M2, T.FLOAT8E5M2FNUZ)
WIDENED: dict[int, int] = {
    **dict.fromkeys(NARROW_FLOATS, T.FLOAT), T.FLOAT8E8M0: T.FLOAT, T.FLOAT4E2M1: T.FLOAT,
    T.INT4: T.INT8, T.INT2: T.INT8, T.UINT4: T.UINT8, T.UINT2: T.UINT8}
# Element types an exposed tensor may have: the float types, the narrow floats (cast),
# integers and booleans. Strings and other types are left out: a Cast a release lacks
# would stop the whole instrumented copy, not only its tensor.
EXPOSED_TYPES = (*FLOAT_TYPES, *NARROW_FLOATS, *INTEGER_TYPES)


@dataclass(frozen=True)
class Cell:
    """One side of an audit: an onnxruntime release, a graph optimisation level and the
    intra-op thread count."""

    release: str
    level: str
    threads: int = 1

    @property
    def name(self) -> str:
        return f"{self.release}/{self.level}/t{self.threads}"


def load_protocol(path: Path = PROTOCOL) -> dict[str, Any]:
    protocol = read_yaml(path)
    if not isinstance(protocol, dict) or protocol.get("study") != "audit":
        raise ConfigError(f"{path}: not the audit protocol (study: audit)")
    return protocol


def parse_cell(text: str, option: str, protocol: dict[str, Any]) -> Cell:
    """``RELEASE[/LEVEL]`` as a cell; a ConfigError naming ``option`` when the release is
    not one the kit locks or the level is not onnxruntime's, or not one the release offers
    (``kit.runtime.runtimes.levels_offered``: refused here, before any worker starts)."""
    from kit.runtime.runtimes import known_releases, levels_offered

    release, _, level = text.partition("/")
    level = level or protocol["level_default"]
    releases = known_releases()
    if release not in releases:
        raise ConfigError(f"{option} {text}: {release!r} is not a release the kit locks; "
                          f"releases: {', '.join(releases)}")
    if level not in LEVELS:
        raise ConfigError(f"{option} {text}: {level!r} is not a graph optimisation level; "
                          f"levels: {', '.join(LEVELS)}")
    offered = levels_offered(release)
    if level not in offered:
        raise ConfigError(f"{option} {text}: onnxruntime {release} offers no graph "
                          f"optimisation level {level} (it offers {', '.join(offered)})")
    return Cell(release, level)


def load_model(path: Path) -> onnx.ModelProto:
    """The model, parsed and checked by onnx; a FileFormatError naming the file otherwise,
    in one line (the first line onnx gives)."""
    if not path.is_file():
        raise FileFormatError(f"{path}: no such model file")
    try:
        model = onnx.load(str(path), load_external_data=False)
        onnx.checker.check_model(str(path))  # by path: external data beside the model
    except Exception as exc:  # onnx raises DecodeError, ValidationError, ValueError...
        said = first_line(str(exc))  # the checker's own lines follow (==> Context: ...)
        said = said if len(said) <= 300 else said[:299] + "…"
        raise FileFormatError(f"{path}: not an ONNX model onnx can load and check "
                              f"({type(exc).__name__}: {said})") from None
    return model


def external_files(path: Path) -> dict[str, Path]:
    """Each external data location of the model at ``path`` and its file, checked by the
    worker's rule (``kit.runtime.worker.model_files``: relative, no ``..``, no link out of
    the model's folder, an existing file); a FileFormatError naming the model otherwise."""
    from kit.runtime.worker import JobError, model_files

    try:
        return model_files(path, str(path))
    except JobError as exc:
        raise FileFormatError(f"{exc.path}: {exc.what}") from None


def carry_external(files: dict[str, Path], folder: Path) -> None:
    """The model's external data files copied into ``folder`` at their locations, so the
    copies of the model written there (plain and instrumented) find them (a copy, not a
    hard link: onnx refuses external data with several links as a possible attack)."""
    import os
    import shutil

    for location, source in files.items():
        target = folder / location
        target.parent.mkdir(parents=True, exist_ok=True)
        for made in target.relative_to(folder).parents[:-1]:  # its folders, as readable
            os.chmod(folder / made, SHARED_FOLDER)
        shutil.copyfile(source, target)
        os.chmod(target, SHARED_FILE)  # the worker's container reads it, whatever the umask


def graph_inputs(model: onnx.ModelProto) -> dict[str, tuple[int, list[int | str]]]:
    """Each graph input that is no initializer: its element type and dimensions (a name
    for a symbolic one)."""
    inits = {i.name for i in model.graph.initializer}
    return {i.name: (i.type.tensor_type.elem_type,
                     [d.dim_value if d.HasField("dim_value") else d.dim_param or "?"
                      for d in i.type.tensor_type.shape.dim])
            for i in model.graph.input if i.name not in inits}


def check_inputs(model: onnx.ModelProto, path: Path, minimum: int, sets: bool = False
                 ) -> dict[str, np.ndarray[Any, Any]]:
    """The inputs file's arrays when they are exactly the model's inputs; a FileFormatError
    naming the file and the input otherwise, before the file is read where the model takes
    an input no .npz can hold (a type numpy lacks, ``WIDENED``, or no tensor at all). With
    ``sets`` every array carries one more leading axis, of input sets (``rows``)."""
    wanted = graph_inputs(model)
    for name, (elem, _) in wanted.items():
        if elem == T.UNDEFINED:
            raise FileFormatError(f"{path}: the model's input {name!r} is no tensor (a "
                                  "sequence, a map or an optional), which an .npz cannot hold")
        if elem in WIDENED:
            narrow, wide = (T.DataType.Name(t).lower() for t in (elem, WIDENED[elem]))
            raise FileFormatError(f"{path}: the model's input {name!r} is {narrow}, which an "
                                  f".npz cannot hold (numpy has no {narrow} dtype: an .npy "
                                  f"file keeps such an array as raw bytes); give the model a "
                                  f"{wide} input and cast it to {narrow} in the graph")
    arrays = load_npz(path)
    if set(arrays) != set(wanted):
        raise FileFormatError(f"{path}: holds {sorted(arrays)}, the model's inputs are "
                              f"{sorted(wanted)}")
    counts = set()
    for name, (elem, dims) in wanted.items():
        array = arrays[name]
        if elem == TensorProto.STRING and array.dtype.kind != "U":
            raise FileFormatError(f"{path}: input {name!r} is {array.dtype}, the model takes "
                                  "text: save it as numpy str_ (np.array(['a', 'b']))")
        dtype = array.dtype if elem == TensorProto.STRING else \
            helper.tensor_dtype_to_np_dtype(elem)
        if array.dtype != dtype:
            raise FileFormatError(f"{path}: input {name!r} is {array.dtype}, the model "
                                  f"takes {dtype}")
        counts |= rows(path, name, array, dims, sets)
    if not counts:
        raise FileFormatError(f"{path}: every input of the model is a scalar, so nothing "
                              "carries the inputs along a first axis")
    if len(counts) != 1 or min(counts) < minimum:
        unit = "input sets (the first axis, with --sets)" if sets else "rows"
        raise FileFormatError(f"{path}: every input needs the same number of {unit}, at least "
                              f"{minimum} (half calibrate, half are held out); found "
                              f"{sorted(counts)}" + ("" if sets or len(counts) == 1 else SETS))
    fixed = None if sets else fixed_batch(model)  # a set goes in as the model takes it
    if fixed and min(counts) % fixed:
        raise FileFormatError(f"{path}: the model fixes its first axis at {fixed}, so the "
                              f"rows ({min(counts)}) must come in whole runs of {fixed}")
    return arrays


SETS = ("; where the model's inputs share no first axis (a MatMul of (3, 4) and (4, 5)), "
        "give each array one more leading axis of input sets and pass --sets")


def rows(path: Path, name: str, array: np.ndarray[Any, Any], dims: list[int | str],
         sets: bool) -> set[int]:
    """The inputs one array carries: its first axis, which is the inputs' (or with
    ``sets`` one more, the input sets'), after which every fixed dimension of the
    model's must follow; none for a scalar the graph declares, which goes with every
    run (with ``sets`` it too carries the sets)."""
    if not dims and array.ndim == 0 and not sets:
        return set()
    taken = array.shape[1:] if sets else array.shape
    if array.ndim == 0 or len(taken) != len(dims) or any(
            isinstance(d, int) and d > 0 and d != n
            for d, n in zip(dims if sets else dims[1:], taken if sets else taken[1:],
                            strict=True)):
        raise FileFormatError(f"{path}: input {name!r} has shape {list(array.shape)}, the "
                              f"model takes {dims} " + (
                                  "after the first axis (the input sets, with --sets)" if sets
                                  else "(first axis: the inputs)"))
    return {array.shape[0]}


# Operators that draw random numbers, each unless its ``seed`` attribute is set (Dropout
# only in training mode): two runs of one release differ, so a difference between releases
# says nothing about either.
RANDOM_OPS = ("RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
              "Multinomial", "Bernoulli", "Dropout")


def unseeded_random(graph: onnx.GraphProto) -> list[str]:
    """Every node of ``graph`` and its subgraphs (Loop, If, Scan bodies) that draws without
    a seed, named with its operator."""
    constant = {i.name: i for i in graph.initializer} | {
        n.output[0]: n.attribute[0].t for n in graph.node
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"}
    found = []
    for node in graph.node:
        seeded = any(a.name == "seed" for a in node.attribute)
        if node.domain in ("", "ai.onnx") and node.op_type in RANDOM_OPS and not seeded:
            mode = node.input[2] if node.op_type == "Dropout" and len(node.input) > 2 else ""
            training = node.op_type != "Dropout" or (
                bool(mode) and (mode not in constant
                                or bool(numpy_helper.to_array(constant[mode]).any())))
            if training:
                found.append(f"{node.name or node.output[0]} ({node.op_type})")
        for attribute in node.attribute:
            for sub in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
                found += unseeded_random(sub)
    return found


def input_count(arrays: dict[str, np.ndarray[Any, Any]]) -> int:
    """The number of inputs: the first axis of every array but a scalar input's."""
    return next(len(a) for a in arrays.values() if np.ndim(a))


def sliced(arrays: dict[str, np.ndarray[Any, Any]], start: int, stop: int
           ) -> dict[str, np.ndarray[Any, Any]]:
    """Inputs ``start`` to ``stop`` of every array; a scalar input goes whole with each."""
    return {k: v if np.ndim(v) == 0 else v[start:stop] for k, v in arrays.items()}


def fixed_batch(model: onnx.ModelProto) -> int | None:
    """The first axis of the model's inputs where the graph fixes it (the worker feeds a
    model only the shape it declares), else None."""
    fixed = {dims[0] for _, dims in graph_inputs(model).values()
             if dims and isinstance(dims[0], int) and dims[0] > 0}
    return max(fixed) if fixed else None


def probe(model: onnx.ModelProto, target: Path, op_types: list[str]) -> list[dict[str, str]]:
    """Write the instrumented copy to ``target``; returns the exposed tensors in graph order
    (tensor, node, op, the node's inputs, and ``upstream``: the unexposed nodes before it
    that no exposed tensor or graph input separates from it)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in
             [*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input]}
    outputs = {o.name for o in model.graph.output}
    # a node of op_types exposes its outputs of a known type; a graph output is in every
    # copy already (exposing it breaks no fusion), so its node is watched whatever its op
    chosen = [(node, tensor) for node in model.graph.node for tensor in node.output
              if tensor and (tensor in outputs or (node.op_type in op_types
                                                   and types.get(tensor) in EXPOSED_TYPES))]
    seen = {tensor for _, tensor in chosen}
    producers = {t: node for node in model.graph.node for t in node.output if t}
    exposed = []
    copy, compared = widen(model, {tensor: types[tensor] for _, tensor in chosen
                                   if types.get(tensor) in WIDENED})
    for node, tensor in chosen:
        if tensor not in outputs:  # a graph output is in every copy already
            copy.graph.output.append(helper.make_tensor_value_info(
                tensor, WIDENED.get(types[tensor], types[tensor]), None))
        exposed.append({"tensor": tensor, "node": node.name or tensor, "op": node.op_type,
                        "inputs": ", ".join(node.input),
                        "upstream": ", ".join(_upstream(node, producers, seen)),
                        **({"compared_as": compared[tensor]} if tensor in compared else {})})
    write_atomic(target, copy.SerializeToString(), SHARED_FILE)  # the worker's container reads it
    return exposed


def widen(model: onnx.ModelProto, tensors: dict[str, int] | None = None
          ) -> tuple[onnx.ModelProto, dict[str, str]]:
    """A copy of ``model`` in which each tensor of ``tensors`` (name: element type; by
    default every graph output of a ``WIDENED`` type) keeps its name but holds its values
    cast to the ``WIDENED`` type, by a Cast from the tensor renamed ``NAME/TYPE`` (which
    its producer writes and every node and subgraph reads in its stead); and how each such
    tensor is compared (``compared_as``: "float32 after an exact cast from bfloat16")."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph = copy.graph
    fed = {i.name for i in graph.input} - {i.name for i in graph.initializer}
    if tensors is None:
        tensors = {o.name: o.type.tensor_type.elem_type for o in graph.output
                   if o.type.tensor_type.elem_type in WIDENED and o.name not in fed}
    taken = {t for node in graph.node for t in [*node.input, *node.output]} | {
        v.name for v in [*graph.input, *graph.output, *graph.value_info, *graph.initializer]}
    compared = {}
    for name, elem in tensors.items():
        narrow, wide = T.DataType.Name(elem).lower(), WIDENED[elem]
        shown = str(helper.tensor_dtype_to_np_dtype(wide))
        raw = f"{name}/{narrow}"
        while raw in taken:
            raw += "_"
        taken.add(raw)
        _rename(graph, name, raw)
        for value in graph.output:
            if value.name == name:
                value.type.tensor_type.elem_type = wide
        graph.node.append(helper.make_node(  # its name is what a release lacking it says
            "Cast", [raw], [name], name=f"{name} ({narrow}) cast to {shown} by kit audit",
            to=wide))
        compared[name] = f"{shown} after an exact cast from {narrow}"
    return copy, compared


def _rename(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Tensor ``old`` as ``new`` wherever ``graph`` writes or reads it: its nodes, its
    initializers and value infos, and every subgraph reading it from this scope (a
    subgraph cannot define a name of an outer scope)."""
    for node in graph.node:
        node.input[:] = [new if t == old else t for t in node.input]
        node.output[:] = [new if t == old else t for t in node.output]
        for attribute in node.attribute:
            for sub in [*([attribute.g] if attribute.HasField("g") else []), *attribute.graphs]:
                _rename(sub, old, new)
                for value in sub.output:  # a branch may output an outer tensor as it is
                    value.name = new if value.name == old else value.name
    for value in [*graph.initializer, *graph.input, *graph.value_info]:
        value.name = new if value.name == old else value.name


def _upstream(node: onnx.NodeProto, producers: dict[str, onnx.NodeProto],
              exposed: set[str]) -> list[str]:
    """The nodes feeding ``node`` back to the nearest exposed tensors, graph inputs or
    initializers, as ``name (Op)`` in graph order of discovery."""
    found: list[str] = []
    stack = [t for t in node.input if t]
    visited: set[str] = set()
    while stack:
        tensor = stack.pop()
        if tensor in visited or tensor in exposed or tensor not in producers:
            continue
        visited.add(tensor)
        before = producers[tensor]
        label = f"{before.name or tensor} ({before.op_type})"
        if label not in found and before.op_type != "Constant":  # a constant moves nothing
            found.append(label)
        stack.extend(t for t in before.input if t)
    return found
