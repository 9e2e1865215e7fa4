"""The real-drift sweep end to end on two releases, two levels, two thread counts and the
tiny protocol's one-epoch ResNet-20: serial and on a real Dask LocalCluster (two worker
processes on loopback) give the same bytes; a rerun runs no job; bad selections are
refused before any job runs.

Also covers kit/drift/drift_measures.py (the measures, recomputed here from the outputs)
and kit/drift/sweep_report.py (the drift map and the alarm-rate table).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kit.__main__ import main
from kit.drift.drift_measures import QUANTILES
from kit.drift.sweep import output_path, run_sweep
from kit.errors import ConfigError
from kit.runfolder import hashed_files
from tests.conftest import tiny_protocol

RELEASES = ["1.20.1", "1.29.0"]
LEVELS = ["disable_all", "enable_all"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    tmp = tmp_path_factory.mktemp("sweep")
    protocol = tiny_protocol(tmp)
    options = {"drift_protocol": protocol, "releases": RELEASES, "levels": LEVELS,
               "threads": [1, 2], "backend": "venv"}
    run_sweep(tmp / "serial", workers=1, **options)
    run_sweep(tmp / "dask", workers=2, **options)
    return tmp / "serial", tmp / "dask", protocol


def evidence(root: Path) -> dict:
    return json.loads((root / "sweep" / "cells.json").read_bytes())


def test_dask_writes_the_serial_bytes(swept: tuple[Path, Path, Path]) -> None:
    serial, dask, _ = swept
    files = [p.relative_to(serial) for p in hashed_files(serial)]
    assert len([f for f in files if f.suffix == ".npz" and f.parts[0] == "sweep"]) == 64
    assert files == [p.relative_to(dask) for p in hashed_files(dask)]
    for name in files:
        assert (serial / name).read_bytes() == (dask / name).read_bytes(), name


def test_every_cell_model_and_export_has_a_row(swept: tuple[Path, Path, Path]) -> None:
    rows = evidence(swept[0])["rows"]
    cells = {(r["release"], r["level"], r["threads"], r["export"]) for r in rows}
    assert len(rows) == len(cells) == 2 * 2 * 2 * 2
    reference = next(r for r in rows if (r["release"], r["level"], r["threads"]) ==
                     ("1.20.1", "disable_all", 1) and r["export"] == "folded")
    assert reference["max_abs_logit"] == 0.0
    assert reference["first_moving_layer"] is None
    assert all(a["alarms"] == 0 for a in reference["alarms"].values())


def test_measures_match_the_outputs(swept: tuple[Path, Path, Path]) -> None:
    root = swept[0]
    data = evidence(root)
    split = json.loads((root / "split" / "split.json").read_bytes())
    held = [i for i, row in enumerate(split["rows"]) if row["role"] == "heldout"]
    conds = data["conditions"]

    def logits(cell: tuple[str, str, int], export: str, cond: str) -> np.ndarray:
        path = root / "sweep" / output_path(cell, "resnet20", export, "plain", cond)
        return np.load(path)["logits"][held].astype(np.float64)

    for row in data["rows"]:
        cell = (row["release"], row["level"], row["threads"])
        ref = ("1.20.1", "disable_all", 1)
        diffs = [logits(cell, row["export"], c) - logits(ref, row["export"], c) for c in conds]
        assert row["max_abs_logit"] == max(float(np.abs(d).max()) for d in diffs)
        norms = np.linalg.norm(diffs[0], axis=1)
        assert row["norm_quantiles"] == {str(q): float(np.quantile(norms, q)) for q in QUANTILES}
        thresholds = data["thresholds"][f"resnet20.{row['export']}"]
        assert row["alarms"]["direct"]["alarms"] == int((norms > thresholds["direct"]).sum())
        low, high = row["alarms"]["direct"]["interval"]
        assert 0.0 <= low <= high <= 1.0


def test_a_rerun_runs_no_job_and_keeps_the_bytes(swept: tuple[Path, Path, Path],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    serial, _, protocol = swept
    before = (serial / "sweep" / "cells.json").read_bytes()
    run_sweep(serial, drift_protocol=protocol, releases=RELEASES, levels=LEVELS,
              threads=[1, 2], backend="venv", workers=1)
    assert "sweep: 0 of 64 jobs to run" in capsys.readouterr().err
    assert (serial / "sweep" / "cells.json").read_bytes() == before


def test_unknown_release_is_refused_before_anything(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "--run", str(tmp_path / "run"), "--releases", "1.20.1", "1.29.0",
                 "1.99.0"]) == 2
    assert "release(s) 1.99.0 not in the sweep's releases" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_the_pair_releases_are_required(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="needs the reference and pair releases"):
        run_sweep(tmp_path / "run", releases=["1.20.1"])


def test_a_level_a_release_lacks_is_refused_before_any_job(
        swept: tuple[Path, Path, Path], tmp_path: Path) -> None:
    levels = json.loads((swept[0] / "sweep" / "levels.json").read_bytes())
    assert levels["1.29.0"]["levels"][0] == "disable_all"
    with pytest.raises(ConfigError, match="offers no graph optimisation level enable_turbo"):
        run_sweep(tmp_path / "run", drift_protocol=swept[2], releases=RELEASES,
                  levels=["disable_all", "enable_turbo"], backend="venv", workers=1)
    with pytest.raises(ConfigError, match=r"onnxruntime 1\.20\.1 offers no graph optimisation "
                       r"level enable_layout; it offers disable_all, enable_basic, "
                       r"enable_extended, enable_all \(kit/runtime/releases\.toml\)"):
        run_sweep(tmp_path / "run", drift_protocol=swept[2], releases=RELEASES,
                  levels=["enable_layout"], backend="venv", workers=1)
    assert not (tmp_path / "run").exists()  # refused before the digits models are trained


def test_polygraphy_judges_every_cell_on_its_own_outputs(
        swept: tuple[Path, Path, Path]) -> None:
    from kit.drift.polygraphy_check import polygraphy_fails

    root = swept[0]
    data = evidence(root)
    assert data["polygraphy"] == "0.53.6"
    split = json.loads((root / "split" / "split.json").read_bytes())
    held = [i for i, row in enumerate(split["rows"]) if row["role"] == "heldout"]

    def logits(cell: tuple[str, str, int], export: str) -> np.ndarray:
        path = root / "sweep" / output_path(cell, "resnet20", export, "plain", "orig")
        return np.load(path)["logits"][held]

    for row in data["rows"]:
        cell, export = (row["release"], row["level"], row["threads"]), row["export"]
        fails = polygraphy_fails(logits(("1.20.1", "disable_all", 1), export),
                                 logits(cell, export))
        assert row["polygraphy"] == {"alarms": int(fails.sum()), "n": data["heldout_images"],
                                     "rate": float(fails.mean())}
    reference = np.zeros((3, 4), np.float32)
    far = reference + np.array([[0], [2e-5], [1e-6]], np.float32)  # 1e-5 + 1e-5 * 0 bound
    assert polygraphy_fails(reference, far).tolist() == [False, True, False]


def test_cells_with_the_same_outputs_are_measured_once(
        swept: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from kit.drift import sweep
    from kit.drift.drift_measures import outputs_digest
    from kit.drift.protocol import load_protocol
    from kit.runfolder import Run

    root, _, protocol = swept
    data = evidence(root)
    run, drift = Run(root), load_protocol(protocol)
    split = run.record("split")
    held = [i for i, row in enumerate(split["rows"]) if row["role"] == "heldout"]
    cal = [i for i, row in enumerate(split["rows"]) if row["role"] == "calibration"]
    cells = [(r["release"], r["level"], r["threads"]) for r in data["rows"]
             if r["export"] == "folded"]
    digests = {outputs_digest(sweep._logits(run, cell, "resnet20", "folded",
                                            data["conditions"], held)) for cell in cells}
    calls = []
    measures = sweep._measures
    monkeypatch.setattr(sweep, "_measures", lambda *a: calls.append(1) or measures(*a))
    rows, _ = sweep._measure_block(run, sweep.load_sweep_protocol(), drift, cells,
                                   data["conditions"], held, cal, "resnet20", "folded")
    assert len(calls) == len(digests) < len(cells)  # 1 and 2 threads repeat bits here
    assert rows == [r for r in data["rows"] if r["export"] == "folded"]


def test_the_outputs_digest_sees_every_bit_name_and_dtype() -> None:
    from kit.drift.drift_measures import Logits, outputs_digest

    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    cell = Logits({"orig": base}, {"orig": {"sketch/0": base.copy()}})
    same = Logits({"orig": base.copy()}, {"orig": {"sketch/0": base.copy()}})
    assert outputs_digest(cell) == outputs_digest(same)
    flipped = base.copy()
    flipped.view(np.uint32)[1, 2] ^= 1
    for other in (Logits({"orig": flipped}, cell.sketches),
                  Logits(cell.logits, {"orig": {"sketch/0": flipped}}),
                  Logits(cell.logits, {"orig": {"sketch/1": base}}),
                  Logits({"rot": base}, {"rot": {"sketch/0": base}}),
                  Logits({"orig": base.astype(np.float64)}, cell.sketches),
                  Logits({"orig": base.reshape(4, 3)}, cell.sketches)):
        assert outputs_digest(other) != outputs_digest(cell)


def test_the_report_has_the_drift_map_and_the_alarm_table(
        swept: tuple[Path, Path, Path]) -> None:
    report = swept[0] / "report"
    assert (report / "drift-map.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = (report / "alarm-rates.csv").read_text().splitlines()
    assert lines[0] == ("release,level,threads,export," + ",".join(
        f"{d}: pooled; highest model [95%]" for d in ("metamorphic", "direct", "mixed",
                                                       "maximum")) + ",polygraphy")
    assert len(lines) == 1 + 2 * 2 * 2 * 2  # cells x exports
    assert "drift-map.png" in (report / "index.html").read_text()


@pytest.mark.parametrize("threads", [["1", "0"], ["1", "-1"], ["1", "1000000000"]])
def test_a_thread_count_out_of_bounds_is_refused_before_anything(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], threads: list[str]) -> None:
    assert main(["sweep", "--run", str(tmp_path / "run"), "--threads", *threads]) == 2
    assert f"intra-op thread counts must be 1 to 256, not {threads[1]}" in \
        capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_the_export_with_batchnorm_kept_from_the_shipped_weights_is_the_shipped_one(
        tmp_path: Path) -> None:
    """``sweep --models shipped`` exports each model with BatchNormalization kept from the
    shipped training weights (``claims/drift/weights/digits``): every model's graphs are
    the bytes the shipped sweep evidence's run manifest lists, so the sweep replays on them on
    any CPU; weights of other bytes are refused by name."""
    from kit.drift.protocol import load_protocol
    from kit.drift.stages.fetch import SHIPPED_DIGITS, SHIPPED_WEIGHTS, training_weights
    from kit.drift.sweep import export_unfolded
    from kit.errors import KitError
    from kit.files import sha256
    from kit.paths import ROOT
    from kit.runfolder import TRAINING_CACHE, Run

    run = Run(tmp_path / "run")
    shipped = json.loads((SHIPPED_DIGITS / "fetch" / "fetch.json").read_text())
    run.write_record("fetch", shipped)
    (run.root / TRAINING_CACHE).write_text(json.dumps({"models": {name: {
        "from": "shipped evidence"} for name in shipped["models"]}}))  # as fetch writes it
    graphs = export_unfolded(load_protocol(), run)
    listed = json.loads((ROOT / "claims" / "realdrift" / "evidence" / "digits" /
                         "run-manifest.json").read_text())["files"]
    assert sorted(graphs) == ["mobilenetv2_x0_5", "resnet20", "vgg11_bn"]
    for model in graphs.values():
        for name in model["unfolded"].values():
            assert sha256(run.root / name) == listed[name], name
    digest = shipped["models"]["resnet20"]["weights_sha256"]
    assert training_weights(run, "resnet20", {}, digest) == SHIPPED_WEIGHTS / "resnet20.pt"
    with pytest.raises(KitError, match=r"no training weights of resnet20 with the sha256 "
                                       r"its fetch record names \(0{64}\)"):
        training_weights(run, "resnet20", {"cache_key": "f" * 64}, "0" * 64)
