"""The static screen: which of the corpus's known defects a graph could meet, and whether
each side of the audit is on an affected release. No runtime; seconds.

A case's pattern (``screen.patterns`` of ``kit/protocols/audit.yaml``) is a chain of node
specs: each node has the spec's op type (or one of a list), its attribute values, and is
the only consumer of the node before it; ``asymmetric_pads`` asks for pads whose begin and
end differ, ``empty_axes`` for an axes input absent or empty, ``exponent_not`` for a Pow
exponent other than a constant of that value, ``constant_zero`` for a Pad of constant zeros;
``min_opset`` the model's default-domain opset. A pattern ``decides`` only where it holds
the defect's whole static trigger; a broader one (the trigger lies in the data, or in shapes
the screen does not read) is ``advisory``: shown with its reason, never the exit code,
unless one of its chains holds the exact trigger its ``decides_when`` names (``TRIGGERS``:
a comparison of shapes that onnx's shape inference gives). The
releases, level, issue and fixing pull request come from the case itself
(``kit/corpus/cases``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx
from onnx import helper

from kit.audit.model import LEVELS, Cell

SMALL = 64  # elements: the constants a pattern reads are axes, exponents and pad values


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    found = {}
    for a in node.attribute:
        value = helper.get_attribute_value(a)
        found[a.name] = value.decode() if isinstance(value, bytes) else value
    return found


def constants(model: onnx.ModelProto) -> dict[str, Any]:
    """The small tensors whose value the graph fixes (initializers and Constant nodes'
    values of at most ``SMALL`` elements: axes, exponents, pad values)."""
    from onnx import numpy_helper

    found = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer
             if not t.external_data and math.prod(t.dims) <= SMALL}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value" \
                and math.prod(node.attribute[0].t.dims) <= SMALL:
            found[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return found


def _input(node: onnx.NodeProto, index: int) -> str:
    return node.input[index] if len(node.input) > index else ""


def _node_matches(node: onnx.NodeProto, spec: dict[str, Any], fixed: dict[str, Any]) -> bool:
    ops = spec["op"] if isinstance(spec["op"], list) else [spec["op"]]
    if node.op_type not in ops:
        return False
    attrs = _attrs(node)
    if any(attrs.get(k) != v for k, v in spec.get("attrs", {}).items()):
        return False
    if spec.get("asymmetric_pads"):
        pads = list(attrs.get("pads", []))
        if pads[:len(pads) // 2] == pads[len(pads) // 2:]:
            return False
    if spec.get("empty_axes"):  # an axes input that is absent or an empty constant
        axes = _input(node, 1)
        if axes and (axes not in fixed or fixed[axes].size):
            return False
    if "exponent_not" in spec:  # a constant exponent of that value is not the trigger
        exponent = fixed.get(_input(node, 1))
        if exponent is not None and bool((exponent == spec["exponent_not"]).all()):
            return False
    if spec.get("constant_zero"):
        value = fixed.get(_input(node, 2))
        if attrs.get("mode", "constant") != "constant" or attrs.get("value", 0.0) or (
                _input(node, 2) and (value is None or bool(value.any()))):
            return False
    return True


def matches(model: onnx.ModelProto, pattern: dict[str, Any]) -> list[list[str]]:
    """Every chain of node names in ``model`` that holds ``pattern``."""
    return [[n.name or n.output[0] for n in c] for c in matching_chains(model, pattern)]


def matching_chains(model: onnx.ModelProto, pattern: dict[str, Any]
                    ) -> list[list[onnx.NodeProto]]:
    """Every chain of nodes in ``model`` that holds ``pattern``."""
    if _opset(model) < pattern.get("min_opset", 0):
        return []
    nodes = list(model.graph.node)
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in nodes:
        for tensor in node.input:
            consumers.setdefault(tensor, []).append(node)
    chain_spec, fixed = pattern["chain"], constants(model)
    found = []
    for start in nodes:
        if not _node_matches(start, chain_spec[0], fixed):
            continue
        chain, current = [start], start
        for spec in chain_spec[1:]:
            after = consumers.get(current.output[0], []) if current.output else []
            if len(after) != 1 or not _node_matches(after[0], spec, fixed):
                break
            current = after[0]
            chain.append(current)
        if len(chain) == len(chain_spec):
            found.append(chain)
    return found


def ranks(model: onnx.ModelProto) -> dict[str, int]:
    """Each tensor's rank where onnx's shape inference knows it (none where it fails)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # onnx raises its own kinds; no rank is then known
        return {}
    return {v.name: len(v.type.tensor_type.shape.dim) for v in
            [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]
            if v.type.tensor_type.HasField("shape")}


def scale_rank_over_output(chain: list[onnx.NodeProto], fixed: dict[str, Any],
                           known: dict[str, int]) -> bool:
    """MatMulScaleFusion's whole trigger on a MatMul into a Mul: the Mul's other input is
    a float32 constant of one value with more dimensions than the MatMul's output (whose
    rank shape inference gives), which the affected releases fold into a FusedMatMul of
    the MatMul's rank (``matmul-scale-leading-dims``)."""
    matmul, mul = chain
    other = [t for t in mul.input if t != matmul.output[0]]
    scale = fixed.get(other[0]) if len(other) == 1 else None
    rank = known.get(matmul.output[0])
    return scale is not None and rank is not None and scale.size == 1 \
        and scale.dtype == np.float32 and scale.ndim > rank


# The exact triggers a broad pattern decides on where a chain holds one (``decides_when``).
TRIGGERS = {"scale_rank_over_output": scale_rank_over_output}


def decides(model: onnx.ModelProto, pattern: dict[str, Any],
            chains: list[list[onnx.NodeProto]]) -> bool:
    """Whether the pattern's match decides: always for ``decides: true``; for an advisory
    pattern with ``decides_when``, where one of its chains holds that exact trigger."""
    if pattern["decides"]:
        return True
    rule = pattern.get("decides_when")
    if rule is None:
        return False
    fixed, known = constants(model), ranks(model)
    return any(TRIGGERS[rule](chain, fixed, known) for chain in chains)


def affected(case: Any, cell: Cell) -> str:
    """``affected``, ``fixed`` or ``not known`` for one side: a case that needs
    ``enable_all`` touches only a side at that level."""
    if case.level != "disable_all" and LEVELS.index(cell.level) < LEVELS.index(case.level):
        return "not at this level"
    if cell.release in case.affected:
        return "affected"
    return "fixed" if cell.release in case.fixed else "not known"


def screen(model: onnx.ModelProto, sides: dict[str, Cell], protocol: dict[str, Any]
           ) -> list[dict[str, Any]]:
    """Each corpus case whose pattern the model holds: where, each side's status, and
    whether the match decides or is advisory (with the pattern's reason)."""
    from kit.corpus.cases import CASES

    patterns = protocol["screen"]["patterns"]
    rows = []
    for case in CASES:
        chains = matching_chains(model, patterns[case.id])
        if chains:
            rows.append({"case": case.id, "title": case.title, "issue": case.issue,
                         "pr": case.pr, "level": case.level,
                         "nodes": [[n.name or n.output[0] for n in c] for c in chains],
                         "decides": decides(model, patterns[case.id], chains),
                         "advisory": patterns[case.id].get("advisory", ""),
                         "fixed_in": case.fixed[0] if case.fixed else None,
                         **{side: affected(case, cell) for side, cell in sides.items()}})
    return rows
