"""The image build's pure parts: base choice and the manifest record.

Also covers ``kit.runtime.docker`` (no test file of its own)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.runtime import docker as images
from kit.runtime.backends import image_labels
from kit.runtime.runtimes import load_runtimes


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
