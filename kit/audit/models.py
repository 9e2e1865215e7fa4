"""The models people run, exported by torch for the audit's bench and tests.

- ``resnet18``, ``mobilenet_v3_small``, ``squeezenet1_1``, ``efficientnet_b0``:
  torchvision's models with random weights (``weights=None``: nothing is downloaded),
  seeded; inputs: 16 standard-normal images of 224 x 224.
- ``encoder``: a two-layer ``nn.TransformerEncoder`` (batch first) behind an
  ``nn.Embedding``, with a mean-pooled linear head; a second output gives the encoder's
  states laid out by sequence position (12, rows, 32), as a seq-first consumer takes them,
  so it has no batch axis; inputs: 16 rows of 12 token ids.

Every model is exported by torch's TorchScript exporter at opset 17 with a dynamic first
axis (the rows), as the exports in docs/audit.md were.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np

from kit.errors import KitError
from kit.files import write_npz

TORCHVISION = ("resnet18", "mobilenet_v3_small", "squeezenet1_1", "efficientnet_b0")
NAMES = (*TORCHVISION, "encoder")
ROWS = 16
SEED = 0


def export(name: str, folder: Path) -> tuple[Path, Path]:
    """``folder/NAME.onnx`` and its inputs ``folder/NAME.npz``; ``folder`` must exist."""
    import torch

    if name not in NAMES:
        raise KitError(f"bench: no model named {name!r} (one of {', '.join(NAMES)})")
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    model, inputs = folder / f"{name}.onnx", folder / f"{name}.npz"
    if name == "encoder":
        module, example = _encoder(torch), torch.zeros(2, 12, dtype=torch.int64)
        names, outputs = ["ids"], ["logits", "states"]
        axes = {"ids": {0: "n"}, "logits": {0: "n"}, "states": {1: "n"}}
        arrays = {"ids": rng.integers(0, 100, (ROWS, 12))}
    else:
        import torchvision

        module = getattr(torchvision.models, name)(weights=None)
        example = torch.zeros(1, 3, 224, 224)
        names, outputs = ["x"], ["logits"]
        axes = {"x": {0: "n"}, "logits": {0: "n"}}
        arrays = {"x": rng.standard_normal((ROWS, 3, 224, 224)).astype(np.float32)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), (example,), str(model), input_names=names,
                          output_names=outputs, dynamic_axes=axes, opset_version=17,
                          dynamo=False)
    write_npz(inputs, arrays)
    return model, inputs


def _encoder(torch: Any) -> Any:
    class Encoder(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(100, 32)
            layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
            self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = torch.nn.Linear(32, 10)

        def forward(self, ids: Any) -> tuple[Any, Any]:
            states = self.encoder(self.embed(ids))
            return self.head(states.mean(dim=1)), states.transpose(0, 1)

    return Encoder()
