"""One worker process per runtime for every round of a command (kit.runtime.serve, the
worker's ``--serve``): the bytes of a ``--jobs`` run, one process however many rounds,
a failing jobs file named (with the worker's own line and its release) while the worker
serves on, a worker that dies named, and no worker left once the block ends. (The audit's
count per release: tests/test_audit.py.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kit.errors import WorkerFailed
from kit.runtime.runtimes import get_runtime
from kit.runtime.scale import Batch, run_batches
from kit.runtime.serve import Workers
from tests.conftest import job
from tests.kill_at import live_writers


def _batch(*jobs: dict[str, object], label: str = "cand") -> Batch:
    return Batch(get_runtime(label), tuple(jobs), label)


def test_rounds_share_one_process_per_runtime_and_give_the_bytes_of_a_jobs_run(
        workdir: Path) -> None:
    once, served = workdir / "once", workdir / "served"
    run_batches([_batch(job(output="a.npz")), _batch(job(output="b.npz"), label="ref")],
                workdir / "in", once, "venv", workers=1)
    said: list[str] = []
    with Workers("venv", None, 2, said.append) as pool:
        pool.run([_batch(job(output="a.npz")), _batch(job(output="b.npz"), label="ref")],
                 workdir / "in", served)
        pids = {key: worker.proc.pid for key, worker in pool.live.items()}
        pool.run([_batch(job(output="c.npz", intra_op_threads=2))], workdir / "in", served)
        assert {key: worker.proc.pid for key, worker in pool.live.items()} == pids
    assert pool.started == {"cand": 1, "ref": 1}
    for name in ("a.npz", "b.npz"):
        assert (served / name).read_bytes() == (once / name).read_bytes()
    assert (served / "c.npz").is_file()
    assert "batch of 1 jobs done (ref)" in said
    assert any(line.startswith("worker: progress 1/1 jobs") and line.endswith("(cand)")
               for line in said)
    for pid in pids.values():  # each ended at the end of its input, and was reaped
        assert not Path(f"/proc/{pid}").exists()


def test_a_failing_jobs_file_is_named_and_the_worker_serves_on(workdir: Path) -> None:
    with Workers("venv", None, 1) as pool:
        with pytest.raises(WorkerFailed, match=r"missing\.onnx: model not found") as failed:
            pool.run([_batch(job(model="missing.onnx"))], workdir / "in", workdir / "out")
        # the worker's own line and release, from which the audit names the user's files
        assert failed.value.reason == "missing.onnx: model not found"
        assert failed.value.release == get_runtime("cand").onnxruntime
        pool.run([_batch(job(output="after.npz"))], workdir / "in", workdir / "out")
        assert pool.started == {"cand": 1}
    assert (workdir / "out" / "after.npz").is_file()


def _killed_between_rounds(workdir: Path) -> None:
    with Workers("venv", None, 1) as pool:
        pool.run([_batch(job(output="a.npz"))], workdir / "in", workdir / "out")
        [worker] = pool.live.values()
        os.kill(worker.proc.pid, 9)
        pool.run([_batch(job(output="b.npz"))], workdir / "in", workdir / "out")


def _raising_inside(workdir: Path, workers: list[Workers]) -> None:
    with Workers("venv", None, 1) as pool:
        workers.append(pool)
        pool.run([_batch(job(output="c.npz"))], workdir / "in", workdir / "out")
        raise RuntimeError("stop")


def test_a_worker_that_dies_is_named_and_an_error_kills_the_rest(workdir: Path) -> None:
    with pytest.raises(WorkerFailed, match=r"cand worker \(venv, serving\) .* ended with "
                                           r"status -9"):
        _killed_between_rounds(workdir)
    assert not (workdir / "out" / "b.npz").exists()
    pools: list[Workers] = []
    with pytest.raises(RuntimeError, match="stop"):
        _raising_inside(workdir, pools)
    assert pools[0].live == {}
    assert live_writers(workdir / "out", 0) == []  # killed and reaped, not left serving


def test_the_worker_refuses_jobs_and_serve_together(workdir: Path) -> None:
    from kit.runtime.worker import main

    for argv in (["--serve", "--jobs", "x.json"], ["--in-root", "i"]):
        with pytest.raises(SystemExit):
            main([*argv, "--in-root", "i", "--out-root", "o"])
