"""The static screen: which of the corpus's known defects a graph could meet, and whether
each side of the audit is on an affected release. No runtime; seconds.

A case's pattern (``screen.patterns`` of ``kit/protocols/audit.yaml``) is a chain of node
specs: each node has the spec's op type (or one of a list), its attribute values, and is
the only consumer of the node before it; ``asymmetric_pads`` asks for pads whose begin and
end differ; ``min_opset`` the model's default-domain opset. The releases, level, issue and
fixing pull request come from the case itself (``kit/corpus/cases``).
"""

from __future__ import annotations

from typing import Any

import onnx
from onnx import helper

from kit.audit.model import LEVELS, Cell


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    found = {}
    for a in node.attribute:
        value = helper.get_attribute_value(a)
        found[a.name] = value.decode() if isinstance(value, bytes) else value
    return found


def _node_matches(node: onnx.NodeProto, spec: dict[str, Any]) -> bool:
    ops = spec["op"] if isinstance(spec["op"], list) else [spec["op"]]
    if node.op_type not in ops:
        return False
    attrs = _attrs(node)
    if any(attrs.get(k) != v for k, v in spec.get("attrs", {}).items()):
        return False
    if spec.get("asymmetric_pads"):
        pads = list(attrs.get("pads", []))
        half = len(pads) // 2
        return pads[:half] != pads[half:]
    return True


def matches(model: onnx.ModelProto, pattern: dict[str, Any]) -> list[list[str]]:
    """Every chain of node names in ``model`` that holds ``pattern``."""
    if _opset(model) < pattern.get("min_opset", 0):
        return []
    nodes = list(model.graph.node)
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in nodes:
        for tensor in node.input:
            consumers.setdefault(tensor, []).append(node)
    chain_spec = pattern["chain"]
    found = []
    for start in nodes:
        if not _node_matches(start, chain_spec[0]):
            continue
        chain, current = [start], start
        for spec in chain_spec[1:]:
            after = consumers.get(current.output[0], []) if current.output else []
            if len(after) != 1 or not _node_matches(after[0], spec):
                break
            current = after[0]
            chain.append(current)
        if len(chain) == len(chain_spec):
            found.append([n.name or n.output[0] for n in chain])
    return found


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
    """Each corpus case whose pattern the model holds: where, and each side's status."""
    from kit.corpus.cases import CASES

    patterns = protocol["screen"]["patterns"]
    rows = []
    for case in CASES:
        where = matches(model, patterns[case.id])
        if where:
            rows.append({"case": case.id, "title": case.title, "issue": case.issue,
                         "pr": case.pr, "level": case.level, "nodes": where,
                         "fixed_in": case.fixed[0] if case.fixed else None,
                         **{side: affected(case, cell) for side, cell in sides.items()}})
    return rows
