"""One corpus case: a named onnxruntime defect, the releases it affects and the ones that fix
it (as the tracker says; the pipeline checks both by running every release), the graph
optimisation level it needs, the node the fixing patch changes, and a builder of its minimal
model and inputs.

Models are written with ``onnx.helper`` at IR version 8 and an opset of at most 19, so that
every release from 1.15 loads them; inputs are fed at run time (never initializers: constant
folding would compute the node before the kernel under test) and carry a batch axis first,
as the worker requires.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]
IR_VERSION = 8
LEVELS = ("disable_all", "enable_all")


@dataclass(frozen=True)
class Built:
    """A case's model and inputs; ``reference`` overrides onnx's reference evaluator."""

    model: Any  # onnx.ModelProto
    inputs: dict[str, Array]
    reference: dict[str, Array] | None = None


@dataclass(frozen=True)
class Case:
    """One named defect of the corpus."""

    id: str
    title: str
    op: str
    issue: int | None
    pr: int | None
    level: str                       # the level the defect needs (disable_all or enable_all)
    affected: tuple[str, ...]        # releases the tracker (or the probe) names as wrong
    fixed: tuple[str, ...]           # releases that return the right numbers
    ground_truth: tuple[str, ...]    # node names of the model that the fixing patch changes
    patch: str                       # what the fix changed (file or function), as published
    build: Callable[[int], Built]
    cnn_op: bool = True              # the op sits in an image CNN (pooling, conv, norm, resize)
    relation: str = ""               # for an op no image model holds: its own relation
    note: str = ""
    sources: tuple[str, ...] = field(default_factory=tuple)

    def describe(self) -> dict[str, Any]:
        """The case as its evidence records it (everything but the builder)."""
        return {"id": self.id, "title": self.title, "op": self.op, "issue": self.issue,
                "pr": self.pr, "level": self.level, "affected": list(self.affected),
                "fixed": list(self.fixed), "ground_truth": list(self.ground_truth),
                "patch": self.patch, "cnn_op": self.cnn_op, "relation": self.relation,
                "note": self.note}


def model(nodes: list[Any], inputs: list[Any], outputs: list[Any], opset: int,
          initializers: list[Any] | None = None, name: str = "case") -> Any:
    """A checked ModelProto at the corpus's IR version and ``opset``."""
    import onnx
    from onnx import helper

    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=initializers or [])
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=IR_VERSION, producer_name="kit-corpus")
    onnx.checker.check_model(built, full_check=True)
    return built


def tensor(name: str, shape: list[int | str], dtype: Any = None) -> Any:
    """A float32 (or ``dtype``) value info with a symbolic batch axis where ``shape`` has 'N'."""
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, dtype or TensorProto.FLOAT, shape)


def constant(name: str, values: Any, dtype: Any = np.float32) -> Any:
    """An initializer (weights, shapes, scales: never the tensor the defect reads)."""
    from onnx import numpy_helper

    return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


def reference_outputs(built: Built) -> dict[str, Array]:
    """The case's reference: its own override, else onnx.reference.ReferenceEvaluator."""
    if built.reference is not None:
        return built.reference
    from onnx.reference import ReferenceEvaluator

    evaluator = ReferenceEvaluator(built.model)
    names = [o.name for o in built.model.graph.output]
    values = evaluator.run(names, built.inputs)
    return {name: np.asarray(value) for name, value in zip(names, values, strict=True)}
