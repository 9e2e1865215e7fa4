"""``--scheduler`` against a cluster started as its owners start one: ``dask scheduler``
and ``dask worker`` processes on loopback, over plain TCP and over TLS with certificates
that Dask's configuration names (``DASK_DISTRIBUTED__COMM__TLS__*``); the outputs are
byte-identical to a serial run's (``kit.runtime.scale.cluster_security``)."""

from __future__ import annotations

import datetime
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kit.errors import KitError
from kit.paths import ROOT
from kit.runtime.runtimes import get_runtime
from kit.runtime.scale import Batch, ScaleError, run_batches
from tests.conftest import job

DASK = Path(sys.executable).with_name("dask")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def certificates(folder: Path) -> dict[str, str]:
    """A CA, and one key and certificate it signed for every member (loopback): Dask's
    TLS settings as environment variables."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kit test CA")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(hours=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    (folder / "key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    env = {"DASK_DISTRIBUTED__COMM__TLS__CA_FILE": str(folder / "cert.pem"),
           "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True"}
    for member in ("SCHEDULER", "WORKER", "CLIENT"):
        env[f"DASK_DISTRIBUTED__COMM__TLS__{member}__CERT"] = str(folder / "cert.pem")
        env[f"DASK_DISTRIBUTED__COMM__TLS__{member}__KEY"] = str(folder / "key.pem")
    return env


@pytest.fixture(params=["tcp", "tls"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A scheduler and one worker process, as ``dask scheduler`` / ``dask worker`` start
    them; yields the scheduler's address. The kit is importable in the worker (the
    working folder is the checkout) and the run folder is on the same filesystem."""
    protocol = request.param
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if protocol == "tls":
        (tmp_path / "tls").mkdir()
        settings = certificates(tmp_path / "tls")
        env.update(settings)
        for name, value in settings.items():  # this process is the client
            monkeypatch.setenv(name, value)
        import dask

        dask.config.refresh()  # read the variables just set
    address = f"{protocol}://127.0.0.1:{free_port()}"
    scheduler = subprocess.Popen([str(DASK), "scheduler", "--host", "127.0.0.1", "--port",
                                  address.rsplit(":", 1)[1], "--protocol", protocol,
                                  "--no-dashboard"], cwd=ROOT, env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = subprocess.Popen([str(DASK), "worker", address, "--nthreads", "1",
                               "--nworkers", "1", "--no-dashboard"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield address
    finally:
        for proc in (worker, scheduler):
            proc.terminate()
        for proc in (worker, scheduler):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        if protocol == "tls":
            import dask

            monkeypatch.undo()
            dask.config.refresh()


def _wait_for_worker(address: str) -> None:
    from distributed import Client

    from kit.runtime.scale import cluster_security

    deadline = time.monotonic() + 60
    while True:
        try:
            with Client(address, timeout=5, security=cluster_security(address)) as client:
                client.wait_for_workers(1, timeout=max(1, deadline - time.monotonic()))
                return
        except (OSError, TimeoutError):
            if time.monotonic() > deadline:
                raise


def test_a_cluster_started_as_its_owners_start_one_gives_the_serial_bytes(
        cluster: str, workdir: Path) -> None:
    batches = [Batch(get_runtime("cand"), (job(output=f"{name}.npz"),), name)
               for name in ("a", "b", "c")]
    run_batches(batches, workdir / "in", workdir / "serial", "venv", workers=1)
    _wait_for_worker(cluster)
    run_batches(batches, workdir / "in", workdir / "cluster", "venv", scheduler=cluster)
    for name in ("a", "b", "c"):
        assert (workdir / "cluster" / f"{name}.npz").read_bytes() == \
            (workdir / "serial" / f"{name}.npz").read_bytes()


def test_a_tls_address_without_dasks_tls_settings_is_refused_before_connecting(
        workdir: Path) -> None:
    with pytest.raises(ScaleError, match="names no CA file and client certificate"):
        run_batches([Batch(get_runtime("cand"), (job(),), "x")], workdir / "in",
                    workdir / "out", "venv", scheduler="tls://127.0.0.1:1")
    assert not (workdir / "out").exists()
    assert issubclass(ScaleError, KitError)
