"""The benchmark floor (``kit/runtime/floor.py``, run by a runtime's own interpreter, and
``kit.runtime.backends.floor_seconds``): it times the jobs' inferences, reads their inputs
through the worker's capped reader (an .npz declaring a pebibyte is refused from its
headers, never allocated), and whatever goes wrong comes back as one line naming the
file, never a child's traceback."""

from __future__ import annotations

import io
import json
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest

from kit.errors import KitError
from kit.runtime.backends import FLOOR, floor_seconds
from kit.runtime.runtimes import get_runtime
from kit.runtime.venvs import ensure_runtime


def _jobs(level: str = "disable_all", inputs: str = "images.npz") -> list[dict[str, object]]:
    return [{"model": "convnet.onnx", "inputs": inputs, "graph_optimization": level,
             "batch_size": 16}]


def test_the_floor_times_the_jobs(workdir: Path) -> None:
    assert floor_seconds(get_runtime("ref"), _jobs(), workdir / "in") > 0


def test_a_pebibyte_declared_is_refused_by_the_workers_cap_in_the_child(workdir: Path
                                                                        ) -> None:
    """The floor run alone (no bench before it): numpy would try to allocate 48 PiB."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False,
                                                  "shape": (2 ** 46, 3, 8, 8)})
    huge = workdir / "in" / "huge.npz"
    with zipfile.ZipFile(huge, "w") as archive:
        archive.writestr("input.npy", header.getvalue())
    (workdir / "jobs.json").write_text(json.dumps({"jobs": _jobs(inputs="huge.npz")}))
    proc = subprocess.run([str(ensure_runtime("ref")), "-I", str(FLOOR), "--jobs",
                           str(workdir / "jobs.json"), "--in-root", str(workdir / "in")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"floor: error: {huge}: member 'input.npy' declares (70368744177664, 3, 8, 8) "
        "float32, past 2147483648 bytes for one input file; split the inputs into smaller "
        "files"]


@pytest.mark.parametrize(("level", "inputs", "said"), [
    ("disable_all", "garbage.npz", "garbage.npz: not a readable .npz archive"),
    ("nope", "images.npz", "does not run the jobs (AttributeError: "),
])
def test_a_failed_floor_run_is_one_line_naming_the_file(workdir: Path, level: str,
                                                        inputs: str, said: str) -> None:
    (workdir / "in" / "garbage.npz").write_bytes(b"garbage\0\1")
    with pytest.raises(KitError) as caught:
        floor_seconds(get_runtime("ref"), _jobs(level, inputs), workdir / "in")
    message = str(caught.value)
    assert said in message
    assert message.startswith(str(workdir / "in"))
    assert message.endswith("(the floor run under ref)")
    assert "\n" not in message
    assert "Traceback" not in message


def test_a_whole_job_is_timed_in_one_call_with_its_inputs_as_they_are(tmp_path: Path
                                                                      ) -> None:
    """A MatMul of (3, 4) and (4, 5) fixed by the graph: cut into runs of 2 rows the floor
    feeds (2, 4), which onnxruntime refuses; as a whole job (the audit's), one call."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"])], "m",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [3, 4]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "ab.npz", a=np.ones((3, 4), np.float32), b=np.ones((4, 5), np.float32))
    job = {"model": "m.onnx", "inputs": "ab.npz", "graph_optimization": "disable_all",
           "batch_size": 2}
    with pytest.raises(KitError, match="does not run the jobs"):
        floor_seconds(get_runtime("ref"), [job], tmp_path)
    assert floor_seconds(get_runtime("ref"), [{**job, "whole": True}], tmp_path) > 0
