"""CIFAR-100 loading on small archives the tests write, including hostile ones."""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest

from kit.drift.cifar import load_cifar100_test, load_pickle
from kit.errors import KitError

TEST, META = "cifar-100-python/test", "cifar-100-python/meta"


def _split(n: int) -> dict[bytes, object]:
    rng = np.random.default_rng(3)
    return {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
            b"fine_labels": [int(i % 100) for i in range(n)],
            b"coarse_labels": [0] * n, b"filenames": [b"x.png"] * n}


def _archive(tmp_path: Path, members: dict[str, bytes], name: str = "c.tar.gz") -> Path:
    path = tmp_path / name
    with tarfile.open(path, "w:gz") as tar:
        for member, data in members.items():
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _pins(members: dict[str, bytes]) -> dict[str, str]:
    return {k: hashlib.sha256(v).hexdigest() for k, v in members.items()}


@pytest.fixture
def members() -> dict[str, bytes]:
    names = [f"class{i}".encode() for i in range(100)]
    return {TEST: pickle.dumps(_split(7), protocol=2),
            META: pickle.dumps({b"fine_label_names": names}, protocol=2)}


def test_loads_images_channel_major_to_hwc(tmp_path: Path, members: dict[str, bytes]) -> None:
    archive = _archive(tmp_path, members)
    images, labels, names = load_cifar100_test(archive, tmp_path / "x", _pins(members))
    raw = _split(7)[b"data"]
    assert isinstance(raw, np.ndarray)
    assert images.shape == (7, 32, 32, 3)
    assert images.dtype == np.uint8
    # pixel (row 2, col 5) of image 4: R at 2*32+5, G at 1024 + that, B at 2048 + that
    assert list(images[4, 2, 5]) == [raw[4, 69], raw[4, 1024 + 69], raw[4, 2048 + 69]]
    assert labels.tolist() == list(range(7))
    assert names[99] == "class99"


def test_member_with_a_wrong_hash_is_not_unpickled(tmp_path: Path,
                                                   members: dict[str, bytes]) -> None:
    pins = {**_pins(members), TEST: "f" * 64}
    with pytest.raises(KitError, match=r"test: sha256 .* does not match the pin f{64}"):
        load_cifar100_test(_archive(tmp_path, members), tmp_path / "x", pins)


def test_truncated_archive_is_refused(tmp_path: Path, members: dict[str, bytes]) -> None:
    archive = _archive(tmp_path, members)
    archive.write_bytes(archive.read_bytes()[:200])
    with pytest.raises(KitError, match=r"c\.tar\.gz: not a readable tar archive"):
        load_cifar100_test(archive, tmp_path / "x", _pins(members))


def test_member_escaping_the_folder_is_refused(tmp_path: Path,
                                               members: dict[str, bytes]) -> None:
    archive = _archive(tmp_path, {**members, "../evil": b"x"})
    with pytest.raises(KitError, match="would land outside"):
        load_cifar100_test(archive, tmp_path / "x", _pins(members))
    assert not (tmp_path / "evil").exists()


def test_symlink_member_is_refused(tmp_path: Path, members: dict[str, bytes]) -> None:
    archive = tmp_path / "l.tar"
    with tarfile.open(archive, "w") as tar:
        link = tarfile.TarInfo("cifar-100-python/link")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        tar.addfile(link)
    with pytest.raises(KitError, match="is not a plain file"):
        load_cifar100_test(archive, tmp_path / "x", _pins(members))


def test_pickle_with_code_is_refused(tmp_path: Path) -> None:
    class Payload:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, ("echo pwned",))

    evil = tmp_path / "evil"
    evil.write_bytes(pickle.dumps({b"data": Payload()}, protocol=2))
    with pytest.raises(KitError, match=r"refused or damaged pickle \(global .*system"):
        load_pickle(evil, hashlib.sha256(evil.read_bytes()).hexdigest())


def test_malformed_split_is_refused(tmp_path: Path, members: dict[str, bytes]) -> None:
    bad = {**members, TEST: pickle.dumps({b"data": np.zeros((2, 10), np.uint8),
                                          b"fine_labels": [0, 1]}, protocol=2)}
    with pytest.raises(KitError, match="data must be uint8 N x 3072"):
        load_cifar100_test(_archive(tmp_path, bad), tmp_path / "x", _pins(bad))
