"""Build the two runtime images (``nox -s images``) and record them in a manifest.

Steps: download each lock's wheels on the host into ``build/wheelhouse/<runtime>``
(hash-checked), choose a base image, ``docker build`` each Dockerfile without network,
then write ``build/images.json`` (image IDs, labels, base). The base defaults to the
official ``python:3.11-slim-bookworm``; when it is neither present nor pullable (no
registry answers, as on the kit's build machines) a base is built from Debian's packages
with debootstrap (``tools/base-image.sh``) and the manifest says so.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from kit.errors import ImageError
from kit.paths import ROOT
from kit.runtime.backends import worker_sha256
from kit.runtime.runtimes import Runtime, load_runtimes
from kit.runtime.venvs import failure_tail
from kit.runtime.worker import canonical_json, write_atomic

OFFICIAL_BASE = "python:3.11-slim-bookworm"
DEBOOTSTRAP_BASE = "kit-base:bookworm-py311"
WHEELHOUSE = ROOT / "build" / "wheelhouse"
# Per machine, so under the ignored build/ and outside the verified manifests/.
MANIFEST = ROOT / "build" / "images.json"


def _run(cmd: list[str], what: str, timeout: float | None = None) -> str:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise ImageError(f"{what}: timed out after {timeout} s") from exc
    if proc.returncode != 0:
        raise ImageError(f"{what} failed (exit {proc.returncode}):\n" + failure_tail(proc))
    return proc.stdout


def download_wheelhouse(runtime: Runtime) -> Path:
    """Every wheel of the runtime's lock, checked against its hashes, into the context."""
    target = WHEELHOUSE / runtime.name
    target.mkdir(parents=True, exist_ok=True)
    for stale in target.glob("*.whl"):
        stale.unlink()
    _run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
          "--no-deps", "--require-hashes", "--only-binary", ":all:", "-r", str(runtime.lock),
          "-d", str(target)], f"downloading the wheels of {runtime.lock}")
    return target


def image_id(image: str) -> str | None:
    """The local image's ID, or None when it is absent."""
    proc = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", image],
                          capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def choose_base(requested: str | None) -> tuple[str, str]:
    """(base image, how it was obtained): given, local, pulled, or debootstrap."""
    if requested:
        if image_id(requested) is None:
            _run(["docker", "pull", requested], f"pulling base image {requested}", timeout=120)
        return requested, "given"
    if image_id(OFFICIAL_BASE) is not None:
        return OFFICIAL_BASE, "local"
    try:
        _run(["docker", "pull", OFFICIAL_BASE], f"pulling {OFFICIAL_BASE}", timeout=60)
        return OFFICIAL_BASE, "pulled"
    except ImageError as exc:
        print(f"images: no registry answered for {OFFICIAL_BASE} ({str(exc).splitlines()[-1]});"
              f" building {DEBOOTSTRAP_BASE} from Debian's packages with debootstrap",
              file=sys.stderr)
    _run(["bash", str(ROOT / "tools" / "base-image.sh"), DEBOOTSTRAP_BASE],
         "building the debootstrap base image", timeout=900)
    return DEBOOTSTRAP_BASE, "debootstrap"


def build_image(runtime: Runtime, base: str) -> dict[str, Any]:
    """``docker build`` one runtime image (no network) and return its manifest entry."""
    lock_sha = runtime.lock_sha256()
    _run(["docker", "build", "--network", "none", "--pull=false", "-q",
          "-f", str(runtime.dockerfile), "-t", runtime.image,
          "--build-arg", f"BASE={base}", "--build-arg", f"RUNTIME={runtime.name}",
          "--build-arg", f"ORT_VERSION={runtime.onnxruntime}",
          "--build-arg", f"LOCK_SHA256={lock_sha}",
          "--build-arg", f"WORKER_SHA256={worker_sha256()}", str(ROOT)],
         f"building {runtime.image} from {runtime.dockerfile.name}", timeout=900)
    inspect = json.loads(_run(["docker", "image", "inspect", runtime.image], "inspect"))[0]
    labels = inspect["Config"]["Labels"] or {}
    if labels.get("org.kit.lock-sha256") != lock_sha or \
            labels.get("org.kit.worker-sha256") != worker_sha256():
        raise ImageError(f"{runtime.image}: labels {labels} do not carry lock {lock_sha} and "
                         f"worker {worker_sha256()}")
    return {"image": runtime.image, "id": inspect["Id"], "labels": labels,
            "dockerfile": runtime.dockerfile.name, "lock": runtime.lock.name,
            "lock_sha256": lock_sha, "onnxruntime": runtime.onnxruntime}


def build_images(base: str | None = None, names: list[str] | None = None,
                 manifest: Path = MANIFEST) -> dict[str, Any]:
    """Build the runtime images and write the image manifest; returns it."""
    runtimes = load_runtimes()
    chosen = names or sorted(runtimes)
    base_image, source = choose_base(base)
    entries = {}
    for name in chosen:
        download_wheelhouse(runtimes[name])
        entries[name] = build_image(runtimes[name], base_image)
        print(f"images: {name}: {entries[name]['image']} {entries[name]['id']}",
              file=sys.stderr)
    record = {"base": {"image": base_image, "id": image_id(base_image), "source": source},
              "runtimes": entries}
    write_atomic(manifest, canonical_json(record))
    return record
