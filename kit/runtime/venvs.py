"""Virtual environments built from hash-pinned locks (standard library only).

One builder serves the tools environment (``.venv``, from ``locks/tools.lock``), the
reviewer's environment (``.venv-verify``, from ``locks/verify.lock``) and the two runtime
environments of the ``venv`` backend (``.kit/venvs/ref`` and ``cand``, from the same locks
the Dockerfiles install). An environment is reused only while the stamp inside it matches
the lock's sha256; otherwise it is rebuilt from scratch.

    python -m kit.runtime.venvs tools|verify|ref|cand|physicsnemo|ort-RELEASE
                                        build (or confirm) one environment

``verify`` holds only what ``python -m kit verify`` imports (numpy, scipy, scikit-learn,
pyyaml, jsonschema, Polygraphy, at tools.lock's versions) and the kit (editable): no torch, so a
reviewer checks every claim without the tools environment's gigabytes.

``physicsnemo`` (``.kit/venvs/physicsnemo``, from ``locks/physicsnemo.lock``) runs NVIDIA
PhysicsNeMo's MeshGraphNet for the SciML study's cross-implementation check: a separate
environment because physicsnemo needs a newer fsspec than the tools lock pins. Its
torch_scatter has no wheel for this torch and is built from its hash-pinned sdist after
everything else is installed (``FORCE_CUDA=0``, no build isolation: the build imports
torch); antlr4-python3-runtime is a pure-Python sdist built in isolation.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from kit.errors import ConfigError, EnvironmentFailed
from kit.heartbeat import heartbeat, stderr_line
from kit.locks import lock_requirements
from kit.paths import ROOT, cache_dir
from kit.procs import run_stoppable

TOOLS_VENV = ROOT / ".venv"
TOOLS_LOCK = ROOT / "locks" / "tools.lock"
VERIFY_VENV = ROOT / ".venv-verify"
VERIFY_LOCK = ROOT / "locks" / "verify.lock"
_NAMES = {TOOLS_VENV: "tools", VERIFY_VENV: "verify"}  # as `python -m kit.runtime.venvs` names them
STAMP = "kit-lock.sha256"


def _stamp_value(lock: Path, editable: Path | None) -> str:
    value = hashlib.sha256(lock.read_bytes()).hexdigest()
    return value + (f" editable={editable}" if editable else "") + "\n"


def venv_python(path: Path) -> Path:
    """The interpreter of an environment."""
    return path / "bin" / "python"


def is_current(path: Path, lock: Path, editable: Path | None = None) -> bool:
    """True when ``path`` was built from exactly this lock."""
    stamp = path / STAMP
    return (venv_python(path).exists() and stamp.is_file()
            and stamp.read_text() == _stamp_value(lock, editable))


def failure_tail(proc: subprocess.CompletedProcess[str], lines: int = 25) -> str:
    """The last lines a failed pip or docker command said, without pip's warnings about
    the machine's missing local index folders."""
    said = [ln for ln in (proc.stdout + proc.stderr).splitlines()
            if "is ignored: it is neither a file nor a directory" not in ln]
    return "\n".join(said[-lines:])


def _run(cmd: list[str], what: str, env: dict[str, str] | None = None) -> None:
    """Run one build command, a progress line every 30 s while it runs (a cold pip cache
    or a package compiled from source takes tens of minutes)."""
    with heartbeat(f"venvs: {what}"):
        proc = run_stoppable(cmd, env)  # a stop kills it (and its compilers): kit.procs
    if proc.returncode != 0:
        raise EnvironmentFailed(f"{what} failed (exit {proc.returncode}):\n"
                                + failure_tail(proc))


# Pure-Python packages published only as source archives: pinned by the sdist's sha256 in
# the lock and built here; every other package must come as a wheel.
SOURCE_ONLY = ("phiflow", "phiml", "tfrecord", "antlr4-python3-runtime")
# Built after the rest of its environment, against the torch installed there.
BUILT_AGAINST_TORCH = ("torch-scatter",)
PHYSICSNEMO_LOCK = ROOT / "locks" / "physicsnemo.lock"


def split_lock(lock: Path, names: tuple[str, ...]) -> tuple[str, str]:
    """(the lock without the ``names`` blocks, only those blocks), both with the header
    (index options), so each installs with ``--require-hashes``."""
    header: list[str] = []
    blocks: list[list[str]] = []
    try:
        text = lock.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{lock}: cannot read the lock file ({exc})") from exc
    for line in text.splitlines(keepends=True):
        if re.match(r"^[A-Za-z0-9_.-]+==", line):
            blocks.append([line])
        elif blocks:
            blocks[-1].append(line)
        else:
            header.append(line)

    def chosen(block: list[str]) -> bool:
        return block[0].split("==")[0].lower().replace("_", "-") in names

    rest = "".join(header + [line for b in blocks if not chosen(b) for line in b])
    only = "".join(header + [line for b in blocks if chosen(b) for line in b])
    return rest, only


@contextlib.contextmanager
def _building(path: Path) -> Iterator[None]:
    """Hold the build lock of ``path`` (beside it): two processes asking for the same
    environment at once (two Dask workers on one machine) build it once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.parent / f".{path.name}.build-lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def ensure_venv(path: Path, lock: Path, editable: Path | None = None,
                python: str = sys.executable, compile_bytecode: bool = True) -> Path:
    """Build ``path`` from ``lock`` with ``--require-hashes`` unless it is current;
    returns its interpreter. ``editable`` installs that project (without deps) too;
    ``compile_bytecode=False`` leaves ``.pyc`` files to the first import (pip's
    ``--no-compile``), which writes only those of the modules a run uses."""
    lock_requirements(lock)
    if is_current(path, lock, editable):
        return venv_python(path)
    with _building(path):
        if is_current(path, lock, editable):  # built by another process meanwhile
            return venv_python(path)
        return _build(path, lock, editable, python, compile_bytecode)


def _build(path: Path, lock: Path, editable: Path | None, python: str,
           compile_bytecode: bool) -> Path:
    if Path(sys.prefix).resolve() == path.resolve() or \
            Path(python).resolve().is_relative_to(path.resolve()):
        raise EnvironmentFailed(
            f"{path} does not match {lock} (no or another stamp), and this process runs "
            f"from it, so it cannot rebuild itself; from outside it run "
            f"`python3 -m kit.runtime.venvs {_NAMES.get(path, path)}`")
    started = time.monotonic()
    shutil.rmtree(path, ignore_errors=True)
    progress(f"building {path} from {lock}: creating the environment")
    _run([python, "-m", "venv", str(path)], f"creating {path}")
    pip = [str(venv_python(path)), "-m", "pip", "install", "--quiet",
           "--disable-pip-version-check", "--no-input",
           *([] if compile_bytecode else ["--no-compile"])]
    rest, later = split_lock(lock, BUILT_AGAINST_TORCH)
    requirements = path / "kit-requirements.txt"
    requirements.write_text(rest)
    count = len(re.findall(r"^[A-Za-z0-9_.-]+==", rest, re.M))
    progress(f"building {path}: installing {count} hash-checked packages "
             f"({time.monotonic() - started:.0f} s so far)")
    _run([*pip, "--require-hashes", "--no-deps", "--only-binary", ":all:",
          "--no-binary", ",".join(SOURCE_ONLY), "-r", str(requirements)],
         f"installing {lock} into {path}")
    if re.search(r"^[A-Za-z0-9_.-]+==", later, re.M):
        requirements.write_text(later)
        _run([*pip, "--require-hashes", "--no-deps", "--no-build-isolation", "-r",
              str(requirements)], f"building {', '.join(BUILT_AGAINST_TORCH)} into {path}",
             env={**os.environ, "FORCE_CUDA": "0"})
    requirements.unlink()
    if editable is not None:
        _run([*pip, "--no-deps", "--no-build-isolation", "-e", str(editable)],
             f"installing {editable} (editable) into {path}")
    (path / STAMP).write_text(_stamp_value(lock, editable))
    progress(f"built {path} in {time.monotonic() - started:.0f} s")
    return venv_python(path)


def progress(text: str) -> None:
    """One progress line on stderr (stdout carries only the interpreter's path)."""
    stderr_line(f"venvs: {text}")


def ensure_tools() -> Path:
    """The tools environment: torch, onnx, nox, pytest and the kit itself (editable)."""
    return ensure_venv(TOOLS_VENV, TOOLS_LOCK, editable=ROOT)


def ensure_verify() -> Path:
    """The reviewer's environment: what ``python -m kit verify`` needs and the kit itself
    (editable), without torch. Not byte-compiled at install: compiling every module of
    scipy and scikit-learn (their tests included) took half of the build, and verify
    imports a fraction of them."""
    return ensure_venv(VERIFY_VENV, VERIFY_LOCK, editable=ROOT, compile_bytecode=False)


def ensure_physicsnemo() -> Path:
    """The PhysicsNeMo environment (about 6.4 GB; torch_scatter builds in 5-11 minutes)."""
    return ensure_venv(cache_dir() / "venvs" / "physicsnemo", PHYSICSNEMO_LOCK)


def ensure_runtime(name: str) -> Path:
    """The virtual environment of runtime ``name``, from that runtime's lock."""
    from kit.runtime.runtimes import get_runtime

    runtime = get_runtime(name)
    return ensure_venv(cache_dir() / "venvs" / name, runtime.lock)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    builders: dict[str, Callable[[], Path]] = {
        "tools": ensure_tools, "verify": ensure_verify, "ref": lambda: ensure_runtime("ref"),
        "cand": lambda: ensure_runtime("cand"), "physicsnemo": ensure_physicsnemo}
    if len(args) == 1 and args[0].startswith("ort-"):  # any release (kit/runtime/releases.toml)
        builders[args[0]] = lambda: ensure_runtime(args[0])
    if len(args) != 1 or args[0] not in builders:
        print(f"usage: python -m kit.runtime.venvs {'|'.join(builders)}|ort-RELEASE",
              file=sys.stderr)
        return 2
    try:
        python = builders[args[0]]()
    except (ConfigError, EnvironmentFailed) as exc:
        print(f"kit: error: {exc}", file=sys.stderr)
        return 2
    print(python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
