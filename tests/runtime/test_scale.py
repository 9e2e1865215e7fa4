"""Scale-out on Dask: a failing batch's error comes back from a worker process, an
unreachable scheduler or a bad address is a clear error before any job, batches run
serially with workers=1, and the kit's local cluster admits only clients holding its
per-run TLS key. (Byte identity of a real LocalCluster against a serial run:
tests/drift/test_sweep.py.)"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from kit.__main__ import main
from kit.errors import WorkerFailed
from kit.runtime import scale
from kit.runtime.runtimes import get_runtime
from kit.runtime.scale import Batch, ScaleError, run_batches
from tests.conftest import job


def _batch(*jobs: dict[str, object]) -> Batch:
    return Batch(get_runtime("cand"), tuple(jobs), "test")


def test_serial_batches_write_their_outputs(workdir: Path) -> None:
    said: list[str] = []
    run_batches([_batch(job(output="a.npz")), _batch(job(output="b.npz"))], workdir / "in",
                workdir / "out", "venv", workers=1, progress=said.append)
    assert (workdir / "out" / "a.npz").is_file()
    assert (workdir / "out" / "b.npz").is_file()
    assert said == ["batch 1/2 done (test)", "batch 2/2 done (test)"]


def test_batches_from_threads_give_the_serial_bytes_and_a_failure_names_its_file(
        workdir: Path) -> None:
    """``threads``: two batches at once, each worker started from a thread of this process
    (the audit's two releases); the same output bytes as a serial run, and a failing
    batch's error raised once the other batch ends."""
    serial, threaded = workdir / "serial", workdir / "threads"
    for out, options in ((serial, {"workers": 1}), (threaded, {"workers": 2, "threads": True})):
        said: list[str] = []
        run_batches([_batch(job(output="a.npz")), _batch(job(output="b.npz"))],
                    workdir / "in", out, "venv", progress=said.append,
                    **options)  # type: ignore[arg-type]
        assert sorted(said) == ["batch 1/2 done (test)", "batch 2/2 done (test)"]
    for name in ("a.npz", "b.npz"):
        assert (threaded / name).read_bytes() == (serial / name).read_bytes()
    with pytest.raises(WorkerFailed, match=r"missing\.onnx: model not found"):
        run_batches([_batch(job(output="c.npz")), _batch(job(model="missing.onnx"))],
                    workdir / "in", workdir / "failed", "venv", workers=2, threads=True)
    assert (workdir / "failed" / "c.npz").is_file()  # the other batch ran to its end


def test_a_failing_batch_on_a_local_cluster_names_the_file(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The failure is raised naming the file, once the cluster is closed and the containers
    its workers started that outlive them are reaped (``reap_orphans``, again)."""
    reaped: list[bool] = []
    monkeypatch.setattr(scale, "reap_orphans", lambda again=False: reaped.append(again))
    with pytest.raises(WorkerFailed, match=r"missing\.onnx: model not found"):
        run_batches([_batch(job(output="a.npz")), _batch(job(model="missing.onnx"))],
                    workdir / "in", workdir / "out", "venv", workers=2)
    assert reaped == [True]


def test_the_local_cluster_refuses_a_foreign_client_and_runs_the_kits_jobs(
        workdir: Path) -> None:
    """A client without this run's key (plain TCP, or TLS with a key of its own, as another
    local user would bring) is refused at the handshake and runs nothing; no HTTP route of
    the scheduler or a worker answers; the kit's own client still runs a real batch in a
    worker process."""
    from distributed import Client
    from distributed.comm.core import CommClosedError

    client = scale.local_client(1)
    cluster = client.cluster
    try:
        address = cluster.scheduler_address
        assert address.startswith("tls://127.0.0.1:")
        port = address.rsplit(":", 1)[1]
        for foreign, security in ((f"tcp://127.0.0.1:{port}", None),
                                  (address, scale.run_security())):
            with pytest.raises((OSError, CommClosedError, TimeoutError)):
                Client(foreign, timeout=3, security=security)
        ports = [cluster.scheduler.http_server.port, *(
            w["services"]["dashboard"] for w in client.scheduler_info()["workers"].values())]
        for port in ports:  # Dask's HTTP servers answer no one: no keys, logs or stacks
            for route in ("/health", "/info/main/workers.html", "/json/identity.json",
                          "/info/call-stacks/x.html", "/metrics"):
                with pytest.raises(urllib.error.HTTPError, match="404"):
                    urllib.request.urlopen(f"http://127.0.0.1:{port}{route}", timeout=5)
        assert client.submit(scale._run_batch, _batch(job(output="a.npz")), str(workdir / "in"),
                             str(workdir / "out"), "venv", pure=False).result() == 1
        assert (workdir / "out" / "a.npz").is_file()
    finally:
        client.close()
        cluster.close()


def test_an_unreachable_scheduler_is_refused(workdir: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scale, "CONNECT_TIMEOUT_S", 2)
    with pytest.raises(ScaleError, match=r"scheduler tcp://127.0.0.1:9: no Dask scheduler "
                                         r"answers within 2 s"):
        run_batches([_batch(job())], workdir / "in", workdir / "out", "venv",
                    scheduler="tcp://127.0.0.1:9")
    assert not (workdir / "out").exists()


@pytest.mark.parametrize(("options", "message"), [
    (["--scheduler", "localhost:8786"], "give an address as tcp://HOST:PORT"),
    (["--scheduler", "tcp://" + "a" * 70 + ":8786"], "is neither an IP address (IPv6"),
    (["--scheduler", "tcp://127.0.0.1:99999999999"], "the port '99999999999' is not a number"),
    (["--workers", "0"], "workers must be at least 1, not 0"),
    (["--workers", "1000000000"], "workers must be at most 256")])
def test_bad_scale_options_exit_2(options: list[str], message: str, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["stage", "infer"], ["reproduce"], ["sweep"]):
        assert main([*command, "--run", str(tmp_path / "run"), *options]) == 2
        assert message in capsys.readouterr().err
        assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("address", [
    "tcp://127.0.0.1:8786", "tls://[::1]:1", "tcp://h:65535", "tcp://dask-scheduler.lab.:8786",
    "tcp://dask_scheduler:8786", "tcp://" + ".".join(["a" * 63] * 3) + ":1"])
def test_a_scheduler_address_of_a_host_name_or_ip_address_passes(address: str) -> None:
    scale.check_scheduler(address)


@pytest.mark.parametrize(("address", "message"), [
    ("tcp://h:0", "the port '0' is not a number from 1 to 65535"),
    ("tcp://h:65536", "the port '65536'"), ("tcp://h:", "the port ''"),
    ("tcp://h:+1", "the port '+1'"), ("tls://h:\u0661", "the port"),
    ("tcp://" + "a" * 64 + ":1", "neither an IP address"),  # a label past 63: UnicodeError
    ("tcp://" + ".".join(["a" * 63] * 4) + ":1", "neither an IP address"),  # 255 in all
    ("tcp://-h:1", "neither"), ("tcp://h..x:1", "neither"), ("tcp://::1:1", "neither"),
    ("tcp://[1.2.3.4]:1", "neither"), ("tcp://1.2.3:1", "neither"), ("tcp://:1", "give an"),
    ("udp://h:1", "give an address as tcp://HOST:PORT")])
def test_a_scheduler_address_is_bounded_before_anything_starts(address: str, message: str
                                                               ) -> None:
    """A port outside 1 to 65535 waited 20 s for an answer; a label past 63 characters
    was a UnicodeError from the idna codec: each a ScaleError naming the address."""
    with pytest.raises(ScaleError, match=re.escape(message)):
        scale.check_scheduler(address)


def test_a_stop_while_a_failed_batch_waits_for_the_others_kills_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One batch fails at once while another's worker runs on: the failure waits for the
    running batch to end, and a SIGTERM (``kit.procs.Stopped``) arriving in that wait kills
    its worker (it would have run two minutes) and ends the command with the stop."""
    import signal
    import sys
    import threading
    import time

    from kit import procs
    from kit.procs import Stopped
    from kit.runtime import backends

    monkeypatch.setattr(procs, "_STOPPING", threading.Event())
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]

    def run(batch: Batch, *where: object) -> int:
        if batch.label == "fails":
            raise WorkerFailed("fails at once", "")
        return backends._stream(sleeper, None, None)[0]

    def stop(signum: int, frame: object) -> None:
        raise Stopped

    batches = [Batch(get_runtime("ref"), (), label) for label in ("runs", "fails")]
    previous = signal.signal(signal.SIGUSR1, stop)
    timer = threading.Timer(2.0, lambda: signal.pthread_kill(threading.main_thread().ident,
                                                              signal.SIGUSR1))
    started = time.monotonic()
    try:
        timer.start()
        with pytest.raises(Stopped):
            scale._in_threads(batches, run, (), 2, lambda line: None)
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)
    assert time.monotonic() - started < 60
    assert procs._TRACKED == {}
