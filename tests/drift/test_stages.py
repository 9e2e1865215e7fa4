"""The drift stages end to end on a tiny real configuration, through the real runtimes:
digits, ResNet-20 trained for one epoch, a 20-image sample, short severity grids.

Also covers ``kit.drift.stages.fault``, ``kit.drift.stages.fetch``,
``kit.drift.stages.infer``, ``kit.drift.stages.pipeline``, ``kit.drift.stages.score``,
``kit.drift.stages.sensitivity`` (no test file of their own)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from kit.drift.protocol import PROTOCOL, write_small_protocol
from kit.drift.stages.fault import choose
from kit.drift.stages.infer import is_done, plan
from kit.drift.stages.pipeline import run_stage
from kit.drift.stages.score import load_tables
from kit.errors import KitError
from kit.files import load_npz
from kit.runfolder import Run, check_manifest


def digests(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_fetch_exports_plain_and_sketch_graphs(tiny_run: tuple[Run, Path]) -> None:
    run, _ = tiny_run
    fetched = run.record("fetch")
    assert fetched["substrate"] == "digits"
    assert fetched["images"] == 1797
    entry = fetched["models"]["resnet20"]
    assert entry["sketch_outputs"] == 21
    assert (run.root / entry["onnx"]).is_file()


def test_split_is_balanced_disjoint_and_has_every_condition(tiny_run: tuple[Run, Path]) -> None:
    run, _ = tiny_run
    split = run.record("split")
    assert split["counts"] == {"calibration": 10, "heldout": 10}
    roles = {r["role"]: set() for r in split["rows"]}
    for row in split["rows"]:
        roles[row["role"]].add(row["index"])
    assert not roles["calibration"] & roles["heldout"]
    assert sorted(split["conditions"]) == ["orig", "rot10-bicubic", "rot10-bilinear",
                                           "rot10-nearest", "rot20-bilinear", "rot5-bilinear"]
    grid = load_npz(run.stage("split") / "inputs" / "rot5-bilinear.npz")["input"]
    assert grid.shape == (10, 3, 32, 32)


def test_faults_are_chosen_from_calibration_and_recorded(tiny_run: tuple[Run, Path]) -> None:
    run, _ = tiny_run
    faults = run.record("fault")["faults"]
    assert len(faults) == 18  # 1 model x 3 layers x 3 families x 2 severities
    assert {f["layer_index"] for f in faults} == {0, 10, 20}
    for fault in faults:
        path = run.root / fault["onnx"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == fault["model_sha256"]
    evidence = json.loads((run.stage("fault") / "severity.json").read_text())["selection"]
    assert len(evidence) == 9
    assert all(len(e["median_direct_l2"]) == 3 for e in evidence)
    assert not (run.stage("fault") / "probe" / "models" / "resnet20").exists()


def test_infer_wrote_every_planned_output_and_is_resumable(tiny_run: tuple[Run, Path]) -> None:
    run, protocol_file = tiny_run
    protocol = yaml.safe_load(protocol_file.read_text())
    jobs = plan(protocol, run)
    hashes: dict[str, str] = {}
    assert all(is_done(run, job, hashes) for role in jobs.values() for job in role)
    assert len(jobs["candidate"]) == 19 * 2 * 6 + 19 * 2
    assert len(jobs["reference"]) == \
        2 * 6 + 18 * 2 + 19 * 2
    target = run.stage("infer") / jobs["candidate"][0]["output"]
    good = target.read_bytes()
    target.write_bytes(good[:-8] + b"\0" * 8)
    assert not is_done(run, jobs["candidate"][0], {})
    run_stage("infer", run_dir=run.root, protocol_file=protocol_file, backend="venv")
    assert target.read_bytes() == good
    assert check_manifest(run.root) == []


def test_infer_twice_gives_identical_bytes(tiny_run: tuple[Run, Path], tmp_path: Path) -> None:
    run, protocol_file = tiny_run
    first = digests(run.stage("infer"))
    import shutil

    shutil.rmtree(run.stage("infer"))
    run_stage("infer", run_dir=run.root, protocol_file=protocol_file, backend="venv")
    assert digests(run.stage("infer")) == first


def test_the_clean_pair_differs_only_slightly_and_faults_move_the_candidate(
        tiny_run: tuple[Run, Path]) -> None:
    run, _ = tiny_run
    infer = run.stage("infer")
    ref = load_npz(infer / "ref/resnet20/clean/plain-orig.npz")["logits"]
    cand = load_npz(infer / "cand/resnet20/clean/plain-orig.npz")["logits"]
    ref_on = load_npz(infer / "ref-on/resnet20/clean/plain-orig.npz")["logits"]
    assert 0 < np.abs(cand - ref).max() < 1e-3
    np.testing.assert_array_equal(ref_on, cand)  # version alone changes nothing (BN folded)
    high = load_npz(infer / "cand/resnet20/resnet20-late-scale-high/plain-orig.npz")["logits"]
    assert np.abs(high - ref).max() > np.abs(cand - ref).max()


def test_score_tables_match_the_raw_outputs(tiny_run: tuple[Run, Path]) -> None:
    run, _ = tiny_run
    record = run.record("score")
    assert len(record["tables"]) == 8  # cand on 5 rotations, 3 factor cells
    tables = load_tables(run, record)
    primary = tables["cand-rot10-bilinear"]
    assert len(primary["model"]) == 20 + 18 * 10  # clean on all images, faults on held-out
    infer = run.stage("infer")
    ref = load_npz(infer / "ref/resnet20/clean/plain-orig.npz")["logits"].astype(np.float64)
    fid = run.record("fault")["faults"][5]["id"]
    cand = load_npz(infer / f"cand/resnet20/{fid}/plain-orig.npz")["logits"].astype(np.float64)
    rows = np.flatnonzero(primary["fault"] == 5)
    samples = primary["sample"][rows]
    np.testing.assert_allclose(primary["e_o_norm"][rows],
                               np.linalg.norm(cand[samples] - ref[samples], axis=1), rtol=0)
    summary = json.loads((run.root / "score/summary.json").read_text())
    assert summary["localisation_recomputed_equal"] is True
    grid = tables["cand-rot20-bilinear"]
    assert set(grid["sample"].tolist()) == set(run.record("split")["reduced_positions"])


def test_bootstrap_sensitivity_and_report_outputs(tiny_run: tuple[Run, Path]) -> None:
    run, _ = tiny_run
    boot = json.loads((run.root / "bootstrap/summary.json").read_text())
    assert boot["nested"]["replicates"] == 5000
    assert boot["fixed"]["replicates"] == 500
    nested = boot["nested"]["differences"]["metamorphic-direct/tpr"]
    fixed = boot["fixed"]["differences"]["metamorphic-direct/tpr"]
    assert nested["sd"] > 0
    assert fixed["sd"] > 0
    sens = json.loads((run.root / "sensitivity/summary.json").read_text())
    assert set(sens) == {"primary", "primary-reduced", "rot5-bilinear", "rot20-bilinear",
                         "rot10-nearest", "rot10-bicubic"}
    assert sens["rot5-bilinear"]["metamorphic"]["tpr"]["n"] == 18 * 5
    report = run.root / "report"
    for name in ("table1", "table2", "table3", "table4"):
        assert (report / f"{name}.md").read_text().startswith("| ")
        assert (report / f"{name}.csv").is_file()
    assert len(list(report.glob("figure*.png"))) == 4
    assert "wall time infer" in (report / "index.html").read_text()
    listed = json.loads((run.root / "manifest.json").read_text())["files"]
    assert "timings.json" not in listed
    assert not any(n.startswith("report/") for n in listed)
    assert "score/cases/cand-rot10-bilinear.npz" in listed


def test_manifest_catches_tampering(tiny_run: tuple[Run, Path]) -> None:
    run, _ = tiny_run
    extra = run.root / "stray.txt"
    extra.write_text("x")
    try:
        assert check_manifest(run.root) == [f"{extra}: present but not listed"]
    finally:
        extra.unlink()


def test_choose_rule() -> None:
    assert choose([0.1, 0.2, 5.0, 9.0], limit=1.0, step=1) == (2, 3, "first severity above "
                                                                     "the threshold")
    assert choose([0.1, 0.2, 0.3], 1.0, 1)[:2] == (1, 2)
    assert choose([0.1, 0.2, 3.0], 1.0, 1)[:2] == (1, 2)


def test_stage_before_fetch_is_refused(tmp_path: Path) -> None:
    with pytest.raises(KitError, match="stage 'fetch' has not run"):
        run_stage("split", run_dir=tmp_path / "empty", protocol_file=PROTOCOL)


def test_cifar100_fetch_from_a_mirror_of_small_files(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The real cifar100 path (mirror, hash pins, restricted unpickler, strict state_dict
    load, export) on a 100-image archive and random state_dicts the test writes, pinned by
    a pins file (``--asset-pins``)."""
    from kit.drift.assets import load_pins
    from kit.drift.stages import fetch as fetch_stage
    from tests.cifar_synth import FILE_NAMES, write_assets

    mirror = tmp_path / "mirror"
    pins = write_assets(mirror, per_class=1, models=("resnet20", "vgg11_bn"))
    sha = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()  # noqa: E731
    monkeypatch.setenv("KIT_CACHE", str(tmp_path / "cache"))
    protocol = yaml.safe_load(PROTOCOL.read_text())
    protocol["models"] = ["resnet20", "vgg11_bn"]
    record = fetch_stage.run_fetch(protocol, Run(tmp_path / "run"), "cifar100", mirror, pins)
    assert record["classes"] == 100
    assert record["images"] == 100
    assert record["models"]["vgg11_bn"]["sketch_outputs"] == 8
    assert record["models"]["resnet20"]["source"]["sha256"] == sha(
        mirror / FILE_NAMES["resnet20"])
    assert check_manifest(tmp_path / "run") == []

    vgg = FILE_NAMES["vgg11_bn"]
    (mirror / vgg).write_bytes(b"tampered")
    (load_pins(pins).store(tmp_path / "cache" / "assets") / vgg).unlink()
    with pytest.raises(KitError, match=rf"mirror/{vgg.replace('.', '[.]')}: sha256 .* does not "
                                       "match the pin"):
        fetch_stage.run_fetch(protocol, Run(tmp_path / "run2"), "cifar100", mirror, pins)


def test_fetch_record_is_identical_when_training_comes_from_the_cache(
        tiny_run: tuple[Run, Path]) -> None:
    run, protocol_file = tiny_run
    before = (run.stage("fetch") / "fetch.json").read_bytes()
    models = digests(run.stage("fetch") / "models")
    run_stage("fetch", run_dir=run.root, protocol_file=protocol_file)  # cached training
    assert (run.stage("fetch") / "fetch.json").read_bytes() == before
    assert digests(run.stage("fetch") / "models") == models


@pytest.mark.parametrize("command", [["stage", "split"], ["reproduce"],
                                     ["verify", "--replay", "--small"]])
def test_a_run_folder_that_is_a_file_is_refused_at_the_boundary(
        command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kit.__main__ import main

    path = tmp_path / "not-a-folder"
    path.write_text("x")
    assert main([*command, "--run", str(path)]) == 2
    assert capsys.readouterr().err == (f"kit: error: {path}: is a file, not a run folder; "
                                       "pass --run a folder (it is made when missing)\n")
    assert main([*command, "--run", str(path / "run")]) == 2
    assert f"{path / 'run'}: lies under {path}, a file" in capsys.readouterr().err
    assert path.read_text() == "x"


@pytest.mark.parametrize(("damage", "what"), [
    (b'{"substrate": "dig', "not valid JSON (Unterminated string"),
    (b"\xff\xfe{}", "not UTF-8 text (byte 0xff at offset 0, line 1)"),
    (b"[1, 2]", "not a JSON object")])
def test_a_damaged_stage_record_names_the_file_and_the_fix(
        damage: bytes, what: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kit.__main__ import main
    from tests.conftest import tiny_protocol

    root = tmp_path / "run"
    record = root / "fetch" / "fetch.json"
    record.parent.mkdir(parents=True)
    record.write_bytes(damage)
    (root / ".lock").touch()  # a run folder the kit made
    assert main(["stage", "split", "--run", str(root), "--protocol",
                 str(tiny_protocol(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kit: error: {record}: {what}")
    assert err.endswith(f"; delete the stage folder {root / 'fetch'} and rerun the stage "
                        f"(python -m kit stage fetch --run {root}, with the run's "
                        "--protocol)\n")


def test_a_stage_that_fails_leaves_no_record_of_an_earlier_finish(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stage's record marks a finished stage: it goes when the stage starts, so a stage
    killed or failing half way is not taken for finished by a later stage or a replay."""
    from kit.drift.stages import pipeline
    from tests.conftest import tiny_protocol

    protocol = tiny_protocol(tmp_path)
    run = Run(tmp_path / "run")
    run.stage("fetch").mkdir(parents=True)
    (run.stage("fetch") / "fetch.json").write_text(json.dumps(fetch_record()))
    (run.stage("split")).mkdir()
    (run.stage("split") / "split.json").write_text('{"rows": []}')
    (run.root / ".lock").touch()  # a run folder the kit made

    def half_way(protocol: dict[str, object], run: Run) -> dict[str, object]:
        raise KitError("killed half way")

    monkeypatch.setattr(pipeline, "run_split", half_way)
    with pytest.raises(KitError, match="killed half way"):
        run_stage("split", run_dir=run.root, protocol_file=protocol)
    assert not (run.stage("split") / "split.json").exists()
    assert (run.stage("fetch") / "fetch.json").is_file()
    with pytest.raises(KitError, match="stage 'split' has not run"):
        run_stage("fault", run_dir=run.root, protocol_file=protocol)
    assert not pipeline.finished(run)


def test_the_lock_and_the_run_state_stay_outside_the_manifest(
        tiny_run: tuple[Run, Path]) -> None:
    run, _ = tiny_run
    from kit.drift.stages.pipeline import finished

    listed = json.loads((run.root / "manifest.json").read_text())["files"]
    assert (run.root / ".lock").is_file()
    assert (run.root / ".lock").read_text() == ""  # no holder now
    assert set(json.loads((run.root / "run.json").read_text())) == {"protocol_sha256"}
    assert ".lock" not in listed
    assert "run.json" not in listed
    assert finished(run)


def test_a_damaged_result_array_of_an_earlier_stage_names_the_file(
        tiny_run: tuple[Run, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A stage reads the arrays earlier stages wrote through kit.files: a damaged one is
    ``kit: error: FILE: not a readable .npz archive``, exit 2, not the worker's JobError."""
    import shutil

    from kit.__main__ import main

    run, protocol = tiny_run
    root = tmp_path / "run"
    shutil.copytree(run.root, root)
    damaged = root / "split" / "inputs" / "orig.npz"
    damaged.write_bytes(damaged.read_bytes()[:200])
    assert main(["stage", "fault", "--run", str(root), "--protocol", str(protocol),
                 "--backend", "venv"]) == 2
    assert capsys.readouterr().err.startswith(
        f"kit: error: {damaged}: not a readable .npz archive")


def test_no_hash_of_the_kit_s_code_is_in_the_hashed_fetch_record(
        tiny_run: tuple[Run, Path]) -> None:
    """The training-cache key hashes kit/drift/train.py and kit/drift/models.py: it lives in the
    unhashed training-cache.json, so moving or editing code leaves the evidence unchanged."""
    from kit.runfolder import TRAINING_CACHE

    run, _ = tiny_run
    fetch = run.record("fetch")
    cache = json.loads((run.root / TRAINING_CACHE).read_text())["models"]
    assert sorted(cache) == sorted(fetch["models"])
    for name, model in fetch["models"].items():
        assert "cache_key" not in model["source"]
        assert len(cache[name]["cache_key"]) == 64
        assert cache[name]["cached"] in (True, False)
    assert TRAINING_CACHE not in json.loads((run.root / "manifest.json").read_text())["files"]



def _fetched_run(root: Path) -> Run:
    """A run folder holding only what the split stage reads of fetch: 60 digits-sized
    images (six per class) and the normalisation."""
    from kit.files import write_npz

    rng = np.random.default_rng(0)
    run = Run(root)
    write_npz(run.stage("fetch") / "dataset.npz",
              {"images": rng.integers(1, 255, (60, 32, 32, 3), dtype=np.uint8),
               "labels": np.arange(60, dtype=np.int64) % 10})
    run.write_record("fetch", fetch_record())
    return run


def fetch_record() -> dict[str, object]:
    """A fetch record as later stages check it (``fetch_record.schema.json``): the
    substrate, the normalisation and one model."""
    return {"substrate": "digits", "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25],
            "models": {"resnet20": {"onnx": "models/resnet20.onnx", "onnx_sha256": "0" * 64,
                                    "sketch_onnx": "models/resnet20.sketch.onnx",
                                    "sketch_outputs": 21}}}


def test_the_protocol_s_rotation_fill_reaches_the_split_images(tmp_path: Path) -> None:
    """``rotation.fill`` changes the rotated conditions' corners (and nothing else)."""
    from kit.drift.stages.split import run_split

    protocol = yaml.safe_load(write_small_protocol(tmp_path / "p.yaml").read_text())
    corners = {}
    for fill in (0, 255):
        protocol["rotation"]["fill"] = fill
        run = _fetched_run(tmp_path / f"run{fill}")
        run_split(protocol, run)
        images = load_npz(run.stage("split") / "images" / "rot10-bilinear.npz")["images"]
        corners[fill] = images[:, 0, 0, 0]
        orig = load_npz(run.stage("split") / "images" / "orig.npz")["images"]
        assert orig.min() >= 1
    assert (corners[0] == 0).all()
    assert (corners[255] == 255).all()


def test_the_protocol_s_threads_reach_every_inference_job(tiny_run: tuple[Run, Path]) -> None:
    """``runtimes.intra_op_threads``/``inter_op_threads`` go into every infer job, and a
    finished job run with other counts is run again."""
    run, protocol_file = tiny_run
    protocol = yaml.safe_load(protocol_file.read_text())
    jobs = [job for role in plan(protocol, run).values() for job in role]
    assert {(j["intra_op_threads"], j["inter_op_threads"]) for j in jobs} == {(1, 1)}
    assert all(is_done(run, job, {}) for job in jobs)
    protocol["runtimes"].update(intra_op_threads=2, inter_op_threads=3)
    changed = [job for role in plan(protocol, run).values() for job in role]
    assert {(j["intra_op_threads"], j["inter_op_threads"]) for j in changed} == {(2, 3)}
    assert not any(is_done(run, job, {}) for job in changed)


def test_the_protocol_s_opset_reaches_the_exported_models(tiny_run: tuple[Run, Path],
                                                         tmp_path: Path) -> None:
    """``export.opset`` is the opset of the fetch stage's plain and sketch graphs."""
    import onnx

    from kit.drift.stages.fetch import run_fetch

    run, protocol_file = tiny_run
    plain = onnx.load(str(run.stage("fetch") / "models" / "resnet20.onnx"))
    assert [o.version for o in plain.opset_import if o.domain in ("", "ai.onnx")] == [17]
    protocol = yaml.safe_load(protocol_file.read_text())
    protocol["export"]["opset"] = 13
    run_fetch(protocol, Run(tmp_path / "run"), "digits")  # training from the cache
    for name in ("resnet20.onnx", "resnet20.sketch.onnx"):
        model = onnx.load(str(tmp_path / "run" / "fetch" / "models" / name))
        assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [13]
