"""The runtime configurations: the declared file, its checks, and the real versions.

Also covers ``kit.locks`` (no test file of its own)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.errors import ConfigError
from kit.locks import lock_requirements
from kit.paths import ROOT
from kit.runtime.backends import run_jobs
from kit.runtime.runtimes import load_runtimes
from kit.runtime.worker import meta_path
from tests.conftest import job


def test_the_two_runtimes_are_declared_once() -> None:
    runtimes = load_runtimes()
    assert sorted(runtimes) == ["cand", "ref"]
    assert (runtimes["ref"].onnxruntime, runtimes["ref"].graph_optimization) == \
        ("1.20.1", "disable_all")
    assert (runtimes["cand"].onnxruntime, runtimes["cand"].graph_optimization) == \
        ("1.29.0", "enable_all")


def test_runtime_locks_differ_only_in_onnxruntime() -> None:
    ref = lock_requirements(ROOT / "locks" / "ref.lock")
    cand = lock_requirements(ROOT / "locks" / "cand.lock")
    shared = {pin.split("==")[0] for pin in ref} & {pin.split("==")[0] for pin in cand}
    assert "numpy" in shared
    for name in shared - {"onnxruntime"}:
        same = [pin for pin in ref if pin.startswith(name + "==")]
        assert same, name
        assert same[0] in cand, name
    assert "onnxruntime==1.20.1" in ref
    assert "onnxruntime==1.29.0" in cand


def test_every_lock_line_carries_a_hash() -> None:
    for lock in sorted((ROOT / "locks").glob("*.lock")):
        pins = lock_requirements(lock)
        assert pins, lock
        assert all(pins.values()), lock


def test_unhashed_pin_is_refused(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    lock.write_text("numpy==2.1.3\n")
    with pytest.raises(ConfigError, match=r"x\.lock: numpy==2\.1\.3 carries no --hash"):
        lock_requirements(lock)


def test_malformed_config_names_the_file(tmp_path: Path) -> None:
    config = tmp_path / "runtimes.toml"
    config.write_text('[ref]\nlock = "locks/ref.lock"\n')
    with pytest.raises(ConfigError, match=r"runtimes\.toml: runtime 'ref' lacks"):
        load_runtimes(config)
    config.write_bytes(b'[ref]\nlock = "\xff"\n')
    with pytest.raises(ConfigError, match=r"cannot read the runtime configurations.*utf-8"):
        load_runtimes(config)
    config.write_text("[ref\n")
    with pytest.raises(ConfigError, match="cannot read the runtime configurations"):
        load_runtimes(config)


def test_a_lock_that_pins_the_wrong_onnxruntime_is_refused(tmp_path: Path) -> None:
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks" / "ref.lock").write_text(
        (ROOT / "locks" / "cand.lock").read_text())
    config = tmp_path / "runtimes.toml"
    config.write_text(
        '[ref]\ndescription = "x"\nonnxruntime = "1.20.1"\nlock = "locks/ref.lock"\n'
        'dockerfile = "Dockerfile.ref"\nimage = "kit-ref:x"\n'
        'graph_optimization = "disable_all"\n')
    with pytest.raises(ConfigError, match=r"must pin onnxruntime==1\.20\.1 once"):
        load_runtimes(config, root=tmp_path)


def test_runtimes_really_are_the_pinned_versions(workdir: Path) -> None:
    for name, runtime in load_runtimes().items():
        (out,) = run_jobs(runtime, [job()], workdir / "in", workdir / name, "venv")
        record = json.loads(meta_path(out).read_text())
        assert record["onnxruntime"] == runtime.onnxruntime
        assert record["numpy"] == "2.1.3"
        assert record["session_options"]["graph_optimization"] == runtime.graph_optimization
