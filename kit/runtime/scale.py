"""Scale-out: hand a list of job batches to Dask distributed, or run them in this process.

A batch is one runtime and the jobs it runs in one worker process (``backends.run_jobs``).
Every job writes its own output file and depends on nothing but its model, inputs and
session options, so the order and the process a batch runs in change no byte:

- ``workers=1`` without a scheduler: every batch in this process, in order;
- ``threads=True`` without a scheduler: up to ``workers`` batches at once, each batch's
  worker process started and awaited by a thread of this process (no cluster to start:
  the audit's two releases run side by side at once). Each worker dies with this process
  (``kit.procs``), so a killed audit leaves none writing;
- otherwise a ``distributed.LocalCluster`` of ``workers`` single-threaded worker processes
  (default: one per core), on loopback, torn down afterwards. It admits only the kit's own
  processes: every connection is TLS with mutual certificates from a self-signed key made
  for this run and held in memory (``distributed.security.Security.temporary``; the worker
  processes receive it from their nannies), so another local user's client, which lacks
  the key, fails its handshake and runs nothing; Dask's HTTP servers serve no route
  (``NO_HTTP``: no task keys, logs or call stacks to anyone on the machine);
- ``scheduler="tcp://HOST:PORT"`` (or ``tls://``, with the certificates Dask's own
  configuration names: ``cluster_security``): an existing cluster. Its workers need the
  kit installed and the run folder at the same path (a shared filesystem); each builds or
  reuses the runtime environments from the committed locks (``kit.runtime.venvs``,
  serialised per environment by a file lock). An unreachable scheduler is a
  ``ScaleError`` before any job.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.errors import KitError
from kit.heartbeat import stderr_line
from kit.procs import stop_children
from kit.runtime.backends import reap_orphans, run_jobs
from kit.runtime.runtimes import Runtime

CONNECT_TIMEOUT_S = 20
# Dask's HTTP servers answer without the cluster's key: the scheduler's would list task
# keys (run paths), worker logs and live call stacks to any local user. None is served.
NO_HTTP: dict[str, list[str]] = {"distributed.scheduler.http.routes": [],
                                 "distributed.worker.http.routes": [],
                                 "distributed.nanny.http.routes": []}


class ScaleError(KitError):
    """No cluster to run on (an unreachable scheduler, a bad worker count)."""


@dataclass(frozen=True)
class Batch:
    """The jobs one worker process runs under one runtime."""

    runtime: Runtime
    jobs: tuple[dict[str, Any], ...]
    label: str
    folder: str = ""  # the jobs' outputs are relative to this folder of out_root


def _run_batch(batch: Batch, in_root: str, out_root: str, backend: str | None) -> int:
    """Run one batch; the worker's progress lines go to this process's stderr (a Dask
    worker process inherits the kit's) with the batch's label."""
    def progress(text: str) -> None:
        stderr_line(f"{text} ({batch.label})")

    run_jobs(batch.runtime, list(batch.jobs), Path(in_root), Path(out_root) / batch.folder,
             backend, progress=progress)
    return len(batch.jobs)


def _try_batch(batch: Batch, in_root: str, out_root: str, backend: str | None) -> str:
    """Run one batch and return its worker's error ('' when it ran): for callers to whom a
    model that a runtime cannot load or run is a finding, not a failure."""
    try:
        _run_batch(batch, in_root, out_root, backend)
    except KitError as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return ""


def _in_threads(batches: Sequence[Batch], run: Callable[..., Any], where: tuple[Any, ...],
                count: int, say: Callable[[str], None]) -> dict[str, str]:
    """``run_batches`` with ``threads``: each batch on a thread that starts its worker
    process and waits for it, at most ``count`` at once; a raised error is raised once
    the threads that run end, the batches not started yet never start. Stopped (Ctrl-C,
    SIGTERM), whether while the batches run or while a failed one waits for the others to
    end, it kills the running workers first (``kit.procs.stop_children``)."""
    from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

    errors: dict[str, str] = {}
    pool = ThreadPoolExecutor(min(count, len(batches)))
    futures: dict[Any, Batch] = {}
    try:
        futures = {pool.submit(run, batch, *where): batch for batch in batches}
        pending, done = set(futures), 0
        while pending:
            finished, pending = wait(pending, return_when=FIRST_EXCEPTION)
            for future in finished:
                if future.exception() is not None:
                    raise future.exception()  # type: ignore[misc]
                if error := future.result():
                    errors[futures[future].label] = str(error)
                done += 1
                say(f"batch {done}/{len(batches)} done ({futures[future].label})")
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the running workers stop too
        stop_children()
        raise
    finally:
        # the batches not started never start; the running ones end (waited on through
        # their futures: a join a signal interrupts takes a live thread for ended)
        pool.shutdown(wait=False, cancel_futures=True)
        try:
            wait(futures)
        except KeyboardInterrupt:  # stopped while they end: they end now
            stop_children()
            wait(futures)
            raise
    return errors


def default_workers() -> int:
    """One single-threaded worker process per core."""
    return os.cpu_count() or 1


MAX_WORKERS = 256  # local worker processes, as the sweep bounds its thread counts


def check_options(scheduler: str | None, workers: int | None) -> int:
    """The worker count to use; a bad count or scheduler address is a ScaleError (the
    command line asks this before any stage starts)."""
    count = default_workers() if workers is None else workers
    if count < 1:
        raise ScaleError(f"workers must be at least 1, not {count}")
    if count > MAX_WORKERS:
        raise ScaleError(f"workers must be at most {MAX_WORKERS} (a process each on this "
                         f"machine), not {count}")
    if scheduler is not None:
        check_scheduler(scheduler)
    return count


# A host name's labels (RFC 1123, and the underscore resolvers take in a compose service's
# name): letters, digits, inner hyphens and underscores, 63 bytes at most.
LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
MAX_HOST = 253  # the longest host name DNS carries


def check_scheduler(scheduler: str) -> None:
    """Refuse, naming what is wrong, an address that is not ``tcp://HOST:PORT`` or
    ``tls://HOST:PORT``: a port outside 1 to 65535, a host that is neither an IP address
    (IPv6 in brackets, as Dask writes it) nor a host name (``socket`` would raise a
    UnicodeError on a label past 63 bytes). Asked before anything starts."""
    shown = f"scheduler {_short(scheduler)!r}"
    scheme, _, address = scheduler.partition("://")
    host, colon, port = address.rpartition(":")
    if scheme not in ("tcp", "tls") or not colon or not host:
        raise ScaleError(f"{shown}: give an address as tcp://HOST:PORT")
    if not (port.isascii() and port.isdigit() and len(port) <= 5 and 1 <= int(port) <= 65535):
        raise ScaleError(f"{shown}: the port {_short(port)!r} is not a number from 1 to 65535")
    bracketed = host.startswith("[") and host.endswith("]")
    try:
        found = ipaddress.ip_address(host[1:-1] if bracketed else host)
    except ValueError:
        found = None
    if found is not None and bracketed == (found.version == 6):
        return
    labels = host.removesuffix(".").split(".")
    if found is not None or len(host) > MAX_HOST or labels[-1].isdigit() \
            or not all(map(LABEL.fullmatch, labels)):
        raise ScaleError(f"{shown}: the host {_short(host)!r} is neither an IP address (IPv6 "
                         "in brackets) nor a host name (labels of letters, digits, hyphens "
                         f"and underscores, 63 characters at most, {MAX_HOST} in all)")


def _short(text: str, most: int = 80) -> str:
    """``text``, or its start and end around ``...`` when longer than ``most``."""
    return text if len(text) <= most else f"{text[:most - 25]}...{text[-20:]}"


def run_security() -> Any:
    """A per-run TLS key and self-signed certificate, in memory only, that every member of
    the kit's local cluster (scheduler, nannies, workers, client) presents and requires."""
    from distributed.security import Security

    try:
        return Security.temporary()  # type: ignore[no-untyped-call]
    except ImportError as exc:
        raise ScaleError("the local Dask cluster needs the 'cryptography' package for its "
                         "per-run TLS key (locks/tools.lock); rebuild the tools environment"
                         ) from exc


def cluster_security(scheduler: str) -> Any:
    """The client's TLS settings for an existing cluster, as its owners configure Dask
    (``distributed.comm.tls.*``: a configuration file or ``DASK_DISTRIBUTED__COMM__TLS__*``);
    a ``tls://`` address without them is a ScaleError before any connection."""
    from distributed.security import Security

    if not scheduler.startswith("tls://"):
        return None
    security: Any = Security()  # type: ignore[no-untyped-call]
    if not (security.tls_ca_file and security.tls_client_cert):
        raise ScaleError(f"scheduler {scheduler}: a TLS address, but Dask's configuration "
                         "names no CA file and client certificate (distributed.comm.tls.ca-file "
                         "and distributed.comm.tls.client.cert)")
    return security


def local_client(workers: int) -> Any:
    """A client of a new loopback ``LocalCluster`` of ``workers`` single-threaded worker
    processes that admits only holders of this run's key (``run_security``); closing the
    client's ``cluster`` tears it down."""
    import dask
    from distributed import Client, LocalCluster

    security = run_security()
    with dask.config.set(NO_HTTP):  # the nannies pass it on to the worker processes
        cluster = LocalCluster(  # type: ignore[no-untyped-call]
            n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
            protocol="tls://", security=security, dashboard_address=None,
            # no dashboard; what HTTP server Dask still starts listens on a free loopback
            # port (never the fixed 8787 a second cluster would collide with) and serves
            # no route (NO_HTTP)
            scheduler_kwargs={"dashboard": False, "dashboard_address": "127.0.0.1:0"})
    if not cluster.scheduler_address.startswith("tls://"):
        cluster.close()
        raise ScaleError(f"the local Dask cluster listens on {cluster.scheduler_address}, "
                         "not TLS; refusing to run jobs on it")
    return Client(cluster, security=security)  # type: ignore[no-untyped-call]


def _client(scheduler: str | None, workers: int) -> Any:
    from distributed import Client

    if scheduler is None:
        return local_client(workers)
    try:
        return Client(scheduler, timeout=CONNECT_TIMEOUT_S,  # type: ignore[no-untyped-call]
                      security=cluster_security(scheduler))
    except (OSError, TimeoutError) as exc:
        raise ScaleError(f"scheduler {scheduler}: no Dask scheduler answers within "
                         f"{CONNECT_TIMEOUT_S} s ({exc})") from exc


def run_batches(batches: Sequence[Batch], in_root: Path, out_root: Path,
                backend: str | None = None, scheduler: str | None = None,
                workers: int | None = None,
                progress: Callable[[str], None] | None = None,
                collect: bool = False, threads: bool = False) -> dict[str, str]:
    """Run every batch, serially, from threads (``threads``) or on Dask; the first failing
    batch's error is raised (a ``WorkerFailed`` naming the file) after the others were
    cancelled (from threads: after the running ones end). With ``collect`` every batch
    runs and the worker errors come back instead, by batch label."""
    count = check_options(scheduler, workers)
    say = progress or (lambda line: None)
    run = _try_batch if collect else _run_batch
    errors: dict[str, str] = {}
    if not batches:
        return errors
    if scheduler is None and count == 1:
        for done, batch in enumerate(batches, 1):
            if error := run(batch, str(in_root), str(out_root), backend):
                errors[batch.label] = str(error)
            say(f"batch {done}/{len(batches)} done ({batch.label})")
        return errors
    if scheduler is None and threads:
        return _in_threads(batches, run, (str(in_root), str(out_root), backend), count, say)
    from distributed import as_completed

    client, failed = _client(scheduler, count), True
    try:
        futures = [client.submit(run, batch, str(in_root), str(out_root), backend,
                                 key=f"kit-batch-{i}-{batch.label}", pure=False)
                   for i, batch in enumerate(batches)]
        labels = {future.key: batch.label for future, batch in zip(futures, batches, strict=True)}
        for done, future in enumerate(as_completed(futures), 1):  # type: ignore[no-untyped-call]
            try:
                if error := future.result():
                    errors[labels[future.key]] = str(error)
            except BaseException:
                client.cancel(futures)
                raise
            say(f"batch {done}/{len(batches)} done ({labels[future.key]})")
        failed = False
    finally:
        cluster = client.cluster if scheduler is None else None
        client.close()
        if cluster is not None:
            cluster.close()
            if failed:  # a docker worker's container outlives the cluster's worker
                reap_orphans(again=True)
    return errors
