"""Virtual environments built from hash-pinned locks (standard library only).

One builder serves the tools environment (``.venv``, from ``locks/tools.lock``) and the
two runtime environments of the ``venv`` backend (``.kit/venvs/ref`` and ``cand``, from
the same locks the Dockerfiles install). An environment is reused only while the stamp
inside it matches the lock's sha256; otherwise it is rebuilt from scratch.

    python -m kit.venvs tools|ref|cand     build (or confirm) one environment
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from kit.errors import ConfigError, EnvironmentFailed

ROOT = Path(__file__).resolve().parents[1]
TOOLS_VENV = ROOT / ".venv"
TOOLS_LOCK = ROOT / "locks" / "tools.lock"
STAMP = "kit-lock.sha256"


def cache_dir() -> Path:
    """Where runtime environments live (``KIT_CACHE`` overrides ``<repo>/.kit``)."""
    return Path(os.environ.get("KIT_CACHE", ROOT / ".kit"))


def lock_requirements(lock: Path) -> dict[str, list[str]]:
    """Map each ``name==version`` pin of a lock to its sha256 hashes; every pin needs one."""
    try:
        text = lock.read_text()
    except OSError as exc:
        raise ConfigError(f"{lock}: cannot read the lock file ({exc})") from exc
    joined = re.sub(r"\\\n", " ", text)
    pins: dict[str, list[str]] = {}
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "-")):
            continue
        pin = line.split()[0]
        if "==" not in pin:
            raise ConfigError(f"{lock}: {pin!r} is not pinned with ==")
        hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", line)
        if not hashes:
            raise ConfigError(f"{lock}: {pin} carries no --hash=sha256")
        pins[pin.lower()] = hashes
    if not pins:
        raise ConfigError(f"{lock}: no pinned requirement found")
    return pins


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


def _run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise EnvironmentFailed(f"{what} failed (exit {proc.returncode}):\n"
                                + failure_tail(proc))


# Pure-Python packages published only as source archives: pinned by the sdist's sha256 in
# the lock and built here; every other package must come as a wheel.
SOURCE_ONLY = ("phiflow", "phiml", "tfrecord")


def ensure_venv(path: Path, lock: Path, editable: Path | None = None,
                python: str = sys.executable) -> Path:
    """Build ``path`` from ``lock`` with ``--require-hashes`` unless it is current;
    returns its interpreter. ``editable`` installs that project (without deps) too."""
    lock_requirements(lock)
    if is_current(path, lock, editable):
        return venv_python(path)
    if Path(sys.prefix).resolve() == path.resolve() or \
            Path(python).resolve().is_relative_to(path.resolve()):
        raise EnvironmentFailed(
            f"{path} does not match {lock} (no or another stamp), and this process runs "
            f"from it, so it cannot rebuild itself; from outside it run "
            f"`python3 -m kit.venvs {'tools' if path == TOOLS_VENV else path}`")
    shutil.rmtree(path, ignore_errors=True)
    _run([python, "-m", "venv", str(path)], f"creating {path}")
    pip = [str(venv_python(path)), "-m", "pip", "install", "--quiet",
           "--disable-pip-version-check", "--no-input"]
    _run([*pip, "--require-hashes", "--no-deps", "--only-binary", ":all:",
          "--no-binary", ",".join(SOURCE_ONLY), "-r", str(lock)],
         f"installing {lock} into {path}")
    if editable is not None:
        _run([*pip, "--no-deps", "--no-build-isolation", "-e", str(editable)],
             f"installing {editable} (editable) into {path}")
    (path / STAMP).write_text(_stamp_value(lock, editable))
    return venv_python(path)


def ensure_tools() -> Path:
    """The tools environment: torch, onnx, nox, pytest and the kit itself (editable)."""
    return ensure_venv(TOOLS_VENV, TOOLS_LOCK, editable=ROOT)


def ensure_runtime(name: str) -> Path:
    """The virtual environment of runtime ``name``, from that runtime's lock."""
    from kit.runtimes import get_runtime

    runtime = get_runtime(name)
    return ensure_venv(cache_dir() / "venvs" / name, runtime.lock)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in ("tools", "ref", "cand"):
        print("usage: python -m kit.venvs tools|ref|cand", file=sys.stderr)
        return 2
    try:
        python = ensure_tools() if args[0] == "tools" else ensure_runtime(args[0])
    except (ConfigError, EnvironmentFailed) as exc:
        print(f"kit: error: {exc}", file=sys.stderr)
        return 2
    print(python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
