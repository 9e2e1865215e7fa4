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

from kit.assets import CHECKPOINTS, CIFAR100, Asset, fetch
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
