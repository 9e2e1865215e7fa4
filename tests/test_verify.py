"""verify fails closed: tampering, missing keys and schema violations each fail and name
the file; replay comparison locates a changed element. Evidence: the tiny run, shipped."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from kit.claims import evaluate, load_ledger
from kit.errors import KitError
from kit.replay import compare_runs
from kit.runtimes import ROOT
from kit.stages.common import Run, write_manifest
from kit.verify import check_manifests, check_trajectories, ship, verify, write_manifests
from kit.worker import read_npz, write_npz

F = "drift."


def small_ledger() -> dict[str, Any]:
    """A ledger whose claims apply to the one-model tiny run (T-001 also to cifar100,
    whose evidence is absent: not run here)."""
    def claim(cid: str, fn: str, args: dict[str, Any], rule: dict[str, Any],
              value: Any = None) -> dict[str, Any]:
        return {"id": cid, "statement": f"test claim {cid}", "published": str(value),
                "value": value, "kind": "test", "compute": {"function": F + fn, "args": args},
                "rules": {"digits": {**rule, "reason": "a rule of the test ledger"}},
                "evidence": ["score/cases/cand-rot10-bilinear.npz"]}
    return {"study": "drift", "source": "test", "substrates": {
        "digits": {"evidence": "claims/drift/evidence/digits", "note": "tiny run"},
        "cifar100": {"evidence": "claims/drift/evidence/cifar100", "note": "absent"}},
        "claims": [
            {**claim("T-001", "sample_count", {}, {"rule": "exact"}, 20)},
            claim("T-002", "case_count", {"kind": "fault"}, {"rule": "exact"}, 180),
            claim("T-003", "rate", {"detector": "maximum"},
                  {"rule": "compare", "op": "ge", "than": {"function": F + "constant",
                                                           "args": {"value": 0}}}),
            claim("T-004", "boot", {"which": "nested", "quantity": "direct/tpr",
                                    "stat": "mean"},
                  {"rule": "within", "interval": {"function": F + "constant",
                                                  "args": {"value": [0, 100]}}}),
            claim("T-005", "localisation", {"kind": "direct", "stat": "top1"},
                  {"rule": "within", "interval": {"function": F + "constant",
                                                  "args": {"value": [0, 100]}}}),
            {"id": "T-007", "statement": "absent substrate", "published": "20", "value": 20,
             "kind": "test", "compute": {"function": F + "sample_count"},
             "rules": {"cifar100": {"rule": "exact", "reason": "a rule of the test ledger"}},
             "evidence": ["split/split.json"]},
            {"id": "T-006", "statement": "not reproducible here", "published": "x",
             "kind": "test", "not_reproducible": "no substrate holds this corpus"}]}


@pytest.fixture(scope="module")
def shipped(tiny_run: tuple[Run, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    run, _ = tiny_run
    root = tmp_path_factory.mktemp("repo")
    shutil.copytree(ROOT / "locks", root / "locks")
    (root / "claims").mkdir()
    (root / "claims" / "drift.yaml").write_text(yaml.safe_dump(small_ledger()))
    ship(run.root, root=root)
    return root


def fresh(shipped: Path, tmp_path: Path) -> Path:
    target = tmp_path / "repo"
    shutil.copytree(shipped, target)
    return target


def test_shipped_tiny_evidence_verifies(shipped: Path, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    root = fresh(shipped, tmp_path)
    assert verify(root, json_out=tmp_path / "out.json") == 0
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["counts"] == {"holds": 5, "differs": 0, "not run here": 2}
    assert "T-001    digits" in capsys.readouterr().out


@pytest.mark.parametrize("tamper", ["flip", "delete", "extra", "edit_json"])
def test_tampering_fails_and_names_the_file(shipped: Path, tmp_path: Path, tamper: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    root = fresh(shipped, tmp_path)
    evidence = root / "claims/drift/evidence/digits"
    target = evidence / "score/cases/cand-rot10-bilinear.npz"
    if tamper == "flip":
        data = bytearray(target.read_bytes())
        data[len(data) // 2] ^= 0x01
        target.write_bytes(bytes(data))
    elif tamper == "delete":
        target.unlink()
    elif tamper == "extra":
        target = evidence / "notes.txt"
        target.write_text("unlisted")
    else:
        target = evidence / "score/summary.json"
        target.write_text(target.read_text().replace("0.", "0.9", 1))
    assert verify(root) == 1
    assert str(target) in capsys.readouterr().err


def test_an_edited_number_with_a_rewritten_manifest_is_caught_by_the_table_hash(
        shipped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = fresh(shipped, tmp_path)
    path = root / "claims/drift/evidence/digits/score/cases/cand-rot10-bilinear.npz"
    table = read_npz(path)
    table["e_o_norm"] = table["e_o_norm"] * 2
    write_npz(path, table)
    write_manifests(root)  # the manifest is made to agree: the score record still does not
    assert check_manifests(root) == []
    assert verify(root) == 1
    assert "sha256 differs from its description" in capsys.readouterr().err


def test_a_claim_pointing_at_a_missing_key_fails_naming_it(
        shipped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = fresh(shipped, tmp_path)
    ledger = small_ledger()
    ledger["claims"][2]["compute"]["args"]["model"] = "no_such_model"
    (root / "claims/drift.yaml").write_text(yaml.safe_dump(ledger))
    write_manifests(root)
    assert verify(root, json_out=tmp_path / "out.json") == 1
    assert "claim T-003 (digits)" in capsys.readouterr().err
    # the other claims are still decided
    out = json.loads((tmp_path / "out.json").read_text())
    assert {c["claim"] for c in out["claims"]} >= {"T-001", "T-002", "T-004"}


def test_a_schema_violation_fails_naming_the_file_and_field(shipped: Path,
                                                             tmp_path: Path) -> None:
    root = fresh(shipped, tmp_path)
    ledger = small_ledger()
    del ledger["claims"][0]["rules"]["digits"]["reason"]
    path = root / "claims/drift.yaml"
    path.write_text(yaml.safe_dump(ledger))
    with pytest.raises(KitError, match=r"drift\.yaml: claims/0/rules/digits"):
        load_ledger(path)
    record = root / "claims/drift/evidence/digits/score/score.json"
    data = json.loads(record.read_text())
    del data["machine"]
    record.write_text(json.dumps(data))
    write_manifests(root)
    assert verify(root) == 1


def test_a_claim_that_differs_fails_verify(shipped: Path, tmp_path: Path) -> None:
    root = fresh(shipped, tmp_path)
    ledger = small_ledger()
    ledger["claims"][0]["value"] = 21
    (root / "claims/drift.yaml").write_text(yaml.safe_dump(ledger))
    write_manifests(root)
    outcomes = evaluate(load_ledger(root / "claims/drift.yaml"), root)
    assert [o.status for o in outcomes if o.claim == "T-001"] == ["differs"]
    assert verify(root) == 1


def test_replay_of_a_copy_is_identical_and_a_changed_output_is_located(
        tiny_run: tuple[Run, Path], tmp_path: Path) -> None:
    run, _ = tiny_run
    copy = tmp_path / "replay"
    shutil.copytree(run.root, copy, ignore=shutil.ignore_patterns("report"))
    report = compare_runs(run.root, copy)
    assert report["identical"]
    assert report["compared"] == len(json.loads((run.root / "manifest.json").read_text())
                                     ["files"])
    name = "infer/cand/resnet20/clean/plain-orig.npz"
    arrays = read_npz(copy / name)
    arrays["logits"] = arrays["logits"].copy()
    arrays["logits"][3, 7] += np.float32(1e-3)
    write_npz(copy / name, arrays)
    write_manifest(copy)
    report = compare_runs(run.root, copy)
    assert not report["identical"]
    first = report["first_difference"]
    assert first["file"] == name
    assert first["arrays"][0]["array"] == "logits"
    assert first["arrays"][0]["element"] == [3, 7]
    assert first["arrays"][0]["max_abs"] == pytest.approx(1e-3, rel=1e-3)


def test_the_shipped_evidence_checks_out_and_every_claim_is_decided() -> None:
    """The committed ledgers, manifests and digits/SciML evidence: every integrity and
    schema check passes, and every claim that applies to present evidence is recomputed
    and decided (holds or differs); cifar100 claims are never counted as held."""
    from kit.claims import clear_cache
    from kit.verify import check_schemas

    clear_cache()
    ledgers = [load_ledger(p) for p in sorted((ROOT / "claims").glob("*.yaml"))]
    assert {ledger["study"] for ledger in ledgers} == {"drift", "sciml"}
    assert check_manifests(ROOT) == []
    assert check_trajectories(ROOT) == []
    check_schemas(ROOT, ledgers)
    for ledger in ledgers:
        outcomes = evaluate(ledger, ROOT)
        present = [o for o in outcomes if o.substrate in ("digits", "kit")]
        assert present, ledger["study"]
        assert {o.status for o in present} == {"holds"}, [
            o.claim for o in present if o.status != "holds"]
        assert all(o.status == "not run here" for o in outcomes if o.substrate == "cifar100")


def test_a_reversed_finding_is_printed_and_fails_only_under_strict_findings(
        shipped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A stand-in entry decided by agreement with the recorded value, whose paper direction
    (here: an impossible negative TPR) is kept as its finding."""
    root = fresh(shipped, tmp_path)
    ledger = small_ledger()
    ledger["claims"].append({
        "id": "T-008", "statement": "direct TPR against the recorded one", "published": "x",
        "kind": "test", "compute": {"function": F + "rate", "args": {"detector": "direct"}},
        "rules": {"digits": {
            "rule": "agrees", "reason": "a rule of the test ledger",
            "than": {"function": F + "rate", "args": {"detector": "direct"}},
            "finding": {"rule": "sign", "sign": "negative",
                        "reason": "a rule of the test ledger"}}},
        "evidence": ["score/cases/cand-rot10-bilinear.npz"]})
    path = root / "claims/drift.yaml"
    path.write_text(yaml.safe_dump(ledger))
    write_manifests(root)
    [outcome] = [o for o in evaluate(load_ledger(path), root) if o.claim == "T-008"]
    assert outcome.status == "holds"
    assert outcome.finding.startswith("reversed")
    assert verify(root, json_out=tmp_path / "out.json") == 0
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["findings_reversed"] == ["T-008/digits"]
    assert "paper's direction reversed" in capsys.readouterr().out
    assert verify(root, strict_findings=True) == 1
    # agreement fails when the other side differs
    ledger["claims"][-1]["rules"]["digits"]["than"] = {
        "function": F + "constant", "args": {"value": 0.5}}
    path.write_text(yaml.safe_dump(ledger))
    write_manifests(root)
    [outcome] = [o for o in evaluate(load_ledger(path), root) if o.claim == "T-008"]
    assert outcome.status == "differs"


def test_a_recorded_value_at_a_missing_path_names_the_file(shipped: Path) -> None:
    from kit.recompute import Evidence, recorded

    evidence = Evidence(shipped / "claims/drift/evidence/digits")
    assert isinstance(recorded(evidence, "score/summary.json", "primary.direct.auroc"), float)
    with pytest.raises(KitError, match=r"summary\.json: no recorded value at 'primary.nope'"):
        recorded(evidence, "score/summary.json", "primary.nope")


def _trajectory_root(tmp_path: Path, used: dict[str, Any]) -> Path:
    evidence = tmp_path / "claims" / "sciml" / "evidence" / "kit"
    evidence.mkdir(parents=True)
    (evidence / "mgn.json").write_text(json.dumps({"trajectories": used}))
    pins = tmp_path / "claims" / "sciml" / "trajectories"
    pins.mkdir()
    (pins / "trajectories.json").write_text(json.dumps(
        {"trajectories": {"cylinder-a.npz": {"flow": {}, "sha256": "aa"}}}))
    return tmp_path


def test_shipped_mgn_evidence_must_name_the_pinned_trajectories(tmp_path: Path) -> None:
    ok = _trajectory_root(tmp_path / "ok", {"train": {"pinned": "cylinder-a.npz",
                                                      "sha256": "aa"}})
    assert check_trajectories(ok) == []
    other = _trajectory_root(tmp_path / "other", {"train": {"pinned": "cylinder-a.npz",
                                                            "sha256": "bb"}})
    assert check_trajectories(other) == [
        f"{other}/claims/sciml/evidence/kit/mgn.json: trajectory train (cylinder-a.npz) has "
        f"sha256 bb, {other}/claims/sciml/trajectories/trajectories.json lists aa"]
    simulated = _trajectory_root(tmp_path / "sim", {"train": {"simulated": True}})
    assert "simulated in that run" in check_trajectories(simulated)[0]
    none = _trajectory_root(tmp_path / "none", {})
    assert "names no trajectories" in check_trajectories(none)[0]
