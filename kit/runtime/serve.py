"""One worker process per release for a whole command (``kit audit``): its rounds of jobs
(the audited pair, then the clean pairs when the pair differs, then the instrumented copy)
go to the worker that ran the round before, not to a new one each.

``Workers.run(batches)`` hands each batch to the worker of its runtime and its folders,
started on first use with ``worker.py --serve --in-root IN --out-root OUT`` (the folders
stay fixed for the worker's life, and every job is held inside them as a ``--jobs`` run
holds it), then writes the batch's jobs file and its path on the worker's stdin and reads
the one line that answers it. At most ``workers`` batches run at once, each release's in
its own process, so the audit's two releases run side by side with no cluster to start.
``started`` counts the worker processes each batch label started: one per release for an
audit, whatever the rounds.

Every worker is started from the thread that made the ``Workers`` and lives until it
leaves the ``with`` block: Linux delivers ``kit.procs``' death signal when the thread that
started a child ends, and that thread outlives every worker. A worker's stderr is read by
a thread of its own (progress lines go on to ``progress``, the rest is kept for an error).
An answer ``{"error": ...}`` or a worker that ends before it answers is a ``WorkerFailed``
naming the worker's file (with the worker's own ``FILE: WHAT`` and its release, from which
the audit names the user's files); leaving the block on an error kills the workers at once, else
each ends at the end of its input.

The ``docker`` backend and a Dask scheduler run the batches as ``kit.runtime.scale`` does
(one worker process per batch): a container and a cluster's worker are started per batch.
"""

from __future__ import annotations

import collections
import contextlib
import json
import shutil
import subprocess
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from kit.errors import WorkerFailed
from kit.runtime.backends import JOBS_PREFIX, WORKER, select_backend, worker_env, worker_error
from kit.runtime.runtimes import Runtime
from kit.runtime.scale import Batch, check_options, run_batches
from kit.runtime.scratch import make
from kit.runtime.worker import canonical_json

Key = tuple[str, Path, Path]  # runtime name, in_root, out_root
KEPT_LINES = 200  # of a worker's stderr, for the error that names why it stopped


class _Worker:
    """One ``--serve`` process and the thread that reads its stderr."""

    def __init__(self, runtime: Runtime, in_root: Path, out_root: Path, label: str,
                 progress: Callable[[str], None]) -> None:
        from kit.runtime.venvs import ensure_runtime

        self.name, self.label, self.release = runtime.name, label, runtime.onnxruntime
        cmd = [str(ensure_runtime(runtime.name)), "-I", str(WORKER), "--serve",
               "--in-root", str(in_root), "--out-root", str(out_root)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, bufsize=1,
                                     env=worker_env("venv"))
        self.said: collections.deque[str] = collections.deque(maxlen=KEPT_LINES)
        self.reader = threading.Thread(target=self._read, args=(progress,), daemon=True)
        self.reader.start()

    def _read(self, progress: Callable[[str], None]) -> None:
        stderr: IO[str] = self.proc.stderr  # type: ignore[assignment]
        for line in stderr:
            self.said.append(line)
            if line.startswith("worker: progress"):
                progress(f"{line.rstrip()} ({self.label})")

    def send(self, jobs_file: Path) -> None:
        stdin: IO[str] = self.proc.stdin  # type: ignore[assignment]
        try:
            stdin.write(f"{jobs_file}\n")
            stdin.flush()
        except BrokenPipeError:
            pass  # it ended: ``answer`` reads no line and says why

    def answer(self, where: Path) -> int:
        """The number of outputs the oldest unanswered jobs file wrote."""
        stdout: IO[str] = self.proc.stdout  # type: ignore[assignment]
        line = stdout.readline()
        if not line:
            self.proc.wait()
            self.reader.join(timeout=5)
            said = "".join(self.said)
            reason = worker_error(said) or "\n".join(said.strip().splitlines()[-15:])
            raise WorkerFailed(f"{self.name} worker (venv, serving) under {where} ended "
                               f"with status {self.proc.returncode}: {reason}", said,
                               worker_error(said), self.release)
        found: dict[str, Any] = json.loads(line)
        if "error" in found:
            raise WorkerFailed(f"{self.name} worker (venv) under {where}: {found['error']}",
                               "".join(self.said), found["error"], self.release)
        return int(found["wrote"])

    def close(self, kill: bool) -> None:
        """End the process: at the end of its input, or at once (``kill``)."""
        if kill:
            self.proc.kill()
        with contextlib.suppress(BrokenPipeError):  # it had ended
            self.proc.stdin.close()  # type: ignore[union-attr]
        self.proc.wait()
        self.reader.join(timeout=5)
        for stream in (self.proc.stdout, self.proc.stderr):
            stream.close()  # type: ignore[union-attr]


class Workers:
    """The serving workers of one command (module docstring)."""

    def __init__(self, backend: str | None = None, scheduler: str | None = None,
                 workers: int | None = None,
                 progress: Callable[[str], None] | None = None) -> None:
        self.count = check_options(scheduler, workers)
        self.backend, self.scheduler = backend, scheduler
        self.say = progress or (lambda line: None)
        self.serving = scheduler is None and select_backend(backend) == "venv"
        self.live: dict[Key, _Worker] = {}
        self.started: dict[str, int] = {}
        self.jobs_dir: Path | None = None
        self.sent = 0

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for worker in self.live.values():
            worker.close(kill=kind is not None)
        self.live.clear()
        if self.jobs_dir is not None:
            shutil.rmtree(self.jobs_dir, ignore_errors=True)

    def run(self, batches: Sequence[Batch], in_root: Path, out_root: Path) -> None:
        """Every batch, at most ``count`` at once; the first error is raised."""
        if not self.serving:
            run_batches(batches, in_root, out_root, backend=self.backend,
                        scheduler=self.scheduler, workers=self.count, progress=self.say,
                        threads=True)
            return
        in_root, out_root = Path(in_root).resolve(), Path(out_root).resolve()
        for at in range(0, len(batches), self.count):
            chunk = batches[at:at + self.count]
            sent = [(batch, self._send(batch, in_root, out_root)) for batch in chunk]
            for batch, worker in sent:
                worker.answer(in_root)
                self.say(f"batch of {len(batch.jobs)} jobs done ({batch.label})")

    def _send(self, batch: Batch, in_root: Path, out_root: Path) -> _Worker:
        out = (out_root / batch.folder).resolve()
        out.mkdir(parents=True, exist_ok=True)
        key = (batch.runtime.name, in_root, out)
        if key not in self.live:
            self.live[key] = _Worker(batch.runtime, in_root, out, batch.label, self.say)
            self.started[batch.label] = self.started.get(batch.label, 0) + 1
        if self.jobs_dir is None:
            import tempfile

            self.jobs_dir = make(Path(tempfile.gettempdir()), JOBS_PREFIX)
        self.sent += 1
        jobs_file = self.jobs_dir / f"jobs-{self.sent:05d}.json"
        full = [{"graph_optimization": batch.runtime.graph_optimization, **job}
                for job in batch.jobs]
        jobs_file.write_bytes(canonical_json({"jobs": full}))
        self.live[key].send(jobs_file)
        return self.live[key]
