"""NVIDIA PhysicsNeMo's MeshGraphNet as a subject of the study, through a worker process.

PhysicsNeMo lives in its own environment (``python -m kit.runtime.venvs physicsnemo``), so the
kit talks to it through ``physicsnemo_worker.py`` over a pipe. ``Remote`` trains (or
loads, by content hash of the subject, the data key, the worker source and the lock) and
then answers ``step`` like the kit's own networks, so the study's relations run on it
unchanged.
"""

from __future__ import annotations

import contextlib
import io
import json
import struct
import subprocess
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from kit.errors import KitError
from kit.paths import ROOT
from kit.sciml import checkpoints
from kit.sciml.mgn import directed_edges
from kit.sciml.mgn_train import Subject

WORKER = Path(__file__).with_name("physicsnemo_worker.py")
LOCK = ROOT / "locks" / "physicsnemo.lock"
Array = np.ndarray[Any, Any]
QUIT_WAIT_S = 60.0  # for a worker asked to quit, before it is killed


class Remote:
    """A served MeshGraphNet; ``step`` takes and returns torch tensors or arrays."""

    def __init__(self, python: Path, backend: str = "physicsnemo") -> None:
        self.backend = backend
        self.process = subprocess.Popen(
            [str(python), str(WORKER), "--backend", backend], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.info: dict[str, float] = {}

    def _send(self, **arrays: Any) -> None:
        if self.process.stdin is None:
            raise KitError(f"{WORKER.name}: no pipe to the worker")
        buffer = io.BytesIO()
        np.savez(buffer, **{k: np.asarray(v) for k, v in arrays.items()})
        payload = buffer.getvalue()
        self.process.stdin.write(struct.pack("<Q", len(payload)) + payload)
        self.process.stdin.flush()

    def _call(self, **arrays: Any) -> dict[str, Array]:
        if self.process.stdout is None:
            raise KitError(f"{WORKER.name}: no pipe from the worker")
        try:
            self._send(**arrays)
            head = self.process.stdout.read(8)
        except BrokenPipeError:
            head = b""
        if len(head) < 8:
            self.process.kill()
            self.process.wait(timeout=60)
            said = self.process.stderr.read().decode(errors="replace") if self.process.stderr \
                else ""
            raise KitError(f"{WORKER.name} ({self.backend}) ended without answering "
                           f"{arrays.get('op')!r}:\n" + "\n".join(said.splitlines()[-20:]))
        (size,) = struct.unpack("<Q", head)
        with np.load(io.BytesIO(self.process.stdout.read(size)), allow_pickle=False) as data:
            answer = {k: data[k] for k in data.files}
        if "error" in answer:
            raise KitError(f"{WORKER.name} ({self.backend}): {answer['error']}")
        return answer

    def train(self, subject: Subject, data: dict[str, Array], train_frames: int, key: str,
              cache: Path | None = None) -> Remote:
        digest = checkpoints.content_key(subject, (WORKER, LOCK), key.encode())
        path = checkpoints.cached_path("physicsnemo", f"{self.backend}-{subject.name}-{digest}",
                                       cache)
        config = {**asdict(subject), "train_frames": train_frames}
        answer = self._call(op="train", config=json.dumps(config), checkpoint=str(path),
                            pos=data["mesh_pos"], edges=directed_edges(data["cells"]),
                            node_type=data["node_type"][:, 0].astype(np.int64),
                            velocity=data["velocity"])
        self.info = {"final_loss": float(answer["final_loss"]),
                     "parameters": int(answer["parameters"])}
        return self

    def step(self, pos: Any, velocity: Any, node_type: Any, edges: Any) -> Any:
        import torch

        answer = self._call(op="step", pos=np.asarray(pos), velocity=np.asarray(velocity),
                            node_type=np.asarray(node_type), edges=np.asarray(edges))
        return torch.tensor(answer["velocity"])

    def eval(self) -> Remote:
        return self

    def close(self, stopping: bool = False) -> None:
        """Ask the worker to quit and wait for it, ``QUIT_WAIT_S`` at most before it is
        killed; ``stopping`` (a stop or an error unwinding the caller): kill it at once,
        since an answer it is still computing is no longer wanted (what it trained is in
        the content-keyed cache already or not at all: written atomically)."""
        if self.process.poll() is None and not stopping:
            try:
                self._send(op="quit")
                if self.process.stdin is not None:
                    self.process.stdin.close()
            except BrokenPipeError:
                pass
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=QUIT_WAIT_S)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None and not stream.closed:
                with contextlib.suppress(BrokenPipeError):
                    stream.close()

    def __enter__(self) -> Remote:
        return self

    def __exit__(self, kind: object, *_: object) -> None:
        self.close(stopping=kind is not None)
