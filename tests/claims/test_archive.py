"""The deposit for a permanent archive (``kit.claims.archive``): the committed tree as
``git archive`` writes it, with its root digest and sha256; an uncommitted change to a
tracked file is refused, since the root would not be the archive's."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from kit.claims.archive import write_archive
from kit.claims.coverage import roots
from kit.errors import KitError
from kit.paths import ROOT


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A committed checkout of the claims, manifests, locks and pyproject."""
    root = tmp_path / "repo"
    for name in ("claims", "manifests", "locks"):
        shutil.copytree(ROOT / name, root / name)
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    for args in (["init", "-q"], ["add", "-A"],
                 ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "tree"]):
        subprocess.run(["git", "-C", str(root), *args], check=True, timeout=120)
    return root


def test_the_deposit_holds_the_committed_tree_and_names_its_root(repo: Path,
                                                                 tmp_path: Path) -> None:
    deposit = json.loads(write_archive(repo, tmp_path / "out").read_text())
    archive = tmp_path / "out" / deposit["archive"]
    assert deposit["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert deposit["root"] == roots(repo)["combined"]
    assert f"--expect-root {deposit['root']}" in deposit["check"]
    assert (tmp_path / "out" / "SHA256SUMS").read_text() == \
        f"{deposit['sha256']}  {deposit['archive']}\n"
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    prefix = deposit["archive"].removesuffix(".tar.gz")
    assert f"{prefix}/claims/drift.yaml" in names
    assert f"{prefix}/manifests/evidence.json" in names


def test_an_uncommitted_change_is_refused_and_nothing_is_written(repo: Path,
                                                                 tmp_path: Path) -> None:
    ledger = repo / "claims" / "drift.yaml"
    ledger.write_text(ledger.read_text() + "\n")
    with pytest.raises(KitError, match=r"claims/drift\.yaml \(and any other tracked file "
                                       r"changed\) is not committed"):
        write_archive(repo, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_two_archives_of_one_commit_are_the_same_bytes(repo: Path, tmp_path: Path) -> None:
    """A deposit can be rebuilt and checked by anyone: the same commit gives the same
    archive and sha256, whatever the time, the files' times or the umask."""
    first = json.loads(write_archive(repo, tmp_path / "one").read_text())
    for path in (repo / "claims").rglob("*"):
        os.utime(path, (1, 1))
    old = os.umask(0o077)
    try:
        time.sleep(1.1)  # another second in any time stamp the archive could carry
        second = json.loads(write_archive(repo, tmp_path / "two").read_text())
    finally:
        os.umask(old)
    assert first["sha256"] == second["sha256"]
    assert (tmp_path / "one" / first["archive"]).read_bytes() == \
        (tmp_path / "two" / second["archive"]).read_bytes()


def test_the_command_prints_the_archives_sha256_and_root(
        repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from kit.__main__ import main

    monkeypatch.setattr("kit.paths.ROOT", repo)
    assert main(["archive", "--out", str(tmp_path / "out")]) == 0
    deposit = json.loads((tmp_path / "out" / "DEPOSIT.json").read_text())
    printed = capsys.readouterr().out
    assert f"sha256 {deposit['sha256']}" in printed
    assert f"root {deposit['root']} (commit {deposit['commit']})" in printed
