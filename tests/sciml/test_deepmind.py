"""The cylinder_flow TFRecord loader, on small files the test writes.

Also covers ``kit.sciml.mgn_study``, ``kit.sciml.mgn_train`` (no test file of their
own)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kit.errors import KitError
from kit.sciml.deepmind import read_meta, trajectories, write_dataset

META = {"simulator": "test", "dt": 0.01, "trajectory_length": 3,
        "field_names": ["cells", "mesh_pos", "node_type", "velocity", "pressure"],
        "features": {
            "cells": {"type": "static", "shape": [1, -1, 3], "dtype": "int32"},
            "mesh_pos": {"type": "static", "shape": [1, -1, 2], "dtype": "float32"},
            "node_type": {"type": "static", "shape": [1, -1, 1], "dtype": "int32"},
            "velocity": {"type": "dynamic", "shape": [3, -1, 2], "dtype": "float32"},
            "pressure": {"type": "dynamic", "shape": [3, -1, 1], "dtype": "float32"}}}


def sample(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"cells": np.tile(np.array([[[0, 1, 2], [1, 2, 3]]]), (3, 1, 1)),
            "mesh_pos": np.tile(rng.normal(size=(1, 4, 2)), (3, 1, 1)),
            "node_type": np.tile(np.array([[[0], [4], [5], [6]]]), (3, 1, 1)),
            "velocity": rng.normal(size=(3, 4, 2)), "pressure": rng.normal(size=(3, 4, 1))}


def test_round_trip_of_two_trajectories(tmp_path: Path) -> None:
    written = [sample(0), sample(1)]
    write_dataset(tmp_path, "valid", written, META)
    found = list(trajectories(tmp_path, "valid"))
    assert len(found) == 2
    for got, want in zip(found, written, strict=True):
        for name in META["field_names"]:
            np.testing.assert_array_equal(got[name], want[name].astype(got[name].dtype))
        assert got["velocity"].shape == (3, 4, 2)
        assert got["cells"].dtype == np.int32


def test_bad_inputs_name_the_file(tmp_path: Path) -> None:
    write_dataset(tmp_path, "train", [sample(0)], META)
    with pytest.raises(KitError, match="no such split"):
        list(trajectories(tmp_path, "test"))
    record = tmp_path / "train.tfrecord"
    data = bytearray(record.read_bytes())
    data[40] ^= 0xFF
    record.write_bytes(bytes(data))
    with pytest.raises(KitError, match=r"train\.tfrecord: record 0: payload CRC mismatch"):
        list(trajectories(tmp_path, "train"))
    (tmp_path / "meta.json").write_text("{}")
    with pytest.raises(KitError, match="missing 'field_names'"):
        read_meta(tmp_path)
    (tmp_path / "meta.json").write_bytes(b'{"field_names": "\xff"}')
    with pytest.raises(KitError, match=r"meta\.json: cannot read the dataset description.*utf-8"):
        read_meta(tmp_path)


def test_a_wrong_frame_count_is_refused(tmp_path: Path) -> None:
    meta = {**META, "trajectory_length": 4}
    write_dataset(tmp_path, "train", [sample(0)], {**META})
    (tmp_path / "meta.json").write_text(__import__("json").dumps(meta))
    with pytest.raises(KitError, match="frames"):
        list(trajectories(tmp_path, "train"))


def _as_records(data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    frames = len(data["velocity"])
    return {"cells": np.tile(data["cells"][None], (frames, 1, 1)),
            "mesh_pos": np.tile(data["mesh_pos"][None], (frames, 1, 1)),
            "node_type": np.tile(data["node_type"].reshape(1, -1, 1), (frames, 1, 1)),
            "velocity": data["velocity"]}


def test_the_mgn_study_reads_a_deepmind_folder(tmp_path: Path) -> None:
    from kit.sciml.cards import load_cards
    from kit.sciml.cylinder import Flow, trajectory
    from kit.sciml.deepmind import study_trajectory
    from kit.sciml.ledger import Ledger
    from kit.sciml.mgn_study import run_mgn
    from kit.sciml.mgn_train import Subject
    from kit.sciml.second_task import Airfoil

    cache = tmp_path / "cache"
    tiny = Flow(nx=32, ny=16, spinup=2, frames=3, stride=1)
    train = trajectory(tiny, cache)
    valid = trajectory(Flow(inflow=0.8, nx=32, ny=16, spinup=2, frames=3, stride=1,
                            centre=(0.5, 0.2)), cache)     # another cylinder, another mesh
    assert len(valid["mesh_pos"]) != len(train["mesh_pos"])
    meta = {"trajectory_length": 3, "field_names": ["cells", "mesh_pos", "node_type", "velocity"],
            "features": {k: v for k, v in META["features"].items() if k != "pressure"}}
    folder = tmp_path / "cylinder_flow"
    write_dataset(folder, "train", [_as_records(train)], meta)
    write_dataset(folder, "valid", [_as_records(valid)], meta)
    read = study_trajectory(folder, "valid", 0, 2)
    assert np.allclose(read["velocity"], valid["velocity"][:2], atol=1e-6)
    with pytest.raises(KitError, match=r"valid\.tfrecord: record 0 has 3 frames"):
        study_trajectory(folder, "valid", 0, 4)
    with pytest.raises(KitError, match="no record 1"):
        study_trajectory(folder, "valid", 1, 2)

    ledger = Ledger("test")
    records = run_mgn(ledger, load_cards(), roster=1, permutation_seeds=2, flow=tiny,
                      base=Subject(0, latent=8, steps=1, train_steps=2), cache=cache,
                      airfoil=Airfoil(max_area=2e-3, segments=80),
                      heldout_flows=(Flow(frames=2),), pointmlp=0, source=folder)
    mgn = records["mgn.json"]
    assert mgn["source"].startswith("DeepMind cylinder_flow")
    assert {r["trajectory"] for r in mgn["subjects"][0]["cases"]} == {"train", "valid0"}
    assert mgn["heldout_meshes"]["valid0"]["nodes"] == len(valid["mesh_pos"])
    held = [r for r in mgn["subjects"][0]["cases"] if r["trajectory"] == "valid0"]
    assert len(held) == 1
    assert np.isfinite(held[0]["continuity_ratio"])
