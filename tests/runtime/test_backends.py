"""Backends: selection, the docker sandbox, and byte identity between docker and venv."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from kit.errors import BackendUnavailable, ImageError, WorkerFailed
from kit.files import remove_stale
from kit.locks import lock_requirements
from kit.runtime import backends, docker
from kit.runtime.backends import run_jobs, select_backend
from kit.runtime.runtimes import get_runtime, load_runtimes
from kit.runtime.worker import TEMPORARY, meta_path
from tests.conftest import job


def test_unknown_backend_is_refused() -> None:
    with pytest.raises(BackendUnavailable, match="unknown backend 'podman'"):
        select_backend("podman")


def test_default_is_venv_when_no_daemon_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backends, "docker_available", lambda timeout=10.0: False)
    assert select_backend(None) == "venv"
    with pytest.raises(BackendUnavailable, match="no Docker daemon answers"):
        select_backend("docker")
    monkeypatch.setattr(backends, "docker_available", lambda timeout=10.0: True)
    assert select_backend(None) == "docker"


def test_docker_command_is_sandboxed(tmp_path: Path) -> None:
    cmd = backends._docker_command(get_runtime("ref"), tmp_path / "j", tmp_path / "i",
                                   tmp_path / "o")
    text = " ".join(cmd)
    assert cmd[:3] == ["docker", "run", "--rm"]
    for flag in ("--network none", "--read-only", "--cap-drop ALL",
                 "--security-opt no-new-privileges", f"{tmp_path / 'i'}:/kit/in:ro",
                 f"{tmp_path / 'j'}:/kit/jobs:ro", f"{tmp_path / 'o'}:/kit/out:rw"):
        assert flag in text
    user = cmd[cmd.index("--user") + 1]
    assert not user.startswith("0:")
    assert cmd.count("kit-ref:ort-1.20.1") == 1
    limit = max(backends.DOCKER_MEMORY_FLOOR,
                int(backends.host_memory() * backends.DOCKER_MEMORY_SHARE))
    for flag, value in (("--memory", f"{limit}b"), ("--memory-swap", f"{limit}b"),
                        ("--cpus", "2"), ("--pids-limit", str(backends.DOCKER_PIDS))):
        assert cmd[cmd.index(flag) + 1] == value
    assert cmd.index("--cpus") < cmd.index("kit-ref:ort-1.20.1")  # options, not arguments


def test_docker_limits_follow_the_host_and_the_jobs_threads() -> None:
    def limit(option: str, jobs: list[dict[str, object]], memory: int = 1 << 30) -> str:
        cmd = backends.docker_limits(jobs, memory=memory, cpus=8)
        return cmd[cmd.index(option) + 1]

    assert limit("--memory", [], memory=16 << 30) == f"{8 << 30}b"
    assert limit("--memory-swap", [], memory=16 << 30) == f"{8 << 30}b"
    assert limit("--memory", []) == f"{backends.DOCKER_MEMORY_FLOOR}b"
    assert limit("--cpus", [{"intra_op_threads": 4}, {}]) == "5"
    assert limit("--cpus", [{"intra_op_threads": 16}]) == "8"
    assert limit("--cpus", [{"intra_op_threads": "x"}]) == "2"


@pytest.mark.docker
@pytest.mark.usefixtures("docker_ready")
@pytest.mark.parametrize("runtime", ["ref", "cand"])
def test_docker_and_venv_write_identical_bytes(workdir: Path, runtime: str) -> None:
    rt = get_runtime(runtime)
    jobs = [job(id="a", output="a.npz"), job(id="b", output="b.npz", batch_size=5)]
    in_docker = run_jobs(rt, jobs, workdir / "in", workdir / "docker", "docker")
    in_venv = run_jobs(rt, jobs, workdir / "in", workdir / "venv", "venv")
    for d, v in zip(in_docker, in_venv, strict=True):
        assert d.read_bytes() == v.read_bytes()
        assert meta_path(d).read_bytes() == meta_path(v).read_bytes()
    assert json.loads(meta_path(in_docker[0]).read_text())["onnxruntime"] == rt.onnxruntime


@pytest.mark.docker
@pytest.mark.usefixtures("docker_ready")
def test_docker_refusal_names_the_file_and_leaves_nothing(workdir: Path) -> None:
    out = workdir / "out"
    with pytest.raises(WorkerFailed, match=r"\.\./x\.onnx: model path is outside"):
        run_jobs(get_runtime("cand"), [job(model="../x.onnx")], workdir / "in", out, "docker")
    assert [p for p in out.rglob("*") if p.is_file()] == []


def test_a_venv_refusal_carries_the_workers_own_line_and_release(workdir: Path) -> None:
    """What ``kit audit`` names the user's files from, as the serving worker gives it."""
    with pytest.raises(WorkerFailed, match=r"missing\.onnx: model not found") as failed:
        run_jobs(get_runtime("ref"), [job(model="missing.onnx")], workdir / "in",
                 workdir / "out", "venv")
    assert failed.value.reason == "missing.onnx: model not found"
    assert failed.value.release == get_runtime("ref").onnxruntime


def test_a_container_writes_into_a_folder_of_its_own_and_only_outputs_come_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The docker backend mounts a private folder, not the output folder; what the
    container leaves there besides the jobs' outputs (a stray file, a symlink) stays out."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "kept.txt").write_text("the user's file")
    mounted: list[Path] = []

    def container(cmd: list[str], env: object, progress: object) -> tuple[int, str]:
        stage = Path(next(v for v in cmd if v.endswith(":/kit/out:rw")).split(":")[0])
        mounted.append(stage)
        assert stage.parent == out
        assert TEMPORARY.fullmatch(stage.name)["name"] == backends.OUT_NAME
        (stage / "a").mkdir()
        (stage / "a" / "x.npz").write_bytes(b"npz")
        (stage / "a" / "x.meta.json").write_bytes(b"{}")
        (stage / "stray.npz").write_bytes(b"not a job's")
        (stage / "y.npz").symlink_to(out / "kept.txt")
        return 0, ""

    monkeypatch.setattr(backends, "_stream", container)
    jobs = [{"output": "a/x.npz"}, {"output": "y.npz"}]
    (tmp_path / "in").mkdir(mode=0o755)
    assert backends._run_container(get_runtime("ref"), tmp_path, tmp_path / "in", out, jobs,
                                   None) == (0, "")
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == \
        ["a", "a/x.meta.json", "a/x.npz", "kept.txt"]
    assert (out / "a" / "x.npz").read_bytes() == b"npz"
    assert not mounted[0].exists()


def test_a_killed_runs_container_folder_is_swept_as_the_kits_temporary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run killed while a container wrote leaves its private folder inside the run
    folder: of the kit's temporary name, the rerun's lock sweep (``kit.files.remove_stale``)
    removes it whatever the rerun runs, and so does the next container folder made beside
    it; a live process's stays. With the record moved before the output, a kill between the
    two moves leaves no output without its record."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    out = tmp_path / "run" / "cases" / "outputs"
    out.mkdir(parents=True)
    dead = out / f".{backends.OUT_NAME}.kit{int(gone.stdout)}-abcdefgh.tmp"
    live = out / f".{backends.OUT_NAME}.kit{os.getpid()}-abcdefgh.tmp"
    for folder in (dead, live):
        (folder / "x").mkdir(parents=True)
        (folder / "x" / "enable_all.npz").write_bytes(b"npz")
    assert remove_stale(tmp_path / "run") == [dead]
    assert live.is_dir()
    dead.mkdir()
    moved: list[str] = []

    def container(cmd: list[str], env: object, progress: object) -> tuple[int, str]:
        stage = Path(next(v for v in cmd if v.endswith(":/kit/out:rw")).split(":")[0])
        assert not dead.exists()
        assert live.is_dir()
        (stage / "x.npz").write_bytes(b"npz")
        (stage / "x.meta.json").write_bytes(b"{}")
        return 0, ""

    real = os.replace
    monkeypatch.setattr(backends, "_stream", container)
    monkeypatch.setattr(backends.os, "replace",
                        lambda a, b: (moved.append(Path(b).name), real(a, b))[1])
    (tmp_path / "in").mkdir(mode=0o755)
    backends._run_container(get_runtime("ref"), tmp_path, tmp_path / "in", out,
                            [{"output": "x.npz"}], None)
    assert moved == ["x.meta.json", "x.npz"]


def test_a_containers_outputs_take_the_hosts_modes_not_the_containers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The container writes with the image's umask (0644): a new output gets the mode the
    host's umask gives, a replaced one keeps its own; the jobs file and the folders the
    container reads or writes in stay open to its user whatever the umask."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.npz").write_bytes(b"the earlier output")
    os.chmod(out / "old.npz", 0o640)
    seen: dict[str, int] = {}

    def container(cmd: list[str], env: object, progress: object) -> tuple[int, str]:
        jobs = Path(next(v for v in cmd if v.endswith(":/kit/jobs:ro")).split(":")[0])
        stage = Path(next(v for v in cmd if v.endswith(":/kit/out:rw")).split(":")[0])
        seen.update(jobs=jobs.stat().st_mode, jobs_file=(jobs / "jobs.json").stat().st_mode,
                    stage=stage.stat().st_mode)
        for name in ("new.npz", "old.npz"):
            (stage / name).write_bytes(b"npz")
            os.chmod(stage / name, 0o644)
        return 0, ""

    monkeypatch.setattr(backends, "docker_available", lambda timeout=10.0: True)
    monkeypatch.setattr(backends, "ensure_image", lambda runtime: None)
    monkeypatch.setattr(backends, "_stream", container)
    (tmp_path / "in").mkdir(mode=0o755)
    old = os.umask(0o077)
    try:
        run_jobs(get_runtime("ref"), [job(output="new.npz"), job(output="old.npz")],
                 tmp_path / "in", out, "docker")
    finally:
        os.umask(old)
    assert (out / "new.npz").stat().st_mode & 0o777 == 0o600
    assert (out / "old.npz").stat().st_mode & 0o777 == 0o640
    assert {k: v & 0o777 for k, v in seen.items()} == {"jobs": 0o755, "jobs_file": 0o644,
                                                       "stage": 0o755}


def test_an_inputs_folder_the_container_cannot_enter_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backends.os, "getuid", lambda: 0)  # containers run as CONTAINER_UID
    monkeypatch.setattr(backends, "_stream", lambda *args: pytest.fail("container started"))
    private = tmp_path / "in"
    private.mkdir(mode=0o700)
    private.chmod(0o700)
    with pytest.raises(WorkerFailed, match=rf"{private}: .* user 10001, but its mode 700"):
        backends._run_container(get_runtime("ref"), tmp_path, private, tmp_path / "out",
                                [{"output": "a.npz"}], None)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("backend", ["docker", "venv"])
def test_describe_reaches_the_daemon_that_docker_host_names(
        backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The docker client keeps the caller's DOCKER_HOST (a private daemon, as in CI); a
    venv worker gets PATH and a fixed locale only."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///var/tmp/private/docker.sock")
    monkeypatch.setattr(backends, "select_backend", lambda requested: backend)
    monkeypatch.setattr(backends, "ensure_image", lambda runtime: None)
    monkeypatch.setattr(backends, "ensure_runtime", lambda name: Path("/env/bin/python"))
    seen: list[dict[str, str] | None] = []

    class Answered:
        """A worker that answered its ``--describe`` at once, as ``Popen`` gives it."""

        pid, returncode = 2 ** 22 + 1, 0  # past every pid: a kill would reach no one

        def __init__(self, cmd: list[str], **kwargs: object) -> None:
            env = kwargs["env"]
            seen.append(dict(env) if isinstance(env, dict) else None)

        def __enter__(self) -> Answered:
            return self

        def __exit__(self, *_: object) -> None:
            pass

        def poll(self) -> int:
            return 0

        def communicate(self, timeout: float | None = None) -> tuple[str, str]:
            return json.dumps({"onnxruntime": get_runtime("ref").onnxruntime}), ""

    monkeypatch.setattr(backends.subprocess, "Popen", Answered)
    backends.describe_runtime(get_runtime("ref"), backend)
    if backend == "docker":  # inherited: the client reads DOCKER_HOST from os.environ
        assert seen == [None]
    else:
        assert seen[0] is not None
        # and the starter's pid, so the worker dies with it (kit.procs)
        assert sorted(seen[0]) == ["KIT_PARENT_PID", "LC_ALL", "PATH"]
        assert seen[0]["KIT_PARENT_PID"] == str(os.getpid())


@pytest.mark.docker
@pytest.mark.usefixtures("docker_ready")
def test_docker_batches_side_by_side_share_one_output_folder(workdir: Path) -> None:
    """Dask runs a stage's batches at once into one folder; one container finishing must
    not take the folder away from another (as root, ownership was once handed back
    over the whole output folder while the other still wrote)."""
    out = workdir / "out"
    batches = [[job(id=f"{b}{i}", output=f"b{b}/j{i}.npz", batch_size=1 + i % 3)
                for i in range(6 + 4 * b)] for b in range(3)]
    with ThreadPoolExecutor(len(batches)) as pool:
        done = list(pool.map(lambda jobs: run_jobs(get_runtime("cand"), jobs,
                                                   workdir / "in", out, "docker"), batches))
    venv = run_jobs(get_runtime("cand"), batches[2], workdir / "in", workdir / "venv", "venv")
    assert [p.read_bytes() for p in done[2]] == [p.read_bytes() for p in venv]
    assert sum(len(paths) for paths in done) == sum(len(jobs) for jobs in batches)
    assert all(path.is_file() and path.stat().st_uid == os.getuid()
               for paths in done for path in paths)
    assert not list(out.glob(f".{backends.OUT_NAME}.kit*"))


@pytest.mark.docker
@pytest.mark.usefixtures("docker_ready")
def test_an_image_built_from_another_lock_is_refused(tmp_path: Path) -> None:
    runtime = get_runtime("ref")
    other_lock = tmp_path / "ref.lock"
    other_lock.write_bytes(runtime.lock.read_bytes() + b"\n")
    with pytest.raises(ImageError, match=r"built from a different ref\.lock"):
        docker.check_image(replace(runtime, lock=other_lock))


@pytest.mark.docker
@pytest.mark.usefixtures("docker_ready")
def test_an_image_with_another_worker_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(docker, "worker_sha256", lambda: "0" * 64)
    with pytest.raises(ImageError, match=r"holds another kit/runtime/worker\.py"):
        docker.check_image(get_runtime("cand"))


@pytest.mark.docker
@pytest.mark.usefixtures("docker_ready")
@pytest.mark.parametrize("runtime", ["ref", "cand"])
def test_image_holds_exactly_its_lock(runtime: str) -> None:
    rt = load_runtimes()[runtime]
    proc = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--entrypoint",
         "/opt/runtime/bin/python", rt.image, "-m", "pip", "list", "--format=json",
         "--disable-pip-version-check"], capture_output=True, text=True, check=True)
    installed = {f"{p['name'].lower().replace('_', '-')}=={p['version']}"
                 for p in json.loads(proc.stdout)} - {p for p in
                                                      _bootstrap_pins(proc.stdout)}
    assert installed == set(lock_requirements(rt.lock))
    labels = docker.image_labels(rt.image)
    assert labels["org.kit.onnxruntime"] == rt.onnxruntime
    assert labels["org.kit.lock-sha256"] == hashlib.sha256(rt.lock.read_bytes()).hexdigest()
    assert labels["org.kit.worker-sha256"] == docker.worker_sha256()


def _bootstrap_pins(pip_list_json: str) -> set[str]:
    """pip and setuptools come with the venv itself, not from the lock."""
    return {f"{p['name'].lower()}=={p['version']}" for p in json.loads(pip_list_json)
            if p["name"].lower() in ("pip", "setuptools")}


def _stopped_on_a_thread(target: Callable[[], object], ready: Callable[[], object]) -> float:
    """Run ``target`` on a thread; once ``ready()`` (at most 60 s), stop what the threads
    wait on (``kit.procs.stop_children``) and return how long the thread then took to end."""
    import threading
    import time

    from kit import procs

    thread = threading.Thread(target=target)
    thread.start()
    deadline = time.monotonic() + 60
    while not ready() and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    procs.stop_children()
    thread.join(timeout=30)
    assert not thread.is_alive()
    return time.monotonic() - started


def test_a_stop_kills_an_environment_build_a_thread_waits_on_with_its_children(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A stop while a thread builds an environment (here a build command that starts a
    child of its own, as pip starts a compiler, and both would run two minutes) kills the
    build with every process below it, so the thread ends at once with the build failed;
    it had waited for the build to end."""
    import threading
    import time

    from kit import procs
    from kit.errors import EnvironmentFailed
    from kit.runtime import venvs

    monkeypatch.setattr(procs, "_STOPPING", threading.Event())
    child = tmp_path / "child.pid"
    build = [sys.executable, "-c", "import os, subprocess, sys, time; "
             "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
             f"open({str(child)!r}, 'w').write(str(c.pid)); time.sleep(120)"]
    failed: list[BaseException] = []

    def building() -> None:
        try:
            venvs._run(build, "building a test environment")
        except EnvironmentFailed as exc:
            failed.append(exc)

    assert _stopped_on_a_thread(building, child.exists) < 30
    assert "building a test environment failed (exit -9)" in str(failed[0])
    pid = int(child.read_text())
    for _ in range(100):  # the build's own child is gone too (killed below it)
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            break
        if state in "ZX":  # dead, not yet reaped by the init it was handed to
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the build's child {pid} still runs")
    assert procs._TRACKED == {}


def test_a_stop_kills_a_describe_query_a_thread_waits_on(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The sweep asks every release's worker for its levels from a pool of threads; a stop
    kills a worker that has not answered (here one that would take two minutes), so the
    thread ends at once: it had run to its end."""
    import threading

    from kit import procs

    monkeypatch.setattr(procs, "_STOPPING", threading.Event())
    slow = tmp_path / "python"
    slow.write_text("#!/bin/sh\nsleep 120\n")
    slow.chmod(0o755)
    monkeypatch.setattr(backends, "ensure_runtime", lambda name: slow)
    failed: list[BaseException] = []

    def ask() -> None:
        try:
            backends.describe_runtime(get_runtime("ref"), "venv")
        except WorkerFailed as exc:
            failed.append(exc)

    assert _stopped_on_a_thread(ask, lambda: procs._TRACKED) < 30
    assert "ref worker (venv) --describe failed" in str(failed[0])
    assert procs._TRACKED == {}


def test_a_stop_kills_the_workers_threads_wait_on_and_any_started_after(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C or SIGTERM lands in the main thread while other threads wait on workers
    (``kit.runtime.scale``): ``kit.procs.stop_children`` kills them, so the threads end at
    once, and a worker a thread starts after the stop is killed as it starts."""
    import threading
    import time

    from kit import procs

    monkeypatch.setattr(procs, "_STOPPING", threading.Event())
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    found: list[tuple[int, str]] = []
    started = time.monotonic()
    assert _stopped_on_a_thread(lambda: found.append(backends._stream(sleeper, None, None)),
                                lambda: procs._TRACKED) < 30
    assert found == [(-9, "")]
    assert backends._stream(sleeper, None, None) == (-9, "")
    assert time.monotonic() - started < 90
    assert procs._TRACKED == {}
