"""DQ forward propagation inserts a uint8 QuantizeLinear after a Reshape of an int8 weight
(issue 28491, same mechanism as 27845; fixed for constant weights by PR 28521 "fix(qdq):
skip DQ forward propagation when DQ input is constant"): at level 2 QDQPropagationTransformer
copies the weight's DequantizeLinear (int8, no zero point) to after the Reshape as a Q/DQ
pair whose new QuantizeLinear has no zero point either, so it quantizes to the default type
uint8 and every negative weight is clamped to 0."""

from __future__ import annotations

import numpy as np
from onnx import helper

from kit.corpus.case import Array, Built, Case, constant, model, tensor

# int8 weights with a power-of-two scale and no zero point (symmetric weight quantization)
W_SCALE = 2.0 ** -4


def reference(x: Array, wq: Array) -> Array:
    """The graph by hand in float64: DQ of the weights, Reshape to (2, 4), times x."""
    w = (wq.astype(np.float64) * W_SCALE).reshape(2, 4)
    found: Array = x.astype(np.float64) * w
    return found


def build(seed: int) -> Built:
    rng = np.random.default_rng(seed + 41)
    wq = rng.integers(-100, 101, 8).astype(np.int8)
    node = helper.make_node
    nodes = [node("DequantizeLinear", ["w_q", "w_scale"], ["w_dq"], name="dq_w"),
             node("Reshape", ["w_dq", "shape"], ["w"], name="reshape"),
             node("Mul", ["x", "w"], ["y"], name="mul")]
    inits = [constant("w_q", wq, np.int8), constant("w_scale", W_SCALE),
             constant("shape", [2, 4], np.int64)]
    graph = model(nodes, [tensor("x", ["N", 2, 4])], [tensor("y", ["N", 2, 4])], 13, inits)
    x = rng.standard_normal((4, 2, 4)).astype(np.float32)
    return Built(graph, {"x": x}, reference={"y": reference(x, wq)})


CASE = Case(
    id="qdq-propagation-const-dq",
    title="DQ propagation past a Reshape re-quantizes int8 weights to uint8, zeroing negatives",
    op="DequantizeLinear -> Reshape (QDQ propagation)", issue=28491, pr=28521,
    level="enable_all",
    affected=("1.15.1", "1.16.3", "1.17.3", "1.18.1", "1.19.2", "1.20.1", "1.21.1", "1.22.1",
              "1.23.2", "1.24.4", "1.25.1", "1.26.0"),
    fixed=("1.27.0", "1.28.0", "1.29.0", "1.30.0", "1.31.1", "1.32.0"),
    ground_truth=("dq_w", "reshape"),
    patch="onnxruntime/core/optimizer/qdq_transformer/qdq_propagation.cc: PropagateDQForward "
          "(skip a DQ whose data input is a constant initializer or Constant output)",
    build=build, cnn_op=False,
    relation="DequantizeLinear then Reshape of a weight: w = reshape(w_q * scale), y = x * w",
    note="tracker: issue 28491 (Constant int8 -> DQ without zero point -> Reshape, negatives "
         "0 at ORT_ENABLE_ALL) and the earlier 27845 (same mechanism, still open: a DQ of a "
         "runtime tensor is still propagated and still wrong in 1.32.0, so the case keeps the "
         "weight constant, which is what PR 28521 fixes). The release sweep finds 1.15.1 to "
         "1.26.0 wrong at enable_all, right at disable_all; the optimized 1.26.0 model has "
         "DQ -> Reshape -> Q -> DQ -> Mul, the 1.27.0 model DQ -> Reshape -> Mul. Not the "
         "S8->U8 transformers: session.qdqisint8allowed=1 leaves 1.26.0 wrong; with an explicit "
         "int8 zero point on the DQ no release is wrong")
