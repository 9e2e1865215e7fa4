"""Which side is right: onnx's reference implementation as a third oracle.

When two releases disagree, neither is the truth. ``onnx.reference.ReferenceEvaluator``
(numpy, written from the operator specification, no optimisation passes) runs the plain
model on the last ``ORACLE_INPUTS`` inputs (held-out ones: the calibration takes the
first), in float64 where the model converts (every float32 initializer, constant, input,
output, value and ``Cast`` to float widened: ``widened``), else as it is. Per output, each
side's largest absolute difference from the oracle over those inputs is recorded, and the
side nearer to it is named; ``neither`` when the two are within ``TIE`` of each other
relative to the oracle's scale (both sides round alike), ``cannot tell`` when the oracle
itself cannot run the model (an operator it lacks: the reason is recorded, never a pass).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kit.audit.model import fixed_batch, input_count, sliced

Array = np.ndarray[Any, Any]
ORACLE_INPUTS = 4
TIE = 1e-6  # relative to the oracle's largest magnitude: both sides equally near
UPGRADES = (19, 21)  # opsets the oracle lifts a model to when onnx.reference lacks an op


def widened(model: Any) -> Any:
    """A copy of ``model`` computing in float64 (initializers, constants, graph inputs,
    outputs, value infos and ``Cast`` targets of float32 widened); the model itself when
    it holds no float32."""
    import onnx
    from onnx import numpy_helper

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph = copy.graph
    f32, f64 = onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE
    for tensor in graph.initializer:
        if tensor.data_type == f32:
            tensor.CopyFrom(numpy_helper.from_array(
                numpy_helper.to_array(tensor).astype(np.float64), tensor.name))
    for info in [*graph.input, *graph.output, *graph.value_info]:
        if info.type.tensor_type.elem_type == f32:
            info.type.tensor_type.elem_type = f64
    for node in graph.node:
        for attribute in node.attribute:
            if node.op_type == "Cast" and attribute.name == "to" and attribute.i == f32:
                attribute.i = f64
            if attribute.type == onnx.AttributeProto.TENSOR and attribute.t.data_type == f32:
                attribute.t.CopyFrom(numpy_helper.from_array(
                    numpy_helper.to_array(attribute.t).astype(np.float64), attribute.t.name))
    return copy


def oracle_outputs(model: Any, feeds: dict[str, Array], wanted: Any = None,
                   sets: bool = False) -> tuple[dict[str, Array | None], str]:
    """The reference implementation's outputs for ``feeds`` (in runs of the model's fixed
    first axis, one input at a time where it is dynamic, one input set at a time with
    ``sets``, its outputs stacked on a new first axis: ``joined``) and the precision it
    ran in; only the ``wanted`` outputs (default: all), which must carry a batch axis."""
    from onnx.reference import ReferenceEvaluator

    names = [o.name for o in model.graph.output if wanted is None or o.name in wanted]
    error = "no precision ran"
    for candidate, precision in _candidates(model):
        try:
            evaluator = ReferenceEvaluator(candidate)
            wide = precision == "float64"
            n, step = input_count(feeds), 1 if sets else fixed_batch(model) or 1
            runs: list[Any] = [
                evaluator.run(names, {k: (v.astype(np.float64) if wide and
                                         v.dtype == np.float32 else v)
                                     for k, v in part.items()})
                for part in _parts(feeds, n - n % step, step, sets)]
            return {name: joined([np.asarray(r[j]) for r in runs], sets)
                    for j, name in enumerate(names)}, precision
        except Exception as exc:  # onnx.reference raises many kinds; the first says why
            if error == "no precision ran":
                error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    raise OracleFailed(error)


def joined(runs: list[Array], sets: bool) -> Array | None:
    """One output's runs in input order: concatenated, or with ``sets`` stacked on a new
    first axis; None where the sets' shapes differ (a shape that follows each set's data),
    which no side's stacked output can be compared with (``judge_sides``)."""
    if not sets:
        return np.concatenate(runs)
    return np.stack(runs) if len({r.shape for r in runs}) == 1 else None


def _parts(feeds: dict[str, Array], n: int, step: int, sets: bool
           ) -> list[dict[str, Array]]:
    """The feeds of each run: ``step`` inputs at a time, or with ``sets`` each input set
    as the model takes it (its leading axis dropped)."""
    parts = [sliced(feeds, i, i + step) for i in range(0, n, step)]
    return [{k: v[0] for k, v in part.items()} for part in parts] if sets else parts


def _candidates(model: Any) -> Any:
    """The model in float64, then as exported; then, since onnx.reference implements an
    operator only at some of its versions (DequantizeLinear from 19, not 13), the same two
    after ``onnx.version_converter`` lifted the model to each later opset of
    ``UPGRADES`` it converts to (the precision says which)."""
    from onnx import version_converter

    yield widened(model), "float64"
    yield model, "as exported"
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    for target in (t for t in UPGRADES if t > opset):
        try:
            lifted = version_converter.convert_version(model, target)
        except Exception:  # an adapter it lacks: the next target, or none
            continue
        yield widened(lifted), f"float64, the model converted to opset {target}"
        yield lifted, f"as exported, the model converted to opset {target}"


class OracleFailed(Exception):
    """The reference implementation could not run the model (the reason)."""


def _error(side: Array, oracle: Array) -> float:
    """A side's largest absolute difference from the oracle: infinite for another shape,
    and where one of the two is NaN and the other is not."""
    if np.asarray(side).shape != oracle.shape:
        return math.inf
    x = np.asarray(side, np.float64)
    nan = np.isnan(x) ^ np.isnan(oracle)
    with np.errstate(invalid="ignore"):
        diff = np.where(np.isnan(x) & np.isnan(oracle), 0.0, np.abs(x - oracle))
    return math.inf if nan.any() else float(np.nanmax(diff, initial=0.0))


def which_side(oracle: Array, a: Array, b: Array) -> dict[str, Any]:
    """Each side's largest absolute difference from the oracle (``_error``) and the nearer
    side (``neither`` when both are equally near, ``cannot tell`` when both are
    infinitely far)."""
    o = np.asarray(oracle, np.float64)
    errors = [_error(x, o) for x in (a, b)]
    scale = max(float(np.nanmax(np.abs(o), initial=0.0)), float(np.finfo(np.float64).tiny))
    if math.isinf(errors[0]) and math.isinf(errors[1]):
        closer = "cannot tell (both sides differ from it in shape or NaN)"
    elif abs(errors[0] - errors[1]) <= TIE * scale:
        closer = "neither"
    else:
        closer = "from" if errors[0] < errors[1] else "to"
    shown = [None if math.isinf(e) else e for e in errors]
    return {"from_error": shown[0], "to_error": shown[1], "closer": closer}


def judge_sides(model: Any, arrays: dict[str, Array], from_outputs: dict[str, Array],
                to_outputs: dict[str, Array], sets: bool = False) -> dict[str, Any]:
    """Per output given (those with a batch axis), which side the reference implementation
    sides with (module docstring), on the last ``ORACLE_INPUTS`` inputs (input sets, with
    ``sets``)."""
    total, step = input_count(arrays), 1 if sets else fixed_batch(model) or 1
    n = min(max(ORACLE_INPUTS, step) // step * step, total - total % step)
    feeds = sliced(arrays, total - n, total)
    try:
        oracle, precision = oracle_outputs(model, feeds, set(from_outputs) & set(to_outputs),
                                           sets)
    except OracleFailed as exc:
        return {"ran": False, "why": f"onnx.reference could not run the model ({exc})",
                "inputs": n, "outputs": {}}
    return {"ran": True, "precision": precision, "inputs": n, "outputs": {
        name: VARIES if (found := oracle[name]) is None else
        which_side(found, from_outputs[name][-n:], to_outputs[name][-n:])
        for name in oracle if name in from_outputs and name in to_outputs}}


VARIES = {"from_error": None, "to_error": None,
          "closer": "cannot tell (the reference's shape of it varies between input sets)"}


def spec_shapes(model: Any, inputs: dict[str, tuple[int, ...]]) -> dict[str, list[int] | None]:
    """Each graph output's shape as the operator specification's shape inference gives it
    (``onnx.shape_inference``, with data propagation) for inputs of the shapes given; None
    where it leaves an axis or the rank open."""
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for value in copy.graph.input:
        if value.name in inputs:
            shape = value.type.tensor_type.shape
            del shape.dim[:]
            for size in inputs[value.name]:
                shape.dim.add().dim_value = int(size)
    del copy.graph.value_info[:]
    for value in copy.graph.output:  # the declared shape may be the very thing in doubt
        value.type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(copy, data_prop=True)
    except Exception:  # onnx raises its own kinds; no shape is then known
        return {}
    found: dict[str, list[int] | None] = {}
    for value in inferred.graph.output:
        kind = value.type.tensor_type
        known = kind.HasField("shape") and all(d.HasField("dim_value") for d in kind.shape.dim)
        found[value.name] = [d.dim_value for d in kind.shape.dim] if known else None
    return found


def which_shape(spec: list[int] | None, a: list[int], b: list[int]) -> dict[str, Any]:
    """The side whose shape on one run is the specification's (``spec_shapes``): a release
    that changed an output's shape is judged on the shape before any value."""
    if spec is None:
        closer = "cannot tell (the specification's shape inference leaves this shape open)"
    elif a == spec and b != spec:
        closer = "from"
    elif b == spec and a != spec:
        closer = "to"
    else:
        closer = "neither (the specification gives another shape)"
    return {"from_error": None, "to_error": None, "closer": closer, "spec_shape": spec,
            "shapes": {"from": a, "to": b}}
