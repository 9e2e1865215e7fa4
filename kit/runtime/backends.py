"""Backends that run the worker for one runtime: ``docker`` and ``venv``.

Both run the very same ``kit/runtime/worker.py`` over the same job list, once per call (one
process for every job of a stage and runtime). The job list and inputs sit in folders the
worker may only read; it writes into ``out_root`` alone.

- ``docker``: ``docker run`` of the runtime's image, with ``--network none``, a read-only
  root filesystem, no capabilities, a non-root user and limits on memory (no swap), CPUs
  and processes (``docker_limits``); the jobs and inputs folders are mounted read-only
  and a private folder of its own inside the output folder writable, from which the
  jobs' outputs are moved to their places (``_run_container``).
- ``venv``: the runtime's virtual environment, built from the same lock as its image.

Either builds what it runs on first use: the environment (``kit.runtime.venvs``) or the
image (``kit.runtime.docker.ensure_image``), from the committed lock.

``select_backend(None)`` picks docker when a daemon answers, else venv.

A command stopped by Ctrl-C or SIGTERM (``kit.procs``) stops what it runs: a worker the
stopped thread itself waits on is killed as the stop unwinds through ``_stream``, and
``kit.procs.stop_children`` kills those other threads wait on; a docker worker's container, named
``kit-<pid>-<random>``, is killed by name, since it outlives its ``docker run`` client.
A SIGKILLed kit can stop nothing: its containers carry the pid that started them and this
machine's process space (``kit.parent``, ``kit.host``: the boot id and the pid namespace),
and the next docker worker this machine starts first kills every container of that space
whose starter is gone (``reap_orphans``, once per process).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kit.errors import BackendUnavailable, KitError, WorkerFailed
from kit.procs import child_env, run_stoppable, stoppable
from kit.runtime.docker import ensure_image
from kit.runtime.runtimes import Runtime
from kit.runtime.scratch import SHARED_FILE, scratch, temporary
from kit.runtime.venvs import ensure_runtime
from kit.runtime.worker import alive, canonical_json, file_mode, meta_path

WORKER = Path(__file__).with_name("worker.py")
FLOOR = Path(__file__).with_name("floor.py")  # the benchmark floor, run like the worker
BACKENDS = ("docker", "venv")
CONTAINER_UID = 10001  # the image's unprivileged user, used when the host user is root
# A worker container's limits. Inputs are bounded before they are read (the worker's
# MAX_INPUT_BYTES), but a model can still ask onnxruntime for more memory than the host
# has (a huge intermediate tensor, a long batch): the container is then killed, not the
# host. It gets this share of the host's memory, swap included, and one CPU beyond the
# most intra-op threads a job asks for (the worker runs one session at a time).
DOCKER_MEMORY_SHARE = 0.5
DOCKER_MEMORY_FLOOR = 1 << 30  # bytes: below this a worker cannot start onnxruntime
DOCKER_PIDS = 256
# The worker's job folder in the system's temporary folder (kit.runtime.scratch: a killed run's
# folder is removed by the next run).
JOBS_PREFIX = "kit-jobs-"
# A docker worker's private output folder inside the output folder (``_run_container``),
# of the kit's temporary name ``.docker-out.kit<pid>-<random>.tmp`` (``scratch.temporary``).
OUT_NAME = "docker-out"


def docker_available(timeout: float = 10.0) -> bool:
    """True when a docker client is installed and its daemon answers."""
    if shutil.which("docker") is None:
        return False
    try:
        proc = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0 and bool(proc.stdout.strip())


def select_backend(requested: str | None) -> str:
    """``requested`` if given (checked), else docker when a daemon answers, else venv."""
    if requested is None:
        return "docker" if docker_available() else "venv"
    if requested not in BACKENDS:
        raise BackendUnavailable(f"unknown backend {requested!r}; choose from {BACKENDS}")
    if requested == "docker" and not docker_available():
        raise BackendUnavailable(
            "backend docker: no Docker daemon answers (DOCKER_HOST="
            f"{os.environ.get('DOCKER_HOST', 'unset')}); start one (tools/dockerd.sh start) "
            "or use --backend venv")
    return requested


def host_memory() -> int:
    """The host's physical memory in bytes."""
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def docker_limits(jobs: Sequence[dict[str, Any]], memory: int | None = None,
                  cpus: int | None = None) -> list[str]:
    """``docker run`` options that bound a worker container's memory, CPUs and processes
    (``memory`` and ``cpus``: the host's, measured when not given)."""
    memory = host_memory() if memory is None else memory
    cpus = (os.cpu_count() or 1) if cpus is None else cpus
    limit = max(DOCKER_MEMORY_FLOOR, int(memory * DOCKER_MEMORY_SHARE))
    asked = [job.get("intra_op_threads", 1) for job in jobs]  # the worker checks them
    threads = max((n for n in asked if isinstance(n, int) and n > 0), default=1)
    return ["--memory", f"{limit}b", "--memory-swap", f"{limit}b",
            "--cpus", str(min(cpus, threads + 1)), "--pids-limit", str(DOCKER_PIDS)]


def _docker_command(runtime: Runtime, jobs_dir: Path, in_root: Path, out_root: Path,
                    jobs: Sequence[dict[str, Any]] = ()) -> list[str]:
    uid = os.getuid()
    user = f"{CONTAINER_UID}:{CONTAINER_UID}" if uid == 0 else f"{uid}:{os.getgid()}"
    return [
        "docker", "run", "--rm", "--name", container_name(),
        "--label", f"kit.parent={os.getpid()}", "--label", f"kit.host={process_space()}",
        "--network", "none", "--read-only", "--cap-drop", "ALL",
        "--security-opt", "no-new-privileges", "--tmpfs", "/tmp:rw,size=64m",
        *docker_limits(jobs), "--user", user,
        "-v", f"{jobs_dir}:/kit/jobs:ro", "-v", f"{in_root}:/kit/in:ro",
        "-v", f"{out_root}:/kit/out:rw", runtime.image,
        "--jobs", "/kit/jobs/jobs.json", "--in-root", "/kit/in", "--out-root", "/kit/out",
    ]


def container_name() -> str:
    """A worker container's name, ``kit-<pid>-<random>``: a stop kills it by name."""
    return f"kit-{os.getpid()}-{uuid.uuid4().hex[:12]}"


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            os.chown(os.path.join(folder, name), uid, gid, follow_symlinks=False)
    os.chown(root, uid, gid)


def process_space() -> str:
    """This machine's boot id and this process's pid namespace: the space in which a
    container's ``kit.parent`` pid names a process."""
    boot = Path("/proc/sys/kernel/random/boot_id")
    return (f"{boot.read_text().strip() if boot.is_file() else 'no-boot-id'}/"
            f"{os.readlink('/proc/self/ns/pid') if os.path.exists('/proc/self/ns/pid') else ''}")


_REAPED = threading.Event()


def reap_orphans(again: bool = False) -> list[str]:
    """Kill the containers a kit process of this process space started and outlived (a
    SIGKILLed kit's: module docstring), once per process unless ``again`` (a local Dask
    cluster closed on a failure or a stop: its workers' containers); returns their
    names."""
    if (_REAPED.is_set() and not again) or shutil.which("docker") is None:
        return []
    _REAPED.set()
    listed = subprocess.run(
        ["docker", "ps", "--filter", f"label=kit.host={process_space()}", "--format",
         '{{.Names}} {{.Label "kit.parent"}}'], capture_output=True, text=True, timeout=60,
        check=False)
    orphans = [name for name, _, pid in (line.partition(" ") for line in
                                         listed.stdout.splitlines())
               if pid.isdigit() and not alive(int(pid))]
    for name in orphans:
        _kill_container(name)
    return orphans


def _kill_container(name: str) -> None:
    """``docker kill NAME``; a kill that fails or times out leaves the container to the
    next ``reap_orphans``."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run(["docker", "kill", name], capture_output=True, timeout=60, check=False)


def _run_container(runtime: Runtime, jobs_dir: Path, in_root: Path, out_root: Path,
                   jobs: Sequence[dict[str, Any]],
                   progress: Callable[[str], None] | None) -> tuple[int, str]:
    """Run the worker's container with a private output folder of its own inside
    ``out_root`` (``OUT_NAME``), then move the jobs' outputs to their places.

    Batches run side by side into one ``out_root``; on a root host each container writes
    as ``CONTAINER_UID``, so its folder is handed over to that user and back, never
    ``out_root`` itself (a batch that finished first would take another's folders back
    while its container still writes). Only the jobs' own regular files come out of it."""
    root_host = os.getuid() == 0
    if root_host and in_root.stat().st_mode & 0o005 != 0o005:
        raise WorkerFailed(f"{in_root}: the worker's container reads this folder as user "
                           f"{CONTAINER_UID}, but its mode {in_root.stat().st_mode & 0o777:o} "
                           "does not let other users in; give it mode 755", "")
    reap_orphans()
    with temporary(out_root, OUT_NAME) as stage:
        if root_host:
            _chown_tree(stage, CONTAINER_UID, CONTAINER_UID)
        try:
            result = _stream(_docker_command(runtime, jobs_dir, in_root, stage, jobs),
                             worker_env("docker"), progress)
        finally:
            if root_host:
                _chown_tree(stage, 0, 0)
        for job in jobs:
            output = Path(job["output"])
            # the record first: an output is done once it is there (a rerun keeps a job
            # only when both are), so a kill between the two moves leaves it to run again
            for name in (meta_path(output), output):
                source = stage / name
                if (source.resolve().is_relative_to(stage.resolve()) and source.is_file()
                        and not source.is_symlink()):
                    target = out_root / name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    # the host's mode, not the container's umask: a replaced file's own
                    os.chmod(source, file_mode(target))
                    os.replace(source, target)
    return result


def _stop(container: str | None) -> Callable[[], None] | None:
    """What a stop kills beside a worker's client: its container, which outlives it."""
    return None if container is None else lambda: _kill_container(container)


def _stream(cmd: list[str], env: dict[str, str] | None,
            progress: Callable[[str], None] | None) -> tuple[int, str]:
    """Run ``cmd``; hand each ``worker: progress`` line to ``progress`` as it comes and
    return (exit code, everything the process said on stderr). Stopped while it runs
    (Ctrl-C, SIGTERM), the process (and its container) is killed first."""
    said = []
    container = cmd[cmd.index("--name") + 1] if cmd[:2] == ["docker", "run"] else None
    with subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, env=env) as proc, stoppable(proc, _stop(container)):
        assert proc.stderr is not None
        for line in proc.stderr:
            said.append(line)
            if progress is not None and line.startswith("worker: progress"):
                progress(line.rstrip())
    return proc.returncode, "".join(said)


def worker_error(stderr: str, prog: str = "worker") -> str | None:
    """The worker's last ``worker: error: FILE: WHAT`` line, as ``FILE: WHAT`` (``prog``:
    ``floor`` for the benchmark floor's)."""
    said = stderr.strip().splitlines()
    return next((line.removeprefix(f"{prog}: error: ") for line in reversed(said)
                 if line.startswith(f"{prog}: error: ")), None)


def worker_env(backend: str) -> dict[str, str] | None:
    """The environment a worker command runs in: a venv worker gets only ``PATH``, a fixed
    locale and its starter's pid (it dies with its starter, ``kit.procs``); the docker
    client keeps the caller's (``DOCKER_HOST`` names the daemon,
    and the container's own environment is the image's)."""
    if backend == "docker":
        return None
    # the worker dies with the process that starts it (``kit.procs``)
    return child_env({"PATH": os.environ.get("PATH", ""), "LC_ALL": "C.UTF-8"})


def describe_runtime(runtime: Runtime, backend: str | None = None) -> dict[str, Any]:
    """Ask the runtime's own worker which onnxruntime it holds and which graph optimisation
    levels that release offers (``worker.py --describe``); a worker that is not the lock's
    release is refused."""
    chosen, container = select_backend(backend), None
    if chosen == "docker":
        ensure_image(runtime)
        container = container_name()
        cmd = ["docker", "run", "--rm", "--name", container, "--label",
               f"kit.parent={os.getpid()}", "--label", f"kit.host={process_space()}",
               "--network", "none", "--read-only", "--cap-drop", "ALL", runtime.image,
               "--describe"]
    else:
        cmd = [str(ensure_runtime(runtime.name)), "-I", str(WORKER), "--describe"]
    proc = run_stoppable(cmd, worker_env(chosen), also=_stop(container))  # and its container
    out, err = proc.stdout, proc.stderr
    if proc.returncode != 0:
        raise WorkerFailed(f"{runtime.name} worker ({chosen}) --describe failed: "
                           + "\n".join(err.strip().splitlines()[-5:]), err)
    described: dict[str, Any] = json.loads(out)
    if described.get("onnxruntime") != runtime.onnxruntime:
        raise WorkerFailed(f"{runtime.name} worker ({chosen}) runs onnxruntime "
                           f"{described.get('onnxruntime')}, not {runtime.onnxruntime} "
                           f"({runtime.lock})", err)
    return described


def floor_seconds(runtime: Runtime, jobs: Sequence[dict[str, Any]], in_root: Path) -> float:
    """The benchmark floor of ``jobs``: their inferences in one in-process onnxruntime loop
    of ``runtime``'s own environment (``kit/runtime/floor.py``), in seconds."""
    python = ensure_runtime(runtime.name)
    with tempfile.TemporaryDirectory(prefix="kit-floor-") as tmp:
        spec = Path(tmp) / "jobs.json"
        spec.write_bytes(canonical_json({"jobs": list(jobs)}))
        proc = subprocess.run([str(python), "-I", str(FLOOR), "--jobs", str(spec),
                               "--in-root", str(in_root)], capture_output=True, text=True,
                              check=False)
    if proc.returncode != 0:  # its one line FILE: WHAT, or the last line a crash left
        reason = worker_error(proc.stderr, "floor")
        said = proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"]
        raise KitError(f"{reason} (the floor run under {runtime.name})" if reason else
                       f"{in_root}: the floor run under {runtime.name} failed: {said[-1][:300]}")
    return float(json.loads(proc.stdout)["seconds"])


def run_jobs(runtime: Runtime, jobs: Sequence[dict[str, Any]], in_root: Path,
             out_root: Path, backend: str | None = None,
             progress: Callable[[str], None] | None = None) -> list[Path]:
    """Run every job under ``runtime`` in one worker process; returns the output paths.

    Jobs carry model/inputs paths relative to ``in_root`` and output paths relative to
    ``out_root``; the runtime's graph optimisation level fills any job that lacks one.
    """
    chosen = select_backend(backend)
    in_root, out_root = Path(in_root).resolve(), Path(out_root).resolve()
    out_root.mkdir(parents=True, exist_ok=True)
    full = [{"graph_optimization": runtime.graph_optimization, **job} for job in jobs]
    with scratch(Path(tempfile.gettempdir()), JOBS_PREFIX) as jobs_dir:
        (jobs_dir / "jobs.json").write_bytes(canonical_json({"jobs": full}))
        os.chmod(jobs_dir / "jobs.json", SHARED_FILE)  # the container reads it
        if chosen == "docker":
            ensure_image(runtime)
            code, stderr = _run_container(runtime, jobs_dir, in_root, out_root, full,
                                          progress)
        else:
            python = ensure_runtime(runtime.name)
            cmd = [str(python), "-I", str(WORKER), "--jobs", str(jobs_dir / "jobs.json"),
                   "--in-root", str(in_root), "--out-root", str(out_root)]
            code, stderr = _stream(cmd, worker_env(chosen), progress)
    if code != 0:
        reason = worker_error(stderr) or "\n".join(stderr.strip().splitlines()[-15:])
        raise WorkerFailed(f"{runtime.name} worker ({chosen}) under {in_root}: {reason}",
                           stderr, worker_error(stderr), runtime.onnxruntime)
    return [out_root / job["output"] for job in full]
