"""Export a torch model to ONNX the way the drift study does.

Eval mode, the TorchScript exporter (``dynamo=False``), the protocol's opset
(``export.opset``, passed by the fetch stage and the sweep; ``OPSET`` otherwise), one input
``input`` (NCHW float32) with a dynamic batch axis and one output ``logits``. In eval
mode the exporter folds every BatchNormalization into the preceding convolution, so the
graph holds Conv (with bias) and no BatchNormalization; ``export_onnx`` checks that.
``batchnorm="kept"`` (the real-drift sweep's second export) keeps every BatchNormalization
as its own op (``TrainingMode.PRESERVE`` of an eval-mode model: inference BN), and checks
that the graph holds one per BatchNorm module.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kit.errors import KitError
from kit.files import file_mode, temporary_prefix

if TYPE_CHECKING:
    import torch

OPSET = 17
BATCHNORM = ("folded", "kept")


def export_onnx(model: torch.nn.Module, path: Path, input_shape: tuple[int, ...],
                batchnorm: str = "folded", opset: int = OPSET) -> Path:
    """Write ``model`` to ``path`` as ONNX (BN folded, or kept); returns the path."""
    if batchnorm not in BATCHNORM:
        raise KitError(f"{path}: batchnorm must be one of {BATCHNORM}, not {batchnorm!r}")
    import onnx
    import torch

    model = model.eval()
    # folded: the exporter's default (eval) mode, passed as before so the bytes stay put
    mode: dict[str, Any] = (
        {"training": torch.onnx.TrainingMode.PRESERVE} if batchnorm == "kept" else {})
    expected = 0 if batchnorm == "folded" else sum(
        isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())
    example = torch.zeros((1, *input_shape[1:]), dtype=torch.float32)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=temporary_prefix(path.name), suffix=".tmp",
                                dir=path.parent)  # the kit's one temporary name
    os.close(fd)
    tmp = Path(name)
    try:
        with warnings.catch_warnings():
            # The TorchScript exporter announces its deprecation on every call.
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", UserWarning)
            torch.onnx.export(model, (example,), str(tmp), dynamo=False, opset_version=opset,
                              **mode,
                              input_names=["input"], output_names=["logits"],
                              dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
                              do_constant_folding=True)
        graph = onnx.load(str(tmp))
        onnx.checker.check_model(graph)
        kept = [node.op_type for node in graph.graph.node if node.op_type == "BatchNormalization"]
        if len(kept) != expected:
            raise KitError(f"{path}: export ({batchnorm} BN) kept {len(kept)} "
                           f"BatchNormalization node(s), not {expected}")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.chmod(tmp, file_mode(path))  # a replaced file's, else the umask's (mkstemp's is 0600)
    tmp.replace(path)
    return path
