"""Hash-checked fetch: download, resume, mirror, and refusals, on a loopback server."""

from __future__ import annotations

import hashlib
import http.server
import threading
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from kit.drift.assets import CHECKPOINTS, CIFAR100, PINNED, Asset, check_mirror, fetch
from kit.errors import KitError

PAYLOAD = bytes(range(256)) * 4096  # 1 MiB
SHA = hashlib.sha256(PAYLOAD).hexdigest()


class RangeHandler(http.server.BaseHTTPRequestHandler):
    ranges: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        header = self.headers.get("Range")
        start = 0
        if header:
            RangeHandler.ranges.append(header)
            start = int(header.removeprefix("bytes=").rstrip("-"))
            self.send_response(206)
        else:
            self.send_response(200)
        body = PAYLOAD[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RangeHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    RangeHandler.ranges = []
    yield f"http://127.0.0.1:{httpd.server_address[1]}/blob.bin"
    httpd.shutdown()
    httpd.server_close()


def test_pins_are_well_formed() -> None:
    assert CIFAR100.sha256 is not None
    assert len(CIFAR100.sha256) == 64
    assert all(len(a.sha256_prefix or "") == 8 for a in CHECKPOINTS.values())
    assert all(a.sha256_prefix and a.sha256_prefix in a.name for a in CHECKPOINTS.values())


def test_download_checks_the_hash(server: str, tmp_path: Path) -> None:
    path, digest = fetch(Asset("blob.bin", server, sha256=SHA), tmp_path)
    assert digest == SHA
    assert path.read_bytes() == PAYLOAD


def test_download_resumes_a_partial_file(server: str, tmp_path: Path) -> None:
    (tmp_path / "blob.bin.part").write_bytes(PAYLOAD[:300_000])
    path, _ = fetch(Asset("blob.bin", server, sha256=SHA), tmp_path)
    assert RangeHandler.ranges == ["bytes=300000-"]
    assert path.read_bytes() == PAYLOAD


def test_prefix_pin_returns_the_full_hash(server: str, tmp_path: Path) -> None:
    _, digest = fetch(Asset("blob.bin", server, sha256_prefix=SHA[:8]), tmp_path)
    assert digest == SHA


def test_wrong_hash_leaves_nothing(server: str, tmp_path: Path) -> None:
    with pytest.raises(KitError, match=r"blob\.bin\.part: sha256 .* does not match the pin"):
        fetch(Asset("blob.bin", server, sha256="0" * 64), tmp_path)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(KitError, match="does not start with the pinned prefix 00000000"):
        fetch(Asset("blob.bin", server, sha256_prefix="00000000"), tmp_path)


def test_a_tampered_file_already_in_place_is_refused(tmp_path: Path) -> None:
    (tmp_path / "blob.bin").write_bytes(PAYLOAD[:-1] + b"x")
    with pytest.raises(KitError, match="does not match the pin"):
        fetch(Asset("blob.bin", "http://127.0.0.1:9/none", sha256=SHA), tmp_path)


def test_mirror_bytes_are_checked_too(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "blob.bin").write_bytes(PAYLOAD)
    path, _ = fetch(Asset("blob.bin", "http://unused", sha256=SHA), tmp_path / "a", mirror)
    assert path.read_bytes() == PAYLOAD
    (mirror / "blob.bin").write_bytes(PAYLOAD + b"!")
    with pytest.raises(KitError, match="does not match the pin"):
        fetch(Asset("blob.bin", "http://unused", sha256=SHA), tmp_path / "b", mirror)
    with pytest.raises(KitError, match=r"other\.bin is not in the mirror folder"):
        fetch(Asset("other.bin", "http://unused", sha256=SHA), tmp_path / "c", mirror)


def test_no_network_says_how_to_use_a_mirror(tmp_path: Path) -> None:
    def offline(*_: object, **__: object) -> None:
        raise urllib.error.URLError("no route")

    with pytest.raises(KitError, match="--assets DIR"):
        fetch(Asset("blob.bin", "http://example.invalid/x", sha256=SHA), tmp_path,
              opener=offline)


def test_an_unpinned_asset_is_refused(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "blob.bin").write_bytes(PAYLOAD)
    with pytest.raises(KitError, match="no hash pin"):
        fetch(Asset("blob.bin", "http://unused"), tmp_path / "d", tmp_path / "m")


def _mirror_pins(tmp_path: Path) -> tuple[Path, list[Asset]]:
    """A mirror folder given relative to the working folder, and four pinned files: a full
    pin with a size, a full pin, and two prefix pins (the chenyaofo kind)."""
    other = bytes(reversed(PAYLOAD))
    pins = [Asset("archive.tar.gz", "http://unused", sha256=SHA, size=len(PAYLOAD)),
            Asset("meta.bin", "http://unused", sha256=SHA),
            Asset("resnet20-abc.pt", "http://unused", sha256_prefix=SHA[:8]),
            Asset("vgg11-def.pt", "http://unused",
                  sha256_prefix=hashlib.sha256(other).hexdigest()[:8])]
    (tmp_path / "mirror").mkdir()
    return Path("mirror"), pins


def test_a_mirror_missing_every_file_names_all_four_as_given(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    mirror, pins = _mirror_pins(tmp_path)
    with pytest.raises(KitError) as raised:
        check_mirror(pins, mirror)
    assert str(raised.value).splitlines() == [
        "mirror: 4 of the 4 pinned files are missing from the mirror folder or hold other "
        "bytes (--assets DIR must hold each under its pinned name):",
        f"  mirror/archive.tar.gz: missing (the pin: sha256 {SHA})",
        f"  mirror/meta.bin: missing (the pin: sha256 {SHA})",
        f"  mirror/resnet20-abc.pt: missing (the pin: sha256 prefix {SHA[:8]} (trust on first "
        "use for the rest))",
        f"  mirror/vgg11-def.pt: missing (the pin: {pins[3].pin()})"]


def test_a_mirror_with_wrong_files_names_each_with_both_sha256(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    mirror, pins = _mirror_pins(tmp_path)
    short = PAYLOAD[:-1]
    (mirror / "archive.tar.gz").write_bytes(short)
    (mirror / "meta.bin").write_bytes(PAYLOAD + b"!")
    (mirror / "resnet20-abc.pt").write_bytes(PAYLOAD)  # matches its prefix pin
    (mirror / "vgg11-def.pt").write_bytes(PAYLOAD)
    with pytest.raises(KitError) as raised:
        check_mirror(pins, mirror)
    short_sha = hashlib.sha256(short).hexdigest()
    assert str(raised.value).splitlines()[1:] == [
        f"  mirror/archive.tar.gz: {len(short)} bytes (sha256 {short_sha}), the pin for "
        f"archive.tar.gz says {len(PAYLOAD)} bytes, sha256 {SHA}",
        f"  mirror/meta.bin: sha256 {hashlib.sha256(PAYLOAD + b'!').hexdigest()} does not "
        f"match the pin {SHA}",
        f"  mirror/vgg11-def.pt: sha256 {SHA} does not start with the pinned prefix "
        f"{pins[3].sha256_prefix}"]
    assert str(raised.value).startswith("mirror: 3 of the 4 pinned files")
    for name in ("archive.tar.gz", "meta.bin"):
        (mirror / name).write_bytes(PAYLOAD)
    (mirror / "vgg11-def.pt").write_bytes(bytes(reversed(PAYLOAD)))
    check_mirror(pins, mirror)


def test_a_wrong_mirror_file_is_named_as_the_users_not_the_kits_part_copy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    mirror, pins = _mirror_pins(tmp_path)
    (mirror / "meta.bin").write_bytes(PAYLOAD + b"!")
    with pytest.raises(KitError) as raised:
        fetch(pins[1], tmp_path / "store", mirror)
    assert str(raised.value) == (
        f"mirror/meta.bin: sha256 {hashlib.sha256(PAYLOAD + b'!').hexdigest()} does not "
        f"match the pin {SHA}")
    assert list((tmp_path / "store").iterdir()) == []


def test_the_pins_name_every_file_a_run_fetches() -> None:
    assert [a.name for a in PINNED.assets(["resnet20", "vgg11_bn"])] == [
        CIFAR100.name, CHECKPOINTS["resnet20"].name, CHECKPOINTS["vgg11_bn"].name]
    with pytest.raises(KitError, match="pins no checkpoint for model 'resnet56'"):
        PINNED.assets(["resnet56"])


def test_a_pins_file_that_is_not_utf8_json_names_the_file(tmp_path: Path) -> None:
    from kit.drift.assets import load_pins

    path = tmp_path / "pins.json"
    path.write_bytes('{"archive": {}}'.encode("utf-16"))  # json.loads(bytes) would take it
    with pytest.raises(KitError, match=r"pins\.json: not UTF-8 text \(byte 0xff at offset 0"):
        load_pins(path)
    path.write_text('{"archive": ')
    with pytest.raises(KitError, match=r"pins\.json: not valid JSON .*; give a JSON pins file"):
        load_pins(path)
    with pytest.raises(KitError, match=r"none\.json: missing"):
        load_pins(tmp_path / "none.json")
