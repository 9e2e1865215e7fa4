"""Build runtime images and record them in a manifest: the two study runtimes with
``nox -s images``, any release (``ort-<release>``, ``Dockerfile.release``) with
``python -m kit images --runtime ort-<release>``, and any runtime on demand
(``ensure_image``: the docker backend builds an image that is absent or stale on first use,
as the venv backend builds an environment).

Steps: download each lock's wheels on the host into ``build/wheelhouse/<runtime>``
(hash-checked), choose a base image, ``docker build`` each Dockerfile without network,
then write ``build/images.json`` (image IDs, labels, base; entries of other runtimes whose
images still exist are kept). The base defaults to the one the manifest records while that
image exists, else the official ``python:3.11-slim-bookworm``; when it is neither present nor
pullable (no registry answers, as on the kit's build machines) a base is built from
Debian's packages with debootstrap (``tools/base-image.sh``) and the manifest says so.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from kit.errors import ImageError
from kit.paths import ROOT
from kit.procs import run_stoppable
from kit.runtime import worker
from kit.runtime.runtimes import Runtime, get_runtime, load_runtimes
from kit.runtime.venvs import _building, failure_tail  # one build lock for both backends
from kit.runtime.worker import canonical_json, write_atomic

OFFICIAL_BASE = "python:3.11-slim-bookworm"
DEBOOTSTRAP_BASE = "kit-base:bookworm-py311"
WHEELHOUSE = ROOT / "build" / "wheelhouse"
# Per machine, so under the ignored build/ and outside the verified manifests/.
MANIFEST = ROOT / "build" / "images.json"
LABEL_LOCK = "org.kit.lock-sha256"
LABEL_WORKER = "org.kit.worker-sha256"


def worker_sha256() -> str:
    """sha256 of ``kit/runtime/worker.py``: an image carries the very worker of this
    checkout."""
    return hashlib.sha256(Path(worker.__file__).read_bytes()).hexdigest()


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
        raise ImageError(f"image {runtime.image} holds another kit/runtime/worker.py "
                         "than this checkout "
                         f"(label {labels.get(LABEL_WORKER)}); rebuild it with `nox -s images`")



def _run(cmd: list[str], what: str, timeout: float | None = None) -> str:
    try:
        proc = run_stoppable(cmd, timeout=timeout)  # a stop kills a build (kit.procs)
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


def _recorded(manifest: Path) -> dict[str, Any]:
    """The manifest's base and the entries whose images still exist (a manifest that is
    not JSON is rewritten from what is built now)."""
    try:
        record = json.loads(manifest.read_bytes())
        base, entries = record["base"], dict(record["runtimes"])
    except (OSError, ValueError, KeyError, TypeError):
        return {"base": None, "runtimes": {}}
    kept = {name: entry for name, entry in entries.items()
            if isinstance(entry, dict) and image_id(str(entry.get("image"))) == entry.get("id")}
    return {"base": base if isinstance(base, dict) else None, "runtimes": kept}


def build_images(base: str | None = None, names: list[str] | None = None,
                 manifest: Path = MANIFEST) -> dict[str, Any]:
    """Build the named runtimes' images (default: the two study runtimes; any
    ``ort-<release>`` too) and write the image manifest; returns it."""
    chosen = [get_runtime(name) for name in (names or sorted(load_runtimes()))]
    with _building(manifest):
        return _build(chosen, base, manifest)


def _build(chosen: list[Runtime], base: str | None, manifest: Path) -> dict[str, Any]:
    record = _recorded(manifest)
    recorded_base = record["base"]
    if base is None and recorded_base and recorded_base.get("image") and \
            image_id(recorded_base["image"]) is not None:
        base_image, source = recorded_base["image"], recorded_base.get("source", "local")
    else:
        base_image, source = choose_base(base)
    entries = record["runtimes"]
    for runtime in chosen:
        download_wheelhouse(runtime)
        entries[runtime.name] = build_image(runtime, base_image)
        print(f"images: {runtime.name}: {runtime.image} {entries[runtime.name]['id']}",
              file=sys.stderr)
    record = {"base": {"image": base_image, "id": image_id(base_image), "source": source},
              "runtimes": dict(sorted(entries.items()))}
    write_atomic(manifest, canonical_json(record))
    return record


def ensure_image(runtime: Runtime, manifest: Path = MANIFEST) -> None:
    """The runtime's image as this checkout's lock and worker make it: built here on first
    use when it is absent or was built from another lock or worker, checked again under
    the build lock so that two callers build it once (a build that fails is an ImageError
    naming the runtime and the step)."""
    try:
        check_image(runtime)
        return
    except ImageError:
        pass
    with _building(manifest):
        try:
            check_image(runtime)  # another process built it while this one waited
            return
        except ImageError as exc:
            print(f"images: {runtime.name}: {exc}; building it now", file=sys.stderr)
        _build([runtime], None, manifest)
    check_image(runtime)
