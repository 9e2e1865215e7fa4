"""Environments from locks: the stamp that decides reuse, and the lock parser."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit import venvs
from kit.errors import ConfigError, EnvironmentFailed

HASH = "0" * 64


def _lock(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_lock_parser_joins_continuations_and_ignores_comments(tmp_path: Path) -> None:
    lock = _lock(tmp_path / "a.lock",
                 f"# header\nnumpy==2.1.3 \\\n    --hash=sha256:{HASH} \\\n"
                 f"    --hash=sha256:{'1' * 64}\n    # via x\nsix==1.16.0 --hash=sha256:{HASH}\n")
    assert venvs.lock_requirements(lock) == {"numpy==2.1.3": [HASH, "1" * 64],
                                             "six==1.16.0": [HASH]}


def test_lock_parser_refuses_ranges_and_empty_locks(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not pinned with =="):
        venvs.lock_requirements(_lock(tmp_path / "b.lock", f"numpy>=2 --hash=sha256:{HASH}\n"))
    with pytest.raises(ConfigError, match="no pinned requirement"):
        venvs.lock_requirements(_lock(tmp_path / "c.lock", "# nothing\n"))


def test_environment_is_current_only_for_its_own_lock(tmp_path: Path) -> None:
    lock = _lock(tmp_path / "a.lock", f"six==1.16.0 --hash=sha256:{HASH}\n")
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").write_text("")
    assert not venvs.is_current(env, lock)
    (env / venvs.STAMP).write_text(venvs._stamp_value(lock, None))
    assert venvs.is_current(env, lock)
    assert not venvs.is_current(env, lock, editable=tmp_path)
    lock.write_text(f"six==1.17.0 --hash=sha256:{HASH}\n")
    assert not venvs.is_current(env, lock)


def test_a_hash_mismatch_fails_the_install_and_leaves_no_stamp(tmp_path: Path) -> None:
    lock = _lock(tmp_path / "bad.lock", f"six==1.16.0 --hash=sha256:{HASH}\n")
    env = tmp_path / "env"
    with pytest.raises(EnvironmentFailed, match=r"installing .*bad\.lock"):
        venvs.ensure_venv(env, lock)
    assert not (env / venvs.STAMP).exists()


def test_an_environment_never_rebuilds_itself(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    lock = _lock(tmp_path / "a.lock", f"six==1.16.0 --hash=sha256:{HASH}\n")
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").write_text("")
    monkeypatch.setattr(venvs.sys, "prefix", str(env))
    with pytest.raises(EnvironmentFailed, match="runs from it, so it cannot rebuild itself"):
        venvs.ensure_venv(env, lock)
    assert (env / "bin" / "python").exists()


def test_split_lock_separates_the_packages_built_against_torch(tmp_path: Path) -> None:
    from kit.venvs import PHYSICSNEMO_LOCK, lock_requirements, split_lock

    rest, later = split_lock(PHYSICSNEMO_LOCK, ("torch-scatter",))
    (tmp_path / "rest.txt").write_text(rest)
    (tmp_path / "later.txt").write_text(later)
    first = lock_requirements(tmp_path / "rest.txt")
    second = lock_requirements(tmp_path / "later.txt")
    assert list(second) == ["torch-scatter==2.1.2"]
    assert "torch==2.14.1" in first
    assert "torch-scatter==2.1.2" not in first
    assert len(first) + 1 == len(lock_requirements(PHYSICSNEMO_LOCK))
    # both keep the lock's index options
    assert later.splitlines()[0] == rest.splitlines()[0]
