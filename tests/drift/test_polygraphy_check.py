"""Polygraphy's comparison on the tiny run's fault matrix: its TPR and FPR are counts of
its own per-image verdicts, the calibrated detectors stand beside it, and the table is
never written into the run folder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kit.__main__ import main
from kit.drift.polygraphy_check import fault_matrix, polygraphy_fails
from kit.drift.stages.infer import output_path
from kit.runfolder import Run, check_manifest


def test_fault_matrix_counts_polygraphy_verdicts(tiny_run: tuple[Run, Path]) -> None:
    run, _ = tiny_run
    table = fault_matrix(run)
    faults = run.record("fault")["faults"]
    assert table["faults"] == len(faults)
    assert table["tpr"]["n"] == len(faults) * 10
    split = run.record("split")
    held = [i for i, row in enumerate(split["rows"]) if row["role"] == "heldout"]
    first = faults[0]
    ref = np.load(run.stage("infer") / output_path("ref", first["model"], "clean", "plain",
                                                   "orig"))["logits"][held]
    cand = np.load(run.stage("infer") / output_path("cand", first["model"], first["id"],
                                                    "plain", "orig"))["logits"][held]
    assert table["per_fault"][0]["alarms"] == int(polygraphy_fails(ref, cand).sum())
    assert set(table["calibrated_detectors"]) == {"direct", "metamorphic", "mixed", "maximum"}


def test_the_table_goes_outside_the_run(tiny_run: tuple[Run, Path], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    run, _ = tiny_run
    assert main(["polygraphy", "--run", str(run.root), "--out",
                 str(run.root / "poly.json")]) == 2
    assert "outside the run folder" in capsys.readouterr().err
    assert main(["polygraphy", "--run", str(run.root), "--out", str(tmp_path / "p.json")]) == 0
    assert json.loads((tmp_path / "p.json").read_bytes())["polygraphy"] == "0.53.6"
    assert check_manifest(run.root) == []
