"""The pinned cylinder trajectories: the shipped ones check out and are the ones the study
reads; pin, lookup, damage and the resimulation comparison on tiny real simulations."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from kit.errors import KitError
from kit.files import sha256, write_npz
from kit.sciml import mgn_study, pinned
from kit.sciml.cylinder import Flow
from kit.sciml.meshes import cylinder_mesh

TINY = Flow(nx=32, ny=16, spinup=2, frames=3, stride=1)
HELD = (Flow(inflow=0.8, nx=32, ny=16, spinup=2, frames=2, stride=1),)


def study_flows() -> list[Flow]:
    base = Flow()
    return [base] + [replace(o, nx=base.nx, ny=base.ny, centre=base.centre, radius=base.radius)
                     for o in mgn_study.HELDOUT_FLOWS]


def test_the_shipped_trajectories_are_the_study_s_and_check_out() -> None:
    index = pinned.read_index()
    assert sorted(index["trajectories"]) == sorted(pinned.file_name(f) for f in study_flows())
    mesh = cylinder_mesh(Flow().centre, Flow().radius)
    for flow in study_flows():
        found = pinned.pinned_trajectory(flow)
        assert found is not None
        data, digest = found
        assert digest == sha256(pinned.PINNED / pinned.file_name(flow))
        assert np.array_equal(data["mesh_pos"], mesh.pos)
        assert data["velocity"].shape == (flow.frames, len(mesh.pos), 2)
        assert np.isfinite(data["velocity"]).all()
        assert np.abs(data["velocity"]).max() > 0.5


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("pinned")
    cache = root / "cache"
    pinned.pin((TINY, *HELD), root / "pins", cache)
    return root / "pins", cache


def _copy(pins: Path, target: Path) -> Path:
    target.mkdir()
    for path in pins.iterdir():
        (target / path.name).write_bytes(path.read_bytes())
    return target


def test_pin_writes_an_index_that_lookup_reads(folder: tuple[Path, Path]) -> None:
    pins, _ = folder
    index = json.loads((pins / pinned.INDEX).read_text())
    assert set(index["solver"]) == {"phiflow", "phiml"}
    entry = index["trajectories"][pinned.file_name(TINY)]
    assert entry["sha256"] == sha256(pins / pinned.file_name(TINY))
    found = pinned.pinned_trajectory(TINY, pins)
    assert found is not None
    assert found[0]["velocity"].shape[0] == TINY.frames
    assert pinned.pinned_trajectory(replace(TINY, inflow=0.5), pins) is None


def test_the_study_reads_the_pinned_trajectory_and_keys_training_by_the_flow(
        folder: tuple[Path, Path], tmp_path: Path) -> None:
    pins, _ = folder
    # an empty cache: reading the pinned files must not simulate
    _data, others, key, origin, provenance = mgn_study._sources(
        TINY, HELD, None, tmp_path / "empty", False, pins)
    assert not (tmp_path / "empty").exists()
    assert json.loads(key) == json.loads(json.dumps(TINY.__dict__))
    assert provenance["train"]["pinned"] == pinned.file_name(TINY)
    assert provenance["inflow0.8"]["sha256"] == sha256(pins / pinned.file_name(
        replace(HELD[0], centre=TINY.centre, radius=TINY.radius)))
    assert "pinned" in origin
    assert list(others) == ["inflow0.8"]


def test_resimulating_records_the_comparison_and_keys_training_by_the_data(
        folder: tuple[Path, Path], tmp_path: Path) -> None:
    pins, cache = folder
    _, _, key, origin, provenance = mgn_study._sources(TINY, HELD, None, cache, True, pins)
    assert provenance["train"]["against_pinned"]["identical"] is True
    assert json.loads(key)["data"] == provenance["train"]["data_sha256"]
    assert "simulated in this run" in origin
    # a pinned file with other values (index updated, so it checks out): not identical
    moved = _copy(pins, tmp_path / "moved")
    name = pinned.file_name(TINY)
    data = pinned.pinned_trajectory(TINY, pins)[0]  # type: ignore[index]
    write_npz(moved / name, {**data, "velocity": data["velocity"] + 0.25})
    index = json.loads((moved / pinned.INDEX).read_text())
    index["trajectories"][name]["sha256"] = sha256(moved / name)
    (moved / pinned.INDEX).write_text(json.dumps(index))
    _, _, _, _, provenance = mgn_study._sources(TINY, HELD, None, cache, True, moved)
    compared = provenance["train"]["against_pinned"]
    assert compared["identical"] is False
    assert compared["max_abs_difference"]["velocity"] == pytest.approx(0.25)
    assert compared["max_abs_difference"]["mesh_pos"] == 0.0


def test_a_damaged_pinned_file_is_an_error_naming_it(folder: tuple[Path, Path],
                                                      tmp_path: Path) -> None:
    pins = _copy(folder[0], tmp_path / "pins")
    path = pins / pinned.file_name(TINY)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 1
    path.write_bytes(bytes(raw))
    with pytest.raises(KitError, match=f"{path.name}: sha256 .* differs"):
        pinned.pinned_trajectory(TINY, pins)
    path.unlink()
    with pytest.raises(KitError, match="missing"):
        pinned.pinned_trajectory(TINY, pins)


def test_a_bad_index_is_an_error_naming_it(folder: tuple[Path, Path], tmp_path: Path) -> None:
    pins = _copy(folder[0], tmp_path / "pins")
    index = json.loads((pins / pinned.INDEX).read_text())
    index["trajectories"][pinned.file_name(TINY)]["flow"]["inflow"] = 2.0
    (pins / pinned.INDEX).write_text(json.dumps(index))
    with pytest.raises(KitError, match="is for flow"):
        pinned.pinned_trajectory(TINY, pins)
    (pins / pinned.INDEX).write_text("{not json")
    with pytest.raises(KitError, match=f"{pinned.INDEX}: not valid JSON"):
        pinned.pinned_trajectory(TINY, pins)
    (pins / pinned.INDEX).write_text('{"trajectories": {"a.npz": "no sha256"}}')
    with pytest.raises(KitError, match=f"{pinned.INDEX}: not a trajectory index"):
        pinned.pinned_trajectory(TINY, pins)
    (pins / pinned.INDEX).write_bytes(b'{"trajectories": {"\xff": {}}}')
    with pytest.raises(KitError, match=f"{pinned.INDEX}: not UTF-8 text"):
        pinned.pinned_trajectory(TINY, pins)


def test_every_pinned_file_is_hashed_against_the_index(folder: tuple[Path, Path],
                                                       tmp_path: Path) -> None:
    """``pinned_problems`` (run by verify) hashes each listed file, whether or not the
    study reads it, and refuses a trajectory file the index does not list."""
    assert pinned.pinned_problems() == []
    pins = _copy(folder[0], tmp_path / "pins")
    assert pinned.pinned_problems(pins) == []
    path = pins / pinned.file_name(HELD[0])
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 1
    path.write_bytes(bytes(raw))
    (pins / "cylinder-extra.npz").write_bytes(b"")
    index = pins / pinned.INDEX
    listed = json.loads(index.read_text())["trajectories"][path.name]["sha256"]
    assert pinned.pinned_problems(pins) == [
        f"{path}: sha256 {sha256(path)} differs from {index} ({listed}); restore it "
        "from git",
        f"{pins / 'cylinder-extra.npz'}: a trajectory file {index} does not list; remove it, "
        "or pin it with kit.sciml.pinned.pin"]
    path.unlink()
    assert f"{path}: listed in {index} but missing" in pinned.pinned_problems(pins)[0]
    index.write_text("[]")
    assert pinned.pinned_problems(pins) == [
        f"{index}: not a trajectory index (a 'trajectories' mapping of file name to its flow "
        "and sha256); restore it from git"]


def test_compare_reports_each_array() -> None:
    a = {"velocity": np.zeros((2, 3)), "pressure": np.ones(4)}
    same = pinned.compare(a, {k: v.copy() for k, v in a.items()})
    assert same == {"identical": True, "max_abs_difference": {"pressure": 0.0, "velocity": 0.0}}
    other = pinned.compare(a, {"velocity": np.zeros((3, 3)), "pressure": np.ones(4) * 1.5})
    assert other["identical"] is False
    assert other["max_abs_difference"] == {"pressure": 0.5, "velocity": None}
    with pytest.raises(KitError, match="differ from the pinned"):
        pinned.compare(a, {"velocity": np.zeros((2, 3))})
