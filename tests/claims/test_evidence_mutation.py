"""Mutation at the evidence level: shipped evidence edited the way the opposite finding
would look, every hash below the root updated consistently, and verify run on it.

The guard in ``test_claims`` mutates the recomputed value; a rule that follows from how
the kit selected its own data passes that guard. Here the raw evidence itself changes
(scores swapped between detectors, a count changed, a ratio moved just past its
threshold while the record still flags it detected, a case's deviation moved inside the
clean band), every integrity check still passes, and each kind of decisive rule must
change its status.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kit.claims.coverage import write_manifests
from kit.claims.verify import verify
from kit.drift.analysis import CLEAN, HELDOUT
from kit.drift.recount import SUMMARY, recounted
from kit.drift.shipped import Evidence
from kit.drift.ties import score_summary_of
from kit.files import canonical_json, load_npz, sha256, write_npz
from kit.paths import ROOT

DRIFT = "claims/drift/evidence/digits"
SCIML = "claims/sciml/evidence/kit"
COPIED = ("claims", "manifests", "locks")
FAULT_MATRIX = "claims/realdrift/evidence/digits/sweep/polygraphy/fault-matrix.json"


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shipped")
    for name in COPIED:
        shutil.copytree(ROOT / name, root / name)
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def _write_json(path: Path, data: Any) -> None:
    path.write_text(canonical_json(data).decode())


def rehash(root: Path, folder: Path) -> None:
    """Update every hash below the root after an edit in one evidence folder: the score
    record's table, layer and summary entries, the run manifest, the replay record's
    manifest sha256 and the sha256 manifests."""
    record_path = folder / "score" / "score.json"
    if record_path.is_file():
        record = json.loads(record_path.read_text())
        entries = [*record["tables"].values(),
                   *(record[k] for k in ("layers", "clean_logits", "summary"))]
        for entry in entries:
            entry["sha256"] = sha256(folder / entry["path"])
        _write_json(record_path, record)
    manifest_path = folder / "run-manifest.json"
    if manifest_path.is_file():
        manifest = json.loads(manifest_path.read_text())
        manifest["files"] = {name: sha256(folder / name) if (folder / name).is_file()
                             else digest for name, digest in manifest["files"].items()}
        _write_json(manifest_path, manifest)
        replay = folder / "replay.json"
        if replay.is_file():
            data = json.loads(replay.read_text())
            data["first_manifest_sha256"] = sha256(manifest_path)
            _write_json(replay, data)
    write_manifests(root)


def verified(root: Path, tmp_path: Path) -> dict[tuple[str, str], str]:
    """verify on ``root``: every integrity check must pass; status per (claim, substrate)."""
    out = tmp_path / "verify.json"
    verify(root, json_out=out)
    report = json.loads(out.read_text())
    assert report["problems"] == []
    return {(c["claim"], c["substrate"]): c["status"] for c in report["claims"]}


def _edit_primary_table(root: Path, edit: Callable[[dict[str, np.ndarray]], None]) -> None:
    folder = root / DRIFT
    path = folder / "score/cases/cand-rot10-bilinear.npz"
    table = load_npz(path)
    edit(table)
    write_npz(path, table)
    rehash(root, folder)
    # a consistent forgery: the stored bootstrap, score and rotation-grid summaries follow
    # the edited table (verify recounts them all)
    summary = json.loads((folder / SUMMARY).read_text())
    for which, fields in recounted(Evidence(folder)).items():
        summary[which].update(json.loads(canonical_json(fields)))
    _write_json(folder / SUMMARY, summary)
    forged = Evidence(folder)
    _write_json(folder / "score/summary.json",
                json.loads(canonical_json(score_summary_of(forged))))
    _write_json(folder / "sensitivity/summary.json",
                json.loads(canonical_json(forged.sensitivity)))
    rehash(root, folder)
    _follow_fault_matrix(root)


def _follow_fault_matrix(root: Path) -> None:
    """A consistent forgery: Polygraphy's fault-matrix record (the sweep's, computed on the
    drift run) follows the edited drift evidence, as its recount checks."""
    from kit.drift import analysis
    from kit.drift.detectors import DETECTORS

    path = root / FAULT_MATRIX
    matrix = json.loads(path.read_text())
    ev = Evidence(root / DRIFT)
    ids = {f["id"] for f in ev.json("fault/fault.json")["faults"]}
    matrix["per_fault"] = [r for r in matrix["per_fault"] if r["fault"] in ids]
    alarms, n = (sum(r[k] for r in matrix["per_fault"]) for k in ("alarms", "n"))
    matrix.update(faults=len(matrix["per_fault"]), tpr={"alarms": alarms, "n": n,
                                                        "rate": alarms / n})
    table = ev.table()
    matrix["calibrated_detectors"] = {d: analysis.detection(table, d, analysis.thresholds(
        table, d, ev.quantile)) for d in DETECTORS}
    _write_json(path, matrix)
    rehash(root, root / "claims/realdrift/evidence/digits")


def _swap_scores(table: dict[str, np.ndarray]) -> None:
    """Direct L2 and metamorphic contrast scores exchanged on every case: the paper's
    finding (metamorphic contrast detects less) turned around."""
    table["metamorphic"], table["e_o_norm"] = table["e_o_norm"].copy(), \
        table["metamorphic"].copy()


def _flag_clean_heldout(table: dict[str, np.ndarray]) -> None:
    """Every clean held-out case scored far above any calibration score: the clean
    false-alarm count the paper bounds becomes every clean case."""
    clean_held = (table["fault"] == CLEAN) & (table["role"] == HELDOUT)
    assert clean_held.sum() == 900
    table["metamorphic"] = np.where(clean_held, 1e6, table["metamorphic"])


@pytest.fixture
def copy(repository: Path, tmp_path: Path) -> Path:
    target = tmp_path / "repo"
    shutil.copytree(repository, target)
    return target


def test_the_shipped_copy_verifies_with_its_statuses(copy: Path, tmp_path: Path) -> None:
    statuses = verified(copy, tmp_path)
    assert statuses[("A-071", "digits")] == "direction reproduced"  # the controls fail it
    assert statuses[("A-114", "digits")] == "direction reproduced"  # they pass it, less
    assert statuses[("A-061", "digits")] == "by design"  # the controls pass it too
    assert statuses[("A-029", "digits")] == "by design"


def test_swapped_scores_reverse_every_comparison_and_sign(copy: Path, tmp_path: Path
                                                          ) -> None:
    """compare (a measured quantity against another), sign, true (per model), and a value
    rule (the share of negative replicates) each change."""
    _edit_primary_table(copy, _swap_scores)
    statuses = verified(copy, tmp_path)
    assert statuses[("A-114", "digits")] == "direction reversed"  # compare: TPR below
    assert statuses[("A-118", "digits")] == "direction reversed"  # compare: TPR above
    assert statuses[("A-052", "digits")] == "direction reversed"  # sign: negative
    assert statuses[("A-071", "digits")] == "direction reversed"  # true: on every model
    assert statuses[("A-060", "digits")] == "differs"  # value: every replicate negative


def test_clean_cases_flagged_break_the_false_alarm_bound(copy: Path, tmp_path: Path) -> None:
    """compare against a constant: at most 27 clean held-out alarms."""
    _edit_primary_table(copy, _flag_clean_heldout)
    statuses = verified(copy, tmp_path)
    assert statuses[("A-050", "digits")] == "direction reversed"


def test_a_changed_design_count_differs(copy: Path, tmp_path: Path) -> None:
    """A by-design count that does not match the paper's design is a misbuilt kit."""
    folder = copy / DRIFT
    record = json.loads((folder / "fault/fault.json").read_text())
    record["faults"] = record["faults"][:-1]
    record["count"] = len(record["faults"])  # a consistent forgery: verify recounts it
    _write_json(folder / "fault/fault.json", record)
    rehash(copy, folder)
    _follow_fault_matrix(copy)
    statuses = verified(copy, tmp_path)
    assert statuses[("A-029", "digits")] == "differs"


def test_a_ratio_moved_past_its_threshold_fails_or_changes_b061(
        copy: Path, tmp_path: Path) -> None:
    """BC_nonzero_wall's ratio moved just under the paper's 1.5. Left flagged detected, the
    record contradicts itself and the recount fails verify naming the trial; with its flag,
    summaries and precision/recall all made to follow (the kit's own recount), the rule
    over the paper's named faults sees the fault missed and B-061 reverses."""
    from kit.claims.verify import verify as run
    from kit.sciml import mgn_faults as mf

    # the untrained null subjects pass this rule too, so it reads by design (kit.claims.null)
    assert verified(copy, tmp_path)[("B-061", "kit")] == "by design"
    folder = copy / SCIML
    record = json.loads((folder / "mgn_faults.json").read_text())
    mutant = record["mutants"]["BC_nonzero_wall"]
    [trial] = [t for t in mutant["trials"] if t["subject"] == 0 and t["seed"] == 0]
    assert any(trial["detected"].values())
    trial["conservation"] = 1.49
    _write_json(folder / "mgn_faults.json", record)
    rehash(copy, folder)
    out = tmp_path / "contradiction.json"
    assert run(copy, json_out=out) == 1
    assert "mutants/BC_nonzero_wall/trials/0/detected" in json.loads(out.read_text())[
        "problems"][0]
    trial["detected"]["conservation"] = False
    mutant["summary"] = mf.summarise(mutant["trials"])
    mutant["by_configuration"] = {
        name: mf.summarise([t for t in mutant["trials"] if (t["subject"] < 4) == (name == "seeds")])
        for name in mutant["by_configuration"]}
    record["precision_recall"] = mf.precision_recall(record["mutants"],
                                                     record["control"]["trials"])
    _write_json(folder / "mgn_faults.json", record)
    from kit.sciml import probes  # the catalogue's copies of the mutants follow too

    unified = json.loads((folder / "unified.json").read_text())
    probed = [e for e in unified["entries"] if e["family"] != "mgn"]
    again = probes.unified_catalogue(record, [e for e in probed if e["family"] == "pinn"],
                                     [e for e in probed if e["family"] == "fno"])
    unified.update({k: v for k, v in again.items() if k != "thresholds"})
    _write_json(folder / "unified.json", unified)
    rehash(copy, folder)
    assert verified(copy, tmp_path)[("B-061", "kit")] == "direction reversed"


def test_a_bootstrap_summary_edited_alone_fails_verify_naming_the_field(
        copy: Path, tmp_path: Path) -> None:
    """Recount, never read: the stored summary contradicts the table it summarises."""
    folder = copy / DRIFT
    summary = json.loads((folder / SUMMARY).read_text())
    summary["nested"]["rates"]["direct/tpr"]["mean"] = 99.0
    _write_json(folder / SUMMARY, summary)
    rehash(copy, folder)
    out = tmp_path / "verify.json"
    assert verify(copy, json_out=out) == 1
    [problem] = json.loads(out.read_text())["problems"]
    assert problem.startswith(f"{folder / SUMMARY}: /nested/rates/direct/tpr/mean says 99.0, "
                              "its replicates give ")



def test_a_fault_matrix_summary_edited_alone_fails_verify_naming_the_field(
        copy: Path, tmp_path: Path) -> None:
    """Recount, never read: Polygraphy's pooled TPR contradicts its per-fault rows."""
    path = copy / FAULT_MATRIX
    matrix = json.loads(path.read_text())
    matrix["tpr"]["alarms"] += 1
    _write_json(path, matrix)
    rehash(copy, copy / "claims/realdrift/evidence/digits")
    out = tmp_path / "verify.json"
    assert verify(copy, json_out=out) == 1
    problems = json.loads(out.read_text())["problems"]
    assert any(f"{path}: tpr/alarms says " in p for p in problems), problems
