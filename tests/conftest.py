"""Fixtures that build tiny real inputs: a small conv net exported the way the drift
study exports (BN folded), seeded input tensors, and the docker gate."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from kit.drift.protocol import write_small_protocol
from kit.drift.stages.pipeline import reproduce
from kit.errors import ImageError
from kit.files import write_npz
from kit.runfolder import Run
from kit.runtime.backends import docker_available
from kit.runtime.docker import image_labels
from kit.runtime.runtimes import load_runtimes
from kit.sciml.checkpoints import NUMERICS

# The SciML study holds torch's kernels to AVX2 (kit/sciml/checkpoints.py) and refuses to
# run in a process whose torch already chose others: set the pin before any test runs one.
os.environ.update(NUMERICS)


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
    from kit.drift.export import export_onnx

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


def dead_pid() -> int:
    """The pid of a process that has ended (for the kit's temporary names, whose writer
    must be gone before another process removes them)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(proc.stdout)


def job(**fields: object) -> dict[str, object]:
    """A job over the ``workdir`` fixture's files, with overrides."""
    return {"id": "j", "model": "convnet.onnx", "inputs": "images.npz", "output": "out.npz",
            **fields}


JobFactory = Callable[..., dict[str, object]]


def synthetic_table(seed: int = 0, models: int = 2, n_cal: int = 40, n_held: int = 30,
                    faults: int = 4, layers: int = 5) -> tuple[dict[str, np.ndarray],
                                                               dict[str, np.ndarray]]:
    """A case table shaped like the score stage's (clean rows on every image, fault rows
    on held-out images) with random scores, and matching per-layer scores."""
    from kit.drift.evidence import CASE_COLUMNS

    rng = np.random.default_rng(seed)
    samples = np.arange(n_cal + n_held)
    role = np.r_[np.zeros(n_cal, np.int8), np.ones(n_held, np.int8)]
    columns: dict[str, list[np.ndarray]] = {name: [] for name in CASE_COLUMNS}
    layer_data: dict[str, np.ndarray] = {}
    offset = 0
    for m in range(models):
        blocks = [(-1, samples, role)] + [(f + m * faults, samples[n_cal:], role[n_cal:])
                                          for f in range(faults)]
        kept_rows, kept = [], {k: [] for k in ("direct", "metamorphic", "maximum")}
        for fault, sample, rl in blocks:
            n = len(sample)
            shift = 0.0 if fault < 0 else 0.5 * (1 + fault % faults)
            e_o = rng.exponential(size=n) + shift
            e_t = rng.exponential(size=n) + shift
            cos = rng.uniform(-1, 1, n)
            meta = np.sqrt(np.maximum(e_o**2 + e_t**2 - 2 * e_o * e_t * cos, 0))
            true_layer = -1 if fault < 0 else fault % layers
            block = {"model": m, "fault": fault, "position": -1 if fault < 0 else fault % 3,
                     "family": -1 if fault < 0 else fault % 3, "level": -1 if fault < 0 else 0,
                     "layer": true_layer, "sample": sample, "image": sample + 1000,
                     "role": rl, "label": sample % 10, "e_o_norm": e_o, "e_t_norm": e_t,
                     "metamorphic": meta, "mixed": e_o * rng.uniform(0.5, 2, n),
                     "maximum": np.maximum(e_o, e_t), "cosine": cos,
                     "ratio": meta / (e_o + e_t), "ref_top1_o": sample % 10,
                     "ref_top1_t": np.where(rng.uniform(size=n) < 0.8, sample % 10, 0),
                     "cand_top1_o": sample % 10, "stable": rng.uniform(size=n) < 0.8,
                     "rank_direct": 0, "rank_metamorphic": 0, "rank_maximum": 0}
            for name, dtype in CASE_COLUMNS.items():
                columns[name].append(np.broadcast_to(np.asarray(block[name]), (n,))
                                     .astype(dtype))
            scores = rng.exponential(size=(n, layers)).astype(np.float32)
            if fault >= 0:
                scores[:, true_layer] += np.float32(1.5)
            keep = np.flatnonzero(rl == 0) if fault < 0 else np.arange(n)
            for k in kept:
                kept[k].append(scores[keep] * (1 + 0.1 * ("direct", "metamorphic",
                                                          "maximum").index(k)))
            kept_rows.append(offset + keep)
            offset += n
        layer_data[f"m{m}/rows"] = np.concatenate(kept_rows).astype(np.int32)
        for k, parts in kept.items():
            layer_data[f"m{m}/{k}"] = np.concatenate(parts).astype(np.float32)
    return {k: np.concatenate(v) for k, v in columns.items()}, layer_data


@pytest.fixture
def table() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    return synthetic_table()


def tiny_protocol(tmp: Path) -> Path:
    return write_small_protocol(tmp / "tiny.yaml")


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, Path]:
    tmp = tmp_path_factory.mktemp("stages")
    protocol = tiny_protocol(tmp)
    root = reproduce(run_dir=tmp / "run", protocol_file=protocol, backend="venv")
    return Run(root), protocol


def verify_edited_json(tmp_path: Path, folder: str, name: str,
                       edit: Callable[[object], None]) -> tuple[int, list[str]]:
    """verify on a copy of the checkout whose evidence file ``folder/name`` (a JSON record)
    was edited by ``edit`` and re-hashed everywhere below the root (its run manifest and the
    sha256 manifests), so only a recount can see the edit: the exit status and the
    problems."""
    import json
    import shutil

    from kit.claims.coverage import write_manifests
    from kit.claims.verify import verify
    from kit.files import canonical_json, sha256
    from kit.paths import ROOT

    root = tmp_path / "repo"
    for top in ("claims", "manifests", "locks"):
        shutil.copytree(ROOT / top, root / top)
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    path = root / folder / name
    record = json.loads(path.read_text())
    edit(record)
    path.write_bytes(canonical_json(record))
    score = root / folder / "score" / "score.json"  # a drift record lists its files' sha256
    if score.is_file() and name != "score/score.json":
        listed = json.loads(score.read_text())
        for entry in [*listed["tables"].values(),
                      *(listed[k] for k in ("layers", "clean_logits", "summary"))]:
            if entry["path"] == name:
                entry["sha256"] = sha256(path)
        score.write_bytes(canonical_json(listed))
    manifest = root / folder / "run-manifest.json"
    listing = json.loads(manifest.read_text())
    for changed in (name, "score/score.json"):
        if changed in listing["files"]:
            listing["files"][changed] = sha256(root / folder / changed)
    manifest.write_bytes(canonical_json(listing))
    replay = root / folder / "replay.json"  # names the run manifest it compared
    if replay.is_file():
        data = json.loads(replay.read_text())
        data["first_manifest_sha256"] = sha256(manifest)
        replay.write_bytes(canonical_json(data))
    write_manifests(root)
    out = tmp_path / "out.json"
    code = verify(root, json_out=out)
    return code, json.loads(out.read_text())["problems"]


def pytest_report_header(config: pytest.Config) -> str:
    """Free disk where the tests write, so that a run that fails on a full disk says so in
    its first lines: a full run needs a few GB under the temporary folder."""
    import shutil
    import tempfile

    here = Path(__file__).resolve().parents[1]
    free = {str(p): shutil.disk_usage(p).free / 2**30 for p in (here, Path(tempfile.gettempdir()))}
    return "free disk: " + ", ".join(f"{p} {gib:.1f} GiB" for p, gib in free.items())
