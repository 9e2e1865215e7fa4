"""Backends that run the worker for one runtime: ``docker`` and ``venv``.

Both run the very same ``kit/worker.py`` over the same job list, once per call (one
process for every job of a stage and runtime). The job list and inputs sit in folders the
worker may only read; it writes into ``out_root`` alone.

- ``docker``: ``docker run`` of the runtime's image, with ``--network none``, a read-only
  root filesystem, no capabilities and a non-root user; the jobs and inputs folders are
  mounted read-only and the output folder writable.
- ``venv``: the runtime's virtual environment, built from the same lock as its image.

``select_backend(None)`` picks docker when a daemon answers, else venv.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kit.errors import BackendUnavailable, ImageError, WorkerFailed
from kit.runtimes import Runtime
from kit.venvs import ensure_runtime
from kit.worker import canonical_json

WORKER = Path(__file__).with_name("worker.py")
BACKENDS = ("docker", "venv")
CONTAINER_UID = 10001  # the image's unprivileged user, used when the host user is root
LABEL_LOCK = "org.kit.lock-sha256"
LABEL_WORKER = "org.kit.worker-sha256"


def worker_sha256() -> str:
    """sha256 of ``kit/worker.py``: an image must carry the very worker of this checkout."""
    return hashlib.sha256(WORKER.read_bytes()).hexdigest()


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


def image_labels(image: str) -> dict[str, str]:
    """The labels of a local image; ImageError when it is not there."""
    proc = subprocess.run(["docker", "image", "inspect", "--format",
                           "{{json .Config.Labels}}", image], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ImageError(f"image {image} is not built here; run `nox -s images`")
    return json.loads(proc.stdout) or {}


def check_image(runtime: Runtime) -> None:
    """Refuse an image built from another lock than the one in this checkout."""
    labels = image_labels(runtime.image)
    if labels.get(LABEL_LOCK) != runtime.lock_sha256():
        raise ImageError(f"image {runtime.image} was built from a different {runtime.lock.name} "
                         f"(label {labels.get(LABEL_LOCK)}); rebuild it with `nox -s images`")
    if labels.get(LABEL_WORKER) != worker_sha256():
        raise ImageError(f"image {runtime.image} holds another kit/worker.py than this checkout "
                         f"(label {labels.get(LABEL_WORKER)}); rebuild it with `nox -s images`")


def _docker_command(runtime: Runtime, jobs_dir: Path, in_root: Path,
                    out_root: Path) -> list[str]:
    uid = os.getuid()
    user = f"{CONTAINER_UID}:{CONTAINER_UID}" if uid == 0 else f"{uid}:{os.getgid()}"
    return [
        "docker", "run", "--rm", "--network", "none", "--read-only", "--cap-drop", "ALL",
        "--security-opt", "no-new-privileges", "--tmpfs", "/tmp:rw,size=64m",
        "--pids-limit", "256", "--user", user,
        "-v", f"{jobs_dir}:/kit/jobs:ro", "-v", f"{in_root}:/kit/in:ro",
        "-v", f"{out_root}:/kit/out:rw", runtime.image,
        "--jobs", "/kit/jobs/jobs.json", "--in-root", "/kit/in", "--out-root", "/kit/out",
    ]


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            os.chown(os.path.join(folder, name), uid, gid, follow_symlinks=False)
    os.chown(root, uid, gid)


def _stream(cmd: list[str], env: dict[str, str] | None,
            progress: Callable[[str], None] | None) -> tuple[int, str]:
    """Run ``cmd``; hand each ``worker: progress`` line to ``progress`` as it comes and
    return (exit code, everything the process said on stderr)."""
    said = []
    with subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, env=env) as proc:
        assert proc.stderr is not None
        for line in proc.stderr:
            said.append(line)
            if progress is not None and line.startswith("worker: progress"):
                progress(line.rstrip())
    return proc.returncode, "".join(said)


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
    with tempfile.TemporaryDirectory(prefix="kit-jobs-") as tmp:
        jobs_dir = Path(tmp)
        (jobs_dir / "jobs.json").write_bytes(canonical_json({"jobs": full}))
        os.chmod(jobs_dir, 0o755)
        os.chmod(jobs_dir / "jobs.json", 0o644)
        if chosen == "docker":
            check_image(runtime)
            cmd = _docker_command(runtime, jobs_dir, in_root, out_root)
            root_host = os.getuid() == 0
            if root_host:
                _chown_tree(out_root, CONTAINER_UID, CONTAINER_UID)
            try:
                code, stderr = _stream(cmd, None, progress)
            finally:
                if root_host:
                    _chown_tree(out_root, 0, 0)
        else:
            python = ensure_runtime(runtime.name)
            cmd = [str(python), "-I", str(WORKER), "--jobs", str(jobs_dir / "jobs.json"),
                   "--in-root", str(in_root), "--out-root", str(out_root)]
            env = {"PATH": os.environ.get("PATH", ""), "LC_ALL": "C.UTF-8"}
            code, stderr = _stream(cmd, env, progress)
    if code != 0:
        said = stderr.strip().splitlines()
        reason = next((ln.removeprefix("worker: error: ") for ln in reversed(said)
                       if ln.startswith("worker: error: ")), "\n".join(said[-15:]))
        raise WorkerFailed(f"{runtime.name} worker ({chosen}) under {in_root}: {reason}",
                           stderr)
    return [out_root / job["output"] for job in full]
