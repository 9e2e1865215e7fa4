"""Write the hash-pinned lock of any onnxruntime CPU release (runtimes as data).

    python -m kit.runtime.releases lock RELEASE [RELEASE ...]   write locks/ort-RELEASE.{in,lock}
    python -m kit.runtime.releases list                          each release and its lock

A release's ``.in`` pins onnxruntime and the numpy of ``releases.toml``; pip-compile (as
``nox -s lock`` runs it) resolves it with hashes under ref.lock's other pins as constraints,
so every release shares coloredlogs, flatbuffers, packaging, protobuf and sympy with the
reference wherever the release accepts them. The lock is written to a temporary name and
renamed. A release that ``runtimes.toml`` already pins (1.20.1, 1.29.0) keeps that lock.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

from kit.errors import ConfigError, EnvironmentFailed, KitError
from kit.paths import ROOT
from kit.runtime.runtimes import (
    RELEASES,
    get_runtime,
    known_releases,
    load_runtimes,
    release_lock,
    release_runtime,
)
from kit.runtime.venvs import failure_tail
from kit.runtime.worker import write_atomic

COMPILE = ["-m", "piptools", "compile", "--quiet", "--generate-hashes", "--allow-unsafe",
           "--strip-extras", "--no-header", "--resolver=backtracking"]


def requirements_in(release: str, numpy: str) -> str:
    """The ``.in`` of one release: its onnxruntime and its numpy, nothing else."""
    return (f"# onnxruntime {release} (kit/runtime/releases.toml), written by "
            f"`python -m kit.runtime.releases lock {release}`.\n"
            f"onnxruntime=={release}\nnumpy=={numpy}\n")


def reference_constraints(numpy: str) -> str:
    """ref.lock's pins but onnxruntime (and numpy, which each release pins itself)."""
    pins = re.findall(r"^([A-Za-z0-9_.-]+==\S+)", get_runtime("ref").lock.read_text(), re.M)
    return "".join(f"{pin}\n" for pin in pins
                   if pin.split("==")[0].lower() not in ("onnxruntime", "numpy"))


def write_lock(release: str, python: str = sys.executable) -> Path:
    """Resolve and write ``locks/ort-<release>.lock``; returns its path."""
    releases = known_releases()
    if release not in releases:
        raise ConfigError(f"{RELEASES}: onnxruntime {release!r} is not a release the kit "
                          f"knows; known: {', '.join(releases)}")
    if any(rt.onnxruntime == release for rt in load_runtimes().values()):
        return release_runtime(release).lock
    lock = release_lock(release)
    source = lock.with_suffix(".in")
    source.write_text(requirements_in(release, releases[release]))
    with tempfile.TemporaryDirectory(prefix="kit-lock-") as folder:
        constraints = Path(folder) / "constraints.txt"
        constraints.write_text(reference_constraints(releases[release]))
        partial = Path(folder) / lock.name
        proc = subprocess.run([python, *COMPILE, "-c", str(constraints), "-o", str(partial),
                               str(source)], capture_output=True, text=True, cwd=lock.parent)
        if proc.returncode != 0 or not partial.is_file():
            raise EnvironmentFailed(f"{source}: pip-compile could not lock onnxruntime "
                                    f"{release} on this Python (exit {proc.returncode}):\n"
                                    + failure_tail(proc))
        # pip-compile names the constraints file in its "via" lines: name ref.lock, not
        # this temporary folder, so that locking twice writes the same bytes.
        write_atomic(lock, partial.read_text().replace(str(constraints), "ref.lock").encode())
    release_runtime(release)  # the written lock pins exactly this onnxruntime
    return lock


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        if args[:1] == ["lock"] and len(args) > 1:
            for release in args[1:]:
                print(f"{release}: {write_lock(release).relative_to(ROOT)}", flush=True)
            return 0
        if args == ["list"]:
            for release in known_releases():
                try:
                    runtime = release_runtime(release)
                    print(f"{release}\t{runtime.name}\t{runtime.lock.relative_to(ROOT)}")
                except ConfigError:
                    print(f"{release}\t-\tno lock yet")
            return 0
    except KitError as exc:
        print(f"kit: error: {exc}", file=sys.stderr)
        return 2
    print("usage: python -m kit.runtime.releases lock RELEASE [RELEASE ...] | list",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
