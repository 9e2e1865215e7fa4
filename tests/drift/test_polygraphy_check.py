"""Polygraphy's comparison on the tiny run's fault matrix: its TPR and FPR are counts of
its own per-image verdicts, the calibrated detectors stand beside it, and the table is
never written into the run folder."""

from __future__ import annotations

import json
import subprocess
import sys
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
    assert main(["polygraphy", "--run", str(run.root), "--out", str(tmp_path / "p.json")]) == 0
    (tmp_path / "mine.json").write_text('{"notes": 1}')  # a file of the user's: kept
    assert main(["polygraphy", "--run", str(run.root), "--out",
                 str(tmp_path / "mine.json")]) == 2
    assert "mine.json: a file the kit did not write" in capsys.readouterr().err
    assert (tmp_path / "mine.json").read_text() == '{"notes": 1}'
    assert check_manifest(run.root) == []


def test_polygraphy_compares_numpy_arrays_without_importing_torch() -> None:
    """Polygraphy imports torch to ask whether each array is a tensor (1.6 s here); the
    kit hides torch while it compares numpy arrays, with the same verdicts, and leaves it
    importable afterwards (a fresh interpreter: this one may have torch already)."""
    code = ("import sys, numpy as np\n"
            "from kit.drift.polygraphy_check import polygraphy_fails\n"
            "a = np.zeros((4, 3), np.float32); b = a.copy(); b[1, 0] = 1e-3; b[3, 2] = 1e-7\n"
            "print(polygraphy_fails(a, b).tolist(), 'torch' in sys.modules,\n"
            "      any(type(f).__name__ == '_NoTorch' for f in sys.meta_path))\n"
            "import torch\n"
            "print(polygraphy_fails(a, b).tolist(), torch.is_tensor(torch.zeros(1)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    first, second = proc.stdout.splitlines()
    # rows 1 (1e-3 off) fails; row 3 (1e-7 off) is within Polygraphy's atol 1e-5
    assert first == "[False, True, False, False] False False"
    assert second == "[False, True, False, False] True"
