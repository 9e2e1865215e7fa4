"""Runtimes as data: every release of kit/runtime/releases.toml is a locked runtime, the
two study runtimes keep their locks, unknown releases and missing locks are refused, and a
release's own worker says which levels it offers and refuses one it lacks.

Also covers kit/runtime/releases.py (the lock writer's inputs; the locks it wrote).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from kit.errors import ConfigError, WorkerFailed
from kit.paths import ROOT
from kit.runtime import runtimes
from kit.runtime.backends import WORKER, describe_runtime, run_jobs
from kit.runtime.releases import reference_constraints, requirements_in
from kit.runtime.runtimes import get_runtime, known_releases, release_runtime
from kit.runtime.venvs import ensure_runtime
from tests.conftest import job


def test_every_release_is_locked_with_its_numpy() -> None:
    releases = known_releases()
    assert len(releases) == 18
    assert next(iter(releases)) == "1.15.1"
    assert "1.32.0" in releases
    for release, numpy in releases.items():
        lock = release_runtime(release).lock
        pins = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", lock.read_text(), re.M)
        assert ("onnxruntime", release) in pins, lock
        assert ("numpy", numpy) in pins, lock
        if lock.name.startswith("ort-"):  # written by kit.runtime.releases
            assert "/tmp/" not in lock.read_text(), f"{lock} names a temporary folder"


def test_the_study_runtimes_keep_their_locks() -> None:
    assert get_runtime("ort-1.20.1") == get_runtime("ref")
    assert release_runtime("1.29.0").lock == ROOT / "locks" / "cand.lock"
    other = get_runtime("ort-1.15.1")
    assert (other.name, other.lock.name, other.image) == (
        "ort-1.15.1", "ort-1.15.1.lock", "kit-ort:1.15.1")
    assert "COPY locks/${RUNTIME}.lock" in other.dockerfile.read_text()


def test_an_unknown_release_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"releases.toml: onnxruntime '1.99.0' is not a "
                                          r"release the kit knows"):
        get_runtime("ort-1.99.0")


def test_a_release_without_a_lock_names_the_command(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    table = tmp_path / "releases.toml"
    table.write_text(runtimes.RELEASES.read_text().replace("[numpy]\n",
                                                           '[numpy]\n"1.99.9" = "2.1.3"\n'))
    monkeypatch.setattr(runtimes, "RELEASES", table)
    with pytest.raises(ConfigError, match=r"ort-1.99.9.lock: no lock for onnxruntime 1.99.9; "
                                          r"write it with `python -m kit.runtime.releases"):
        release_runtime("1.99.9")


def test_a_release_lock_is_resolved_under_the_reference_pins() -> None:
    text = requirements_in("1.15.1", "1.26.4")
    assert "onnxruntime==1.15.1\nnumpy==1.26.4\n" in text
    constraints = reference_constraints("1.26.4")
    assert "protobuf==" in constraints
    assert "sympy==" in constraints
    assert "onnxruntime" not in constraints
    assert "numpy" not in constraints


def test_the_worker_describes_its_release() -> None:
    said = describe_runtime(get_runtime("cand"), "venv")
    assert said["onnxruntime"] == "1.29.0"
    assert said["levels"][0] == "disable_all"
    assert said["levels"][-1] == "enable_all"
    out = subprocess.run([str(ensure_runtime("ref")), "-I", str(WORKER), "--describe"],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out)["onnxruntime"] == "1.20.1"


def test_the_level_table_is_what_each_release_offers() -> None:
    """releases.toml's [levels], which the audit refuses a level by before any worker
    starts, against each release's own worker wherever its environment is built (the two
    study runtimes' always; the rest where a sweep or a bisection built them) and against
    the real-drift sweep's record of every release."""
    from kit.paths import cache_dir
    from kit.runtime.venvs import is_current, venv_python

    swept = json.loads((ROOT / "claims" / "realdrift" / "evidence" / "digits" / "sweep" /
                        "levels.json").read_text())
    asked = []
    for release in known_releases():
        table = runtimes.levels_offered(release)
        assert table == swept[release]["levels"], release
        runtime = release_runtime(release)
        venv = cache_dir() / "venvs" / runtime.name
        if runtime.name in ("ref", "cand"):
            ensure_runtime(runtime.name)
        elif not is_current(venv, runtime.lock):
            continue
        said = subprocess.run([str(venv_python(venv)), "-I", str(WORKER), "--describe"],
                              capture_output=True, text=True, check=True).stdout
        assert json.loads(said)["levels"] == table, release
        asked.append(release)
    assert {"1.20.1", "1.29.0"} <= set(asked)
    assert "enable_layout" not in runtimes.levels_offered("1.22.1")
    assert "enable_layout" in runtimes.levels_offered("1.23.2")


def test_a_release_the_level_table_lacks_is_a_config_error(tmp_path: Path) -> None:
    table = tmp_path / "releases.toml"
    table.write_text('[numpy]\n"1.99.9" = "2.1.3"\n[levels]\n"1.99.9" = ["enable_most"]\n')
    for release in ("1.99.9", "1.99.8"):
        with pytest.raises(ConfigError, match=rf"releases.toml: \[levels\] gives onnxruntime "
                                              rf"'{release}' no list of levels"):
            runtimes.levels_offered(release, table)


def test_a_level_the_release_lacks_is_refused_before_any_job(workdir: Path) -> None:
    ref = get_runtime("ref")
    offered = describe_runtime(ref, "venv")["levels"]
    lacking = [level for level in runtimes.GRAPH_LEVELS if level not in offered]
    if not lacking:
        pytest.skip(f"onnxruntime 1.20.1 offers every level the kit names ({offered})")
    jobs = [job(output="a.npz"), job(output="b.npz", graph_optimization=lacking[0])]
    with pytest.raises(WorkerFailed, match=f"offers no graph optimisation level {lacking[0]}"):
        run_jobs(ref, jobs, workdir / "in", workdir / "out", "venv")
    assert not (workdir / "out" / "a.npz").exists()
