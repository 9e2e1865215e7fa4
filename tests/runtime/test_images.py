"""The image build: base choice, the manifest record, and a release's image built on first
use by the docker backend (writing the bytes its venv writes).

Also covers ``kit.runtime.docker`` (no test file of its own)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kit.errors import ConfigError, ImageError
from kit.runtime import docker as images
from kit.runtime.backends import run_jobs
from kit.runtime.docker import image_labels
from kit.runtime.runtimes import get_runtime, load_runtimes
from kit.runtime.worker import meta_path
from tests.conftest import job


def test_given_base_is_used_as_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(images, "image_id", lambda image: "sha256:abc")
    assert images.choose_base("debian:local") == ("debian:local", "given")


def test_local_official_base_is_preferred(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(images, "image_id",
                        lambda image: "sha256:1" if image == images.OFFICIAL_BASE else None)
    assert images.choose_base(None) == (images.OFFICIAL_BASE, "local")


def test_without_a_registry_the_debootstrap_base_is_built(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def fake_run(cmd: list[str], what: str, timeout: float | None = None) -> str:
        calls.append(cmd)
        if cmd[:2] == ["docker", "pull"]:
            raise images.ImageError("pulling: no such host")
        return ""

    monkeypatch.setattr(images, "image_id", lambda image: None)
    monkeypatch.setattr(images, "_run", fake_run)
    assert images.choose_base(None) == (images.DEBOOTSTRAP_BASE, "debootstrap")
    assert calls[-1][-1] == images.DEBOOTSTRAP_BASE
    assert calls[-1][1].endswith("tools/base-image.sh")


@pytest.mark.docker
@pytest.mark.usefixtures("docker_ready")
def test_manifest_records_the_images_that_exist() -> None:
    if not images.MANIFEST.is_file():
        pytest.fail(f"{images.MANIFEST} missing: `nox -s images` writes it")
    record = json.loads(Path(images.MANIFEST).read_text())
    for name, runtime in load_runtimes().items():
        entry = record["runtimes"][name]
        assert entry["id"] == images.image_id(runtime.image)
        assert entry["lock_sha256"] == runtime.lock_sha256()
        assert image_labels(runtime.image)["org.kit.runtime"] == name
    assert record["base"]["source"] in ("given", "local", "pulled", "debootstrap")


def test_an_absent_or_stale_image_is_built_once_and_then_checked(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    built: list[list[str]] = []
    state = {"fresh": False}

    def check(runtime: object) -> None:
        if not state["fresh"]:
            raise ImageError("image kit-ort:1.17.3 is not built here")

    def build(chosen: list, base: str | None, manifest: Path) -> dict[str, object]:
        built.append([runtime.name for runtime in chosen])
        assert manifest == tmp_path / "images.json"
        state["fresh"] = True
        return {}

    monkeypatch.setattr(images, "check_image", check)
    monkeypatch.setattr(images, "_build", build)
    runtime = get_runtime("ort-1.17.3")
    images.ensure_image(runtime, tmp_path / "images.json")
    images.ensure_image(runtime, tmp_path / "images.json")  # now current: no second build
    assert built == [["ort-1.17.3"]]
    assert (tmp_path / ".images.json.build-lock").is_file()


def test_a_caller_that_waited_for_the_lock_does_not_build_again(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    answers = iter([ImageError("image kit-ort:1.17.3 is not built here"), None, None])

    def check(runtime: object) -> None:  # absent, then built by the lock's holder
        answer = next(answers)
        if answer is not None:
            raise answer

    monkeypatch.setattr(images, "check_image", check)
    monkeypatch.setattr(images, "_build", lambda *a: pytest.fail("built twice"))
    images.ensure_image(get_runtime("ort-1.17.3"), tmp_path / "images.json")


def test_a_build_that_leaves_a_stale_image_is_an_error(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    def check(runtime: object) -> None:
        raise ImageError("image kit-ort:1.17.3 was built from a different ort-1.17.3.lock")

    monkeypatch.setattr(images, "check_image", check)
    monkeypatch.setattr(images, "_build", lambda *a: {})
    with pytest.raises(ImageError, match=r"built from a different ort-1\.17\.3\.lock"):
        images.ensure_image(get_runtime("ort-1.17.3"), tmp_path / "images.json")


def test_the_manifest_keeps_only_entries_whose_images_exist(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    manifest = tmp_path / "images.json"
    manifest.write_text(json.dumps({"base": {"image": "b", "id": "sha256:b"}, "runtimes": {
        "ref": {"image": "kit-ref:x", "id": "sha256:1"},
        "cand": {"image": "kit-cand:x", "id": "sha256:2"}}}))
    present = {"kit-ref:x": "sha256:1", "kit-cand:x": "sha256:9"}  # cand rebuilt since
    monkeypatch.setattr(images, "image_id", present.get)
    assert images._recorded(manifest)["runtimes"] == {
        "ref": {"image": "kit-ref:x", "id": "sha256:1"}}
    manifest.write_text("{not json")
    assert images._recorded(manifest) == {"base": None, "runtimes": {}}


def test_an_unknown_runtime_is_refused_before_any_build() -> None:
    with pytest.raises(ConfigError, match=r"onnxruntime '1\.99\.0' is not a release"):
        images.build_images(names=["ort-1.99.0"])


@pytest.mark.docker
@pytest.mark.usefixtures("docker_ready")
def test_a_release_image_is_built_on_first_use_and_writes_its_venvs_bytes(
        workdir: Path) -> None:
    runtime = get_runtime("ort-1.17.3")  # a release before 1.19: numpy 1.26.4 in its lock
    subprocess.run(["docker", "image", "rm", "-f", runtime.image], capture_output=True)
    jobs = [job(id="a", output="a.npz"),
            job(id="b", output="b.npz", graph_optimization="enable_all")]
    in_docker = run_jobs(runtime, jobs, workdir / "in", workdir / "docker", "docker")
    in_venv = run_jobs(runtime, jobs, workdir / "in", workdir / "venv", "venv")
    for d, v in zip(in_docker, in_venv, strict=True):
        assert d.read_bytes() == v.read_bytes()
        assert meta_path(d).read_bytes() == meta_path(v).read_bytes()
    assert json.loads(meta_path(in_docker[0]).read_text())["onnxruntime"] == "1.17.3"
    labels = image_labels(runtime.image)
    assert labels["org.kit.runtime"] == "ort-1.17.3"
    assert labels["org.kit.lock-sha256"] == runtime.lock_sha256()
    record = json.loads(images.MANIFEST.read_text())
    assert record["runtimes"]["ort-1.17.3"]["id"] == images.image_id(runtime.image)
    assert {"ref", "cand"} <= set(record["runtimes"])  # the study images' entries are kept
