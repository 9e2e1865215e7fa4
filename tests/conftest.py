"""Fixtures that build tiny real inputs: a small conv net exported the way the drift
study exports (BN folded), seeded input tensors, and the docker gate."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from kit.backends import docker_available, image_labels
from kit.errors import ImageError
from kit.runtimes import load_runtimes
from kit.worker import write_npz


def _small_convnet(seed: int) -> object:
    import torch
    from torch import nn

    torch.manual_seed(seed)

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                       nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else nn.Identity())

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(y)) + self.skip(x))

    net = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                        Block(16, 16, 1), Block(16, 32, 2), Block(32, 64, 2),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
    # Non-trivial BN statistics, so that folding them changes the conv weights.
    generator = torch.Generator().manual_seed(seed + 1)
    for module in net.modules():
        if isinstance(module, nn.BatchNorm2d):
            n = module.num_features
            module.running_mean.copy_(0.1 * torch.randn(n, generator=generator))
            module.running_var.copy_(0.5 + torch.rand(n, generator=generator))
            module.weight.data.copy_(1.0 + 0.2 * torch.randn(n, generator=generator))
            module.bias.data.copy_(0.1 * torch.randn(n, generator=generator))
    return net.eval()


@pytest.fixture(scope="session")
def convnet_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small residual conv net with BatchNorm, exported with BN folded."""
    from kit.export import export_onnx

    path = tmp_path_factory.mktemp("model") / "convnet.onnx"
    return export_onnx(_small_convnet(seed=7), path, (1, 3, 32, 32))  # type: ignore[arg-type]


def image_batch(n: int, seed: int = 0) -> np.ndarray:
    """Seeded standard-normal NCHW float32 images."""
    return np.random.default_rng(seed).standard_normal((n, 3, 32, 32), dtype=np.float32)


@pytest.fixture
def workdir(tmp_path: Path, convnet_onnx: Path) -> Path:
    """A run folder with the model and a 40-image input file, as a stage would lay it."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "convnet.onnx").write_bytes(convnet_onnx.read_bytes())
    write_npz(tmp_path / "in" / "images.npz", {"input": image_batch(40)})
    return tmp_path


@pytest.fixture(scope="session")
def docker_ready() -> None:
    """Skip docker tests where no daemon answers, unless KIT_REQUIRE_DOCKER=1 (CI),
    where a missing daemon or image is a failure."""
    required = os.environ.get("KIT_REQUIRE_DOCKER") == "1"
    problem = None
    if not docker_available():
        problem = "no Docker daemon answers"
    else:
        try:
            for runtime in load_runtimes().values():
                image_labels(runtime.image)
        except ImageError as exc:
            problem = str(exc)
    if problem:
        if required:
            pytest.fail(f"KIT_REQUIRE_DOCKER=1 but {problem}")
        pytest.skip(problem)


def job(**fields: object) -> dict[str, object]:
    """A job over the ``workdir`` fixture's files, with overrides."""
    return {"id": "j", "model": "convnet.onnx", "inputs": "images.npz", "output": "out.npz",
            **fields}


JobFactory = Callable[..., dict[str, object]]
