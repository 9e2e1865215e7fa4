"""A worker's refusal during ``kit audit`` names the user's files (kit.audit.failures): the
model or the ``--inputs`` file, never the staged copy that is gone when the command ends;
the release; and of onnxruntime's message what it said, in one line, without its C++
source location and function signature. End to end on the two releases the default tests
build (a model 1.20.1 cannot load, inputs its worker refuses), and on the messages the two
releases gave by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from kit.audit.failures import named
from kit.errors import WorkerFailed, onnxruntime_said
from tests.test_audit import PAIR, audit

WORK = Path("/tmp/out/.kit-staging.kit1-abc.tmp/work")
# onnxruntime 1.20.1's own messages, as its Python binding raised them (7 December 2026)
LOAD = ("[ONNXRuntimeError] : 1 : FAIL : Load model from " + str(WORK) + "/model.onnx failed:"
        "/onnxruntime_src/onnxruntime/core/graph/model_load_utils.h:46 void onnxruntime::"
        "model_load_utils::ValidateOpsetForDomain(const std::unordered_map<std::__cxx11::"
        "basic_string<char>, int>&, const onnxruntime::logging::Logger&, bool, const "
        "std::string&, int) ONNX Runtime only *guarantees* support for models stamped with "
        "official released onnx opset versions. Opset 22 is under development.\n")
RUN = ("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code returned while "
       "running Reshape node. Name:'' Status Message: /onnxruntime_src/onnxruntime/core/"
       "providers/cpu/tensor/reshape_helper.h:39 onnxruntime::ReshapeHelper::ReshapeHelper("
       "const onnxruntime::TensorShape&, onnxruntime::TensorShapeVector&, bool) size != 0 && "
       "(input_shape_size % size) == 0 was false. The input tensor cannot be reshaped to the "
       "requested shape. Input shape:{8,4}, requested shape:{3,-1}\n")


@pytest.mark.parametrize(("said", "kept"), [
    (LOAD, "ONNX Runtime only *guarantees* support for models stamped with official released "
           "onnx opset versions. Opset 22 is under development."),
    (RUN, "Non-zero status code returned while running Reshape node. Name:'' Status Message: "
          "size != 0 && (input_shape_size % size) == 0 was false. The input tensor cannot be "
          "reshaped to the requested shape. Input shape:{8,4}, requested shape:{3,-1}"),
    ("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Exception during initialization: /onnx"
     "runtime_src/onnxruntime/core/session/inference_session.cc:2140 onnxruntime::Inference"
     "Session::Initialize()::<lambda()> const something failed",
     "Exception during initialization: something failed"),
    # a sentence with a parenthesis after the source location is kept
    ("/onnxruntime_src/x/kernel.cc:12 Could not find a kernel: DeformConv(19) node",
     "Could not find a kernel: DeformConv(19) node"),
    ("[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation for "
     "DeformConv(19) node with name ''",
     "Could not find an implementation for DeformConv(19) node with name ''"),
])
def test_onnxruntime_said_keeps_what_it_said(said: str, kept: str) -> None:
    assert onnxruntime_said(said) == kept


def _failed(reason: str | None, stderr: str = "") -> WorkerFailed:
    return WorkerFailed(f"ref worker (venv) under {WORK}: {reason}", stderr, reason, "1.20.1")


def test_each_staged_file_is_named_as_the_user_gave_it() -> None:
    model, inputs = Path("/home/u/m.onnx"), Path("/home/u/x.npz")
    runs = [("inputs-00000.npz", 64), ("inputs-00001.npz", 36)]
    found = named(_failed("model.onnx: the model does not load under onnxruntime 1.20.1: "
                          + LOAD), WORK, model, inputs, [("inputs.npz", 8)])
    assert str(found) == ("/home/u/m.onnx: the model does not load under onnxruntime "
                          "1.20.1: ONNX Runtime only *guarantees* support for models stamped "
                          "with official released onnx opset versions. Opset 22 is under "
                          "development.")
    found = named(_failed("model.onnx: the model does not run under onnxruntime 1.20.1 "
                          "(rows 0 to 63): " + RUN), WORK, model, inputs, runs)
    assert str(found).startswith("/home/u/m.onnx: the model does not run under onnxruntime "
                                 "1.20.1 on a run of 64 of the 100 inputs of /home/u/x.npz: "
                                 "Non-zero status code")
    found = named(_failed("inputs-00001.npz: input 'x' holds 2 NaN or infinite value(s)"),
                  WORK, model, inputs, runs)
    assert str(found) == ("/home/u/x.npz (inputs 64 to 99): input 'x' holds 2 NaN or "
                          "infinite value(s) (under onnxruntime 1.20.1)")
    found = named(_failed("probe.onnx: graph output 'o' is a sequence of tensors of other "
                          "shapes"), WORK, model, inputs, runs)
    assert str(found).startswith("/home/u/m.onnx (the audit's instrumented copy of it): ")
    crashed = named(_failed(None, "worker: progress 1/2 jobs\nTraceback (most recent call "
                                  "last):\n  File x\nMemoryError: no room\n"),
                    WORK, model, inputs, runs)
    assert str(crashed) == ("/home/u/m.onnx: the onnxruntime 1.20.1 worker stopped before it "
                            "answered (MemoryError: no room)")
    backend = named(WorkerFailed(f"{WORK}: the worker's container cannot read this folder\n"
                                 "(its mode)"), WORK, model, inputs, runs)
    assert str(backend) == "the audit's work folder: the worker's container cannot read this " \
        "folder"


def test_an_audit_names_the_users_model_and_inputs_and_the_release(tmp_path: Path) -> None:
    """1.20.1 cannot load an opset-22 model (1.29.0 can); a Gather fails on an index past
    its table in the inputs. Each error is one line naming the user's file (and the inputs
    the run held), the release and what onnxruntime said, and nothing of the staging
    folder, which is gone."""
    relu = h.make_model(h.make_graph(
        [h.make_node("Relu", ["x"], ["y"])], "g", [h.make_tensor_value_info("x", T.FLOAT,
                                                                            ["N", 4])],
        [h.make_tensor_value_info("y", T.FLOAT, ["N", 4])]),
        opset_imports=[h.make_opsetid("", 22)], ir_version=10)
    model, inputs = tmp_path / "relu22.onnx", tmp_path / "x.npz"
    onnx.save(relu, str(model))
    np.savez(inputs, x=np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32))
    for opset, cells, says in (
            (22, PAIR, f"{model}: the model does not load under onnxruntime {PAIR[0]}: ONNX "
                       "Runtime only *guarantees* support for models stamped with official "
                       "released onnx opset versions. Opset 22 is under development"),
            (17, PAIR, f"{model}: the model does not run under onnxruntime {PAIR[0]} on "
                       f"inputs 0 to 7 of {inputs}: Non-zero status code returned while "
                       "running Gather node. Name:'' Status Message: indices element out of "
                       "data bounds, idx=99 must be within the inclusive range [-5,4]")):
        if opset == 17:
            gather = h.make_graph(
                [h.make_node("Gather", ["table", "i"], ["y"], axis=0)], "g",
                [h.make_tensor_value_info("i", T.INT64, ["N"])],
                [h.make_tensor_value_info("y", T.FLOAT, ["N", 4])],
                [h.make_tensor("table", T.FLOAT, [5, 4], [1.0] * 20)])
            onnx.save(h.make_model(gather, opset_imports=[h.make_opsetid("", 17)],
                                   ir_version=8), str(model))
            np.savez(inputs, i=np.array([0, 1, 2, 3, 4, 0, 1, 99], np.int64))
        proc = audit(str(model), "--inputs", str(inputs), "--from", cells[0], "--to",
                     cells[1], "--out", str(tmp_path / "report"), "--workers", "1")
        assert proc.returncode == 2
        last = proc.stderr.rstrip("\n").splitlines()[-1]
        assert last.startswith(f"kit: error: {says}"), last
        assert [line for line in proc.stderr.splitlines() if "kit: error" in line] == [last]
        for staged in ("staging", "onnxruntime_src", "model.onnx", "inputs.npz", "::"):
            assert staged not in last
        assert not (tmp_path / "report").exists()
