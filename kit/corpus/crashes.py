"""Crash-only defects: named onnxruntime CPU defects in which a release raises (or its process
aborts) on a valid model that a later release runs correctly. They are kept beside the corpus
(``corpus/crashes.json`` and the report's crash table), never counted in its reproduction
rate: the protocol's selection (``kit/protocols/corpus.yaml``) counts silent wrong numbers
only.

A crash case reproduces when every declared affected release fails to run it at the case's
level (an exception, or a worker that dies) and every declared fixed release runs it within
the protocol's tolerance of the reference (``kit.corpus.rule``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kit.corpus.case import Built, Case, constant, model, tensor

BEFORE_1_21 = ("1.15.1", "1.16.3", "1.17.3", "1.18.1", "1.19.2", "1.20.1")
FROM_1_21 = ("1.21.1", "1.22.1", "1.23.2", "1.24.4", "1.25.1", "1.26.0", "1.27.0", "1.28.0",
             "1.29.0", "1.30.0", "1.31.1", "1.32.0")


def _reduce(op: str, opset: int) -> Any:
    from onnx import helper  # not at import: verify imports this module without onnx

    node = helper.make_node(op, ["x", "axes"], ["y"], name=op.lower(), keepdims=0)
    return model([node], [tensor("x", ["N", 0, 3])], [tensor("y", ["N", 3])], opset,
                 [constant("axes", [1], np.int64)])


def build_reducemax(seed: int) -> Built:
    # an axis of length 0 (not the batch axis, which the worker requires non-empty)
    return Built(_reduce("ReduceMax", 18), {"x": np.zeros((2, 0, 3), np.float32)})


def build_reducesum(seed: int) -> Built:
    return Built(_reduce("ReduceSum", 13), {"x": np.zeros((2, 0, 3), np.float32)})


CRASHES: tuple[Case, ...] = (
    Case(id="reducemax-empty-axis", title="ReduceMax over an axis of length 0 with keepdims=0 "
         "raises instead of returning the empty-set maximum (-inf)",
         op="ReduceMax", issue=7563, pr=None, level="disable_all", affected=BEFORE_1_21,
         fixed=FROM_1_21, ground_truth=("reducemax",),
         patch="onnxruntime/core/providers/cpu/reduction/reduction_ops.cc: the keepdims check "
               "on an empty reduced axis (attributed by the release sweep)",
         build=build_reducemax, cnn_op=False,
         note="issue 7563's message, 'Can't reduce on dim with value of 0 if keepdims is "
              "false'; the spec's empty-set maximum is the lowest value, -inf"),
    Case(id="reducesum-empty-axis", title="ReduceSum over an axis of length 0 with keepdims=0 "
         "raises instead of returning zeros", op="ReduceSum", issue=7563, pr=None,
         level="disable_all", affected=BEFORE_1_21[:2], fixed=(*BEFORE_1_21[2:], *FROM_1_21),
         ground_truth=("reducesum",),
         patch="onnxruntime/core/providers/cpu/reduction/reduction_ops.cc (attributed by the "
               "release sweep)",
         build=build_reducesum, cnn_op=False,
         note="the same check as reducemax-empty-axis, lifted for ReduceSum three minor "
              "releases earlier"),
)


def finite_scale(reference: dict[str, Any]) -> float:
    """``kit.corpus.rule.scale`` over the finite reference values (ReduceMax's empty-set
    maximum is -inf)."""
    finite = [np.abs(v[np.isfinite(v)]) for v in reference.values()]
    return max(1.0, max((float(f.max()) for f in finite if f.size), default=0.0))


def decide_crash(case: dict[str, Any], deviations: dict[str, dict[str, float | None]],
                 tolerance: float) -> dict[str, Any]:
    """Whether every declared affected release fails at the case's level and every declared
    fixed release runs within ``tolerance``; the releases that fail, as measured."""
    at = {release: found[case["level"]] for release, found in deviations.items()}
    affected = [r for r in case["affected"] if r in at]
    fixed = [r for r in case["fixed"] if r in at]
    fixed_right = all((d := at[r]) is not None and d <= tolerance for r in fixed)
    reproduced = bool(affected and fixed) and fixed_right \
        and all(at[r] is None for r in affected)
    return {"reproduced": reproduced, "fails": [r for r, d in at.items() if d is None],
            "tolerance": tolerance}
