"""verify fails closed: tampering, missing keys and schema violations each fail and name
the file; replay comparison locates a changed element. Evidence: the tiny run, shipped.

Also covers ``kit.__main__``, ``kit.claims.coverage``, ``kit.values``,
``kit.drift.evidence``, ``kit.drift.recompute``, ``kit.drift.replay``,
``kit.drift.shipped``, ``kit.machine``, ``kit.sciml.recompute``,
``kit.sciml.recompute_catalogue``, ``kit.claims.ship``, ``kit.claims.records`` (no test file
of their own)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from kit.claims.coverage import roots, write_manifests
from kit.claims.ledger import Outcome, evaluate, load_ledger
from kit.claims.ship import ship
from kit.claims.verify import (
    check_manifests,
    check_trajectories,
    run_manifest_problems,
    training_weights_problems,
    verify,
)
from kit.drift.replay import compare_runs
from kit.errors import KitError
from kit.files import canonical_json, load_npz, sha256, write_npz
from kit.paths import ROOT
from kit.runfolder import Run, write_manifest

F = "drift."


# The source of the test ledger's thresholds (a rate lies in [0, 100] percent).
BOUNDARY = {"source": "boundary", "why": "a rate in percent lies between 0 and 100"}


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
        "digits": {"evidence": "claims/drift/evidence/digits", "note": "tiny run",
                   "paper": False},
        "cifar100": {"evidence": "claims/drift/evidence/cifar100", "note": "absent",
                     "paper": True}},
        "claims": [
            {**claim("T-001", "sample_count", {}, {"rule": "exact"}, 20)},
            claim("T-002", "case_count", {"kind": "fault"}, {"rule": "exact"}, 180),
            claim("T-003", "rate", {"detector": "maximum"},
                  {"rule": "compare", "op": "ge", "than": {"function": F + "constant",
                                                           "args": {"value": 0}},
                   "threshold": BOUNDARY}),
            claim("T-004", "boot", {"which": "nested", "quantity": "direct/tpr",
                                    "stat": "mean"},
                  {"rule": "within", "interval": {"function": F + "constant",
                                                  "args": {"value": [0, 100]}},
                   "threshold": BOUNDARY}),
            claim("T-005", "localisation", {"kind": "direct", "stat": "top1"},
                  {"rule": "within", "interval": {"function": F + "constant",
                                                  "args": {"value": [0, 100]}},
                   "threshold": BOUNDARY}),
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
    assert out["counts"] == {"drift": {
        "reproduced": 2, "by design": 0, "direction reproduced": 3, "direction reversed": 0,
        "described": 0,
        "consistent": 0, "hypothesis holds": 0, "hypothesis fails": 0, "differs": 0,
        "not run here": 2}}
    assert out["root"] == roots(root)["combined"]
    assert out["roots"] == roots(root)
    printed = capsys.readouterr().out
    assert "T-001    digits" in printed
    assert {c["status"] for c in out["claims"]} == {"reproduced", "direction reproduced",
                                                     "not run here"}
    assert printed.splitlines()[-1].endswith(f"root {out['root']}; OK")


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
    table = load_npz(path)
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
    data["machine"] = {"cpu": "machine facts belong in the unhashed machine.json"}
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
    assert report["machines"] == {"same": True, "differing": []}
    # another machine is reported apart from the results, which still compare identical
    machine = json.loads((copy / "machine.json").read_text())
    machine["cpu_flags_sha256"] = "0" * 64
    (copy / "machine.json").write_text(json.dumps(machine))
    report = compare_runs(run.root, copy)
    assert report["identical"]
    assert report["machines"] == {"same": False, "differing": ["cpu_flags_sha256"]}
    assert report["compared"] == len(json.loads((run.root / "manifest.json").read_text())
                                     ["files"])
    name = "infer/cand/resnet20/clean/plain-orig.npz"
    arrays = load_npz(copy / name)
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
    and decided, none differing; cifar100 claims are not run here."""
    from kit.claims.ledger import clear_cache
    from kit.claims.verify import check_schemas

    clear_cache()
    ledgers = [load_ledger(p) for p in sorted((ROOT / "claims").glob("*.yaml"))]
    assert {ledger["study"] for ledger in ledgers} == {"drift", "sciml", "realdrift", "corpus"}
    assert check_manifests(ROOT) == []
    assert check_trajectories(ROOT) == []
    assert run_manifest_problems(ROOT) == []
    assert check_schemas(ROOT, ledgers) == []
    from kit.claims.verify import link_kit_answers

    table = _readme_statuses()
    every = link_kit_answers(ledgers, [o for ledger in ledgers for o in evaluate(ledger, ROOT)],
                             [])
    for ledger in ledgers:
        outcomes = [o for o in every if o.study == ledger["study"]]
        present = [o for o in outcomes if o.substrate in ("digits", "kit")]
        assert present, ledger["study"]
        assert "differs" not in {o.status for o in present}, [
            o.claim for o in present if o.status == "differs"]
        assert all(o.status == "not run here" for o in outcomes if o.substrate == "cifar100")
        # the README's table of statuses is this evaluation's
        counts = {s: sum(o.status == s for o in outcomes) for s in table[ledger["study"]]}
        assert counts == table[ledger["study"]], ledger["study"]


def _readme_statuses() -> dict[str, dict[str, int]]:
    """The README's table of statuses on the shipped evidence: study -> status -> count."""
    lines = (ROOT / "README.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| study | reproduced"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    found = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        found[cells[0]] = {s: int(n) for s, n in zip(header[1:-1], cells[1:-1], strict=True)}
        assert int(cells[-1]) == sum(found[cells[0]].values()), cells[0]
    return found


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
            "finding": {"rule": "sign", "sign": "negative", "threshold": BOUNDARY,
                        "reason": "a rule of the test ledger"}}},
        "evidence": ["score/cases/cand-rot10-bilinear.npz"]})
    path = root / "claims/drift.yaml"
    path.write_text(yaml.safe_dump(ledger))
    write_manifests(root)
    [outcome] = [o for o in evaluate(load_ledger(path), root) if o.claim == "T-008"]
    assert outcome.status == "direction reversed"
    assert verify(root, json_out=tmp_path / "out.json") == 0
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["counts"]["drift"]["direction reversed"] == 1
    assert "reversed on the stand-in substrate for 1 claims: T-008/digits" in \
        capsys.readouterr().out
    assert verify(root, strict_findings=True) == 1
    # agreement fails when the other side differs
    ledger["claims"][-1]["rules"]["digits"]["than"] = {
        "function": F + "constant", "args": {"value": 0.5}}
    path.write_text(yaml.safe_dump(ledger))
    write_manifests(root)
    [outcome] = [o for o in evaluate(load_ledger(path), root) if o.claim == "T-008"]
    assert outcome.status == "differs"


def test_a_recorded_value_at_a_missing_path_names_the_file(shipped: Path) -> None:
    from kit.drift.recompute import recorded
    from kit.drift.shipped import Evidence

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
    write_npz(pins / "cylinder-a.npz", {"velocity": np.zeros((2, 3, 2))})
    (pins / "trajectories.json").write_text(json.dumps(
        {"trajectories": {"cylinder-a.npz": {"flow": {},
                                             "sha256": sha256(pins / "cylinder-a.npz")}}}))
    return tmp_path


def test_shipped_mgn_evidence_must_name_the_pinned_trajectories(tmp_path: Path) -> None:
    digest = sha256(_trajectory_root(tmp_path / "pin", {}) /
                         "claims/sciml/trajectories/cylinder-a.npz")
    ok = _trajectory_root(tmp_path / "ok", {"train": {"pinned": "cylinder-a.npz",
                                                      "sha256": digest}})
    assert check_trajectories(ok) == []
    other = _trajectory_root(tmp_path / "other", {"train": {"pinned": "cylinder-a.npz",
                                                            "sha256": "bb"}})
    assert check_trajectories(other) == [
        f"{other}/claims/sciml/evidence/kit/mgn.json: trajectory train (cylinder-a.npz) has "
        f"sha256 bb, {other}/claims/sciml/trajectories/trajectories.json lists {digest}"]
    simulated = _trajectory_root(tmp_path / "sim", {"train": {"simulated": True}})
    assert "simulated in that run" in check_trajectories(simulated)[0]
    none = _trajectory_root(tmp_path / "none", {})
    assert "names no trajectories" in check_trajectories(none)[0]


def _rewrite_a_case_value(root: Path) -> None:
    """Double one column of a shipped case table and update every hash below the root:
    the score record's table sha256, the shipped run manifest and the sha256 manifests."""
    evidence = root / "claims/drift/evidence/digits"
    name = "score/cases/cand-rot10-bilinear.npz"
    table = load_npz(evidence / name)
    table["e_o_norm"] = table["e_o_norm"] * 2
    write_npz(evidence / name, table)
    record = json.loads((evidence / "score/score.json").read_text())
    [entry] = [t for t in record["tables"].values() if t["path"] == name]
    entry["sha256"] = sha256(evidence / name)
    (evidence / "score/score.json").write_text(canonical_json(record).decode())
    run_manifest = json.loads((evidence / "run-manifest.json").read_text())
    for changed in (name, "score/score.json"):
        run_manifest["files"][changed] = sha256(evidence / changed)
    (evidence / "run-manifest.json").write_text(canonical_json(run_manifest).decode())
    replay = evidence / "replay.json"
    if replay.is_file():
        data = json.loads(replay.read_text())
        data["first_manifest_sha256"] = sha256(evidence / "run-manifest.json")
        replay.write_text(canonical_json(data).decode())
    write_manifests(root)


def test_a_value_rewritten_with_every_hash_updated_fails_only_against_the_root(
        shipped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A value no check reads (the CPU name in the evidence's machine record, which the run
    manifest leaves out), rewritten with every hash below the root updated: verify passes,
    and only the published root sees it. A case table rewritten the same way is seen by
    the recount of the summaries computed from it (score/summary.json) as well."""
    root = fresh(shipped, tmp_path)
    published = roots(root)["combined"]
    assert verify(root, expect_root=published) == 0
    machine = root / "claims/drift/evidence/digits/machine.json"
    record = json.loads(machine.read_text())
    record["cpu"] = "Another CPU"
    machine.write_text(canonical_json(record).decode())
    write_manifests(root)
    capsys.readouterr()
    assert verify(root) == 0  # every hash below the root agrees with the rewritten value
    assert verify(root, expect_root=published) == 1
    assert f"differs from the expected {published}" in capsys.readouterr().err
    assert verify(root, expect_root="0" * 64) == 1
    _rewrite_a_case_value(root)
    assert verify(root) == 1
    assert "score/summary.json: primary/" in capsys.readouterr().err


def test_a_shipped_file_must_be_the_one_its_run_manifest_lists(
        shipped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The sha256 manifests and the score record made to agree with a rewritten table:
    the shipped run manifest still lists the table the run wrote."""
    root = fresh(shipped, tmp_path)
    evidence = root / "claims/drift/evidence/digits"
    kept = (evidence / "run-manifest.json").read_text()
    _rewrite_a_case_value(root)
    (evidence / "run-manifest.json").write_text(kept)
    write_manifests(root)
    assert verify(root) == 1
    err = capsys.readouterr().err
    assert f"{evidence}/score/cases/cand-rot10-bilinear.npz: sha256 differs from " \
        f"{evidence}/run-manifest.json" in err


def test_the_readme_publishes_the_root_of_the_shipped_evidence() -> None:
    """The README's reviewer command and its expected last line name the root digest of
    what is committed: a change to any checked file without a new README fails here."""
    import re

    text = (ROOT / "README.md").read_text()
    found = set(re.findall(r"--expect-root ([0-9a-f]{64})", text))
    found |= set(re.findall(r"root ([0-9a-f]{64}); OK", text))
    assert found == {roots(ROOT)["combined"]}


# -- the shipped repository, copied: python -m kit verify run in the copy checks the copy
# (ROOT is the folder above the kit package it imports, and -m imports from the cwd first)

COPIED = ("claims", "manifests", "locks", "kit")


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The committed ledgers, evidence, manifests, locks and the kit itself."""
    root = tmp_path_factory.mktemp("repository")
    for name in COPIED:
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def repo_copy(repository: Path, tmp_path: Path) -> Path:
    target = tmp_path / "repo"
    shutil.copytree(repository, target)
    return target


def run_verify(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m kit verify`` in ``root`` (the copy's kit, the copy's files)."""
    return subprocess.run([sys.executable, "-m", "kit", "verify", *args], cwd=root,
                          capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})


# One claim: every file check still runs (manifests, links, schemas), the claims are left
ONE = ("--claim", "A-052")


def failures(proc: subprocess.CompletedProcess[str]) -> list[str]:
    assert "Traceback" not in proc.stderr, proc.stderr
    return [line.removeprefix("verify: FAIL ") for line in proc.stderr.splitlines()
            if line.startswith("verify: FAIL ")]


def _insert_byte(path: Path, byte: bytes = b"\xff") -> int:
    """Put ``byte`` at the start of the line nearest the middle of the file; its offset."""
    data = path.read_bytes()
    offset = data.index(b"\n", len(data) // 2) + 1
    path.write_bytes(data[:offset] + byte + data[offset:])
    return offset


def test_the_copied_repository_verifies_with_the_published_root(repository: Path,
                                                                tmp_path: Path) -> None:
    published = roots(ROOT)["combined"]
    proc = run_verify(repo_copy(repository, tmp_path), "--expect-root", published)
    assert failures(proc) == []
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1].endswith(f"root {published}; OK")


def test_a_one_line_edit_of_the_grading_code_changes_the_root(repository: Path,
                                                             tmp_path: Path) -> None:
    """The combined root covers the code that grades: a reversal turned into a reproduced
    direction by one line of kit/claims/rules.py fails --expect-root, with the evidence
    root unchanged."""
    copy = repo_copy(repository, tmp_path)
    ledger = copy / "kit/claims/rules.py"
    text = ledger.read_text()
    line = '    if rule_grade == "direction" and not paper:\n        return "direction reversed"\n'
    assert line in text
    ledger.write_text(text.replace(line, line.replace('"direction reversed"',
                                                      '"direction reproduced"')))
    published = roots(ROOT)
    proc = run_verify(copy, "--expect-root", published["combined"])
    assert proc.returncode == 1
    [failure] = failures(proc)
    assert f"differs from the expected {published['combined']}" in failure
    assert f"evidence root {published['evidence']}" in failure
    assert f"code root {published['code']}" not in failure
    pyproject = copy / "pyproject.toml"
    ledger.write_text(text)
    pyproject.write_text(pyproject.read_text() + "\n")
    assert run_verify(copy, "--expect-root", published["combined"]).returncode == 1


@pytest.mark.parametrize(("name", "decided"), [
    ("claims/drift.yaml", "B-004    kit"),  # the drift ledger cannot be read: sciml decided
    ("manifests/evidence.json", "A-001    digits"),
    ("claims/drift/evidence/digits/score/protocol.yaml", "B-004    kit"),
    ("claims/drift/evidence/digits/score/score.json", "B-004    kit"),
    ("claims/sciml/evidence/kit/mgn.json", "A-001    digits"),
])
def test_a_byte_that_is_not_utf8_fails_verify_naming_the_file(
        repository: Path, tmp_path: Path, name: str, decided: str) -> None:
    root = repo_copy(repository, tmp_path)
    path = root / name
    data = path.read_bytes()
    offset = _insert_byte(path)
    line = data.count(b"\n", 0, offset) + 1
    proc = run_verify(root)
    found = failures(proc)
    assert f"{path}: not UTF-8 text (byte 0xff at offset {offset}, line {line})" in \
        "\n".join(found)
    assert proc.returncode == 1
    assert decided in proc.stdout
    assert "; FAILED because " in proc.stdout.splitlines()[-1]


def test_a_readme_deep_inside_claims_is_listed_like_any_file(repository: Path,
                                                             tmp_path: Path) -> None:
    root = repo_copy(repository, tmp_path)
    added = root / "claims/sciml/trajectories/README.md"
    added.write_text("notes\n")
    assert failures(run_verify(root, *ONE)) == [
        f"{added}: present but not listed in manifests/evidence.json"]
    added.unlink()
    listed = root / "claims/drift/README.md"
    listed.write_text("what the drift evidence holds\n")
    write_manifests(root)
    assert "claims/drift/README.md" in json.loads(
        (root / "manifests/evidence.json").read_text())["files"]
    assert failures(run_verify(root, *ONE)) == []
    listed.write_text("what the drift evidence holds, edited\n")
    proc = run_verify(root, *ONE)
    assert failures(proc) == [f"{listed}: sha256 differs from manifests/evidence.json"]
    assert proc.returncode == 1


def test_only_the_kits_manifests_may_sit_under_manifests(repository: Path,
                                                         tmp_path: Path) -> None:
    root = repo_copy(repository, tmp_path)
    (root / "manifests/images.json").write_text("{}")
    (root / "manifests/old").mkdir()
    (root / "manifests/old/evidence.json").write_text("{}")
    proc = run_verify(root)
    known = "assets.json, evidence.json, locks.json"
    assert failures(proc) == [
        f"{root}/manifests/images.json: not one of the kit's manifests ({known}); remove it",
        f"{root}/manifests/old/evidence.json: not one of the kit's manifests ({known}); "
        "remove it"]
    assert proc.returncode == 1


def test_a_symbolic_link_under_claims_is_refused(repository: Path, tmp_path: Path) -> None:
    """An evidence folder replaced by a link to an outside copy holding an extra file, and
    a linked file: each refused, though every listed file hashes as listed."""
    root = repo_copy(repository, tmp_path)
    folder = root / "claims/sciml/trajectories"
    outside = tmp_path / "outside"
    shutil.move(folder, outside)
    folder.symlink_to(outside)
    (outside / "extra.npz").write_bytes(b"not listed anywhere")
    (outside / "trajectories.json").rename(outside / "index.json")
    (outside / "trajectories.json").symlink_to(outside / "index.json")
    proc = run_verify(root)
    found = failures(proc)
    assert found[0] == (
        f"{folder}: a symbolic link (to {outside}); claims/ and manifests/ must hold the "
        "files themselves: replace the link with what it points to, or restore it from git")
    assert proc.returncode == 1
    assert "verify: 631 claim checks" in proc.stdout
    folder.unlink()
    shutil.move(outside, folder)
    (folder / "extra.npz").unlink()
    proc = run_verify(root, *ONE)
    assert failures(proc)[0].startswith(f"{folder}/trajectories.json: a symbolic link (to ")
    (folder / "trajectories.json").unlink()
    (folder / "index.json").rename(folder / "trajectories.json")
    (root / "manifests/evidence.json").rename(root / "manifests/real.json")
    (root / "manifests/evidence.json").symlink_to("real.json")
    found = failures(run_verify(root))
    assert found[0].startswith(f"{root}/manifests/evidence.json: a symbolic link (to real")


def test_a_byte_flip_in_a_pinned_trajectory_fails_though_the_manifests_agree(
        repository: Path, tmp_path: Path) -> None:
    root = repo_copy(repository, tmp_path)
    folder = root / "claims/sciml/trajectories"
    index = json.loads((folder / "trajectories.json").read_text())["trajectories"]
    name = sorted(index)[0]
    data = bytearray((folder / name).read_bytes())
    data[len(data) // 2] ^= 0x01
    (folder / name).write_bytes(bytes(data))
    write_manifests(root)  # the manifests are made to agree: the index still does not
    proc = run_verify(root)
    assert failures(proc) == [
        f"{folder / name}: sha256 {sha256(folder / name)} differs from "
        f"{folder / 'trajectories.json'} ({index[name]['sha256']}); restore it from git"]
    assert proc.returncode == 1


def test_every_problem_is_listed_and_the_claims_still_decided(repository: Path,
                                                              tmp_path: Path) -> None:
    """A manifest that is not JSON, a lock that differs from the other manifest, and two
    MR cards that violate their schema: all four named in one run, every claim decided."""
    root = repo_copy(repository, tmp_path)
    (root / "manifests/evidence.json").write_text('{"files": ')
    lock = root / "locks/verify.in"
    lock.write_text(lock.read_text() + "# edited\n")
    cards = sorted((root / "kit/sciml/cards").glob("*.yaml"))[:2]
    for card in cards:
        card.write_text(card.read_text().replace("level: ", "level: vibes-", 1))
    proc = run_verify(root)
    found = failures(proc)
    assert found[0].startswith(f"{root}/manifests/evidence.json: not valid JSON (Expecting "
                               "value: line 1 column 11")
    assert found[0].endswith("; restore it from git")
    assert found[1] == f"{lock}: sha256 differs from manifests/locks.json"
    assert [f.split(": ")[0] for f in found[2:]] == [str(c) for c in cards]
    assert all(": level: 'vibes-" in f for f in found[2:])
    assert len(found) == 4
    assert proc.returncode == 1
    assert "verify: 631 claim checks, 4 failed checks" in proc.stdout
    assert re.search(r"^A-001    digits    .* three ", proc.stdout, re.MULTILINE)


def test_every_schema_violation_of_a_record_is_listed(repository: Path,
                                                      tmp_path: Path) -> None:
    from kit.claims.verify import check_schemas

    root = repo_copy(repository, tmp_path)
    record = root / "claims/sciml/evidence/kit/ledger.json"
    data = json.loads(record.read_text())
    data["study"] = "drift"
    data["extra"] = 1
    record.write_text(json.dumps(data))
    ledgers = [load_ledger(p) for p in sorted((root / "claims").glob("*.yaml"))]
    found = check_schemas(root, ledgers)
    assert len(found) == 2
    assert all(f.startswith(f"{record}: ") for f in found)
    assert any("'extra' was unexpected" in f for f in found)


def test_compare_names_a_run_manifest_that_cannot_be_read(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kit.__main__ import main

    first, second = tmp_path / "first", tmp_path / "replay"
    for folder in (first, second):
        write_npz(folder / "score/t.npz", {"a": np.arange(3)})
        write_manifest(folder)
        (folder / ".lock").touch()  # run folders the kit made
    (first / "manifest.json").write_text('{"files": {"score/t.npz": ')
    assert main(["verify", "--compare", str(first), str(second)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kit: error: {first}/manifest.json: not valid JSON (Expecting "
                          "value: line 1 column 27")
    assert "rerun that run" in err
    (first / "manifest.json").write_text('{"files": ["score/t.npz"]}')
    assert main(["verify", "--compare", str(first), str(second)]) == 2
    assert "manifest.json: not a run manifest" in capsys.readouterr().err
    (first / "manifest.json").write_bytes(b'{"files": {"\xe9": "0"}}')
    assert main(["verify", "--compare", str(first), str(second)]) == 2
    assert f"{first}/manifest.json: not UTF-8 text" in capsys.readouterr().err
    write_manifest(first)
    (first / "machine.json").write_text("[1,")
    (second / "machine.json").write_text("{}")
    assert main(["verify", "--compare", str(first), str(second)]) == 2
    assert f"{first}/machine.json: not valid JSON" in capsys.readouterr().err
    (first / "machine.json").unlink()
    (second / "score/t.npz").write_bytes(b"PK\x03\x04 damaged")
    write_manifest(second)
    assert main(["verify", "--compare", str(first), str(second)]) == 2
    assert f"{second}/score/t.npz: not a readable .npz archive" in capsys.readouterr().err


def test_a_kit_answer_names_the_recomputed_value_and_a_dangling_one_fails() -> None:
    """A-108 (the paper's unnamed corpus, not run here) shows the kit corpus's recomputed
    rate, described (a count of other material, never a reproduction), with the answer in
    its note; a kit_answer naming a claim no ledger holds is a failed check."""
    from kit.claims.verify import link_kit_answers

    def outcome(study: str, claim: str, recomputed: str, status: str) -> Outcome:
        return Outcome(claim=claim, study=study, substrate="-", section="", statement="",
                       published="", recomputed=recomputed, rule="-", status=status,
                       note="unnamed")

    ledgers = [{"study": "drift", "claims": [
        {"id": "A-108", "kit_answer": {"study": "corpus", "claim": "C-006", "scope": "its rate"}},
        {"id": "A-109", "kit_answer": {"study": "corpus", "claim": "C-999", "scope": "nothing"}}]}]
    outcomes = [outcome("drift", "A-108", "-", "not run here"),
                outcome("drift", "A-109", "-", "not run here"),
                outcome("corpus", "C-006", "0.75", "described")]
    problems: list[str] = []
    linked = link_kit_answers(ledgers, outcomes, problems)
    assert linked[0].note == ("unnamed; answered on the kit's own material by corpus C-006 "
                              "= 0.75 (described): its rate")
    assert (linked[0].status, linked[0].recomputed) == ("described", "0.75")
    assert (linked[1].note, linked[1].status) == ("unnamed", "not run here")
    assert problems == ["claims/drift.yaml: A-109's kit_answer names corpus C-999, which no "
                        "ledger holds"]
    shipped = subprocess.run([sys.executable, "-m", "kit", "verify"], capture_output=True,
                             text=True, cwd=ROOT, check=False).stdout
    row = next(line for line in shipped.splitlines() if line.startswith("A-108 "))
    assert "described            describe: corpus C-006 on the kit's own material" in row
    from kit.claims.verify import LEFT_TO_DEEP

    assert f"verify: {LEFT_TO_DEEP}" in shipped  # what a run without --deep leaves out


def test_an_empty_folder_under_the_evidence_is_a_failed_check(repository: Path,
                                                              tmp_path: Path) -> None:
    root = repo_copy(repository, tmp_path)
    empty = root / "claims/drift/evidence/digits/extra"
    (empty / "deeper").mkdir(parents=True)
    proc = run_verify(root)
    assert failures(proc) == [f"{empty}: an empty folder, which no manifest lists; remove it"]
    assert proc.returncode == 1


@pytest.mark.parametrize("name", ["claims/drift/evidence/digits/run-manifest.json",
                                  "claims/drift/evidence/digits/replay.json",
                                  "claims/sciml/evidence/kit/mgn.json"])
def test_a_shipped_record_that_is_not_an_object_is_a_failed_check(
        repository: Path, tmp_path: Path, name: str) -> None:
    root = repo_copy(repository, tmp_path)
    (root / name).write_text("[]\n")
    proc = run_verify(root)
    assert proc.returncode == 1
    assert f"{root / name}: not a JSON object (list); restore it from git" in failures(proc)


def test_a_split_copy_that_differs_from_the_drift_studys_is_named(tmp_path: Path) -> None:
    """The detector study and the sweep ship the split they ran on; each must be the drift
    study's, byte for byte (that one is recounted from its rows)."""
    from kit.claims.records import SPLIT, split_copies

    ledgers = []
    for study, substrates in (("drift", ("digits",)), ("corpus", ("kit", "detectors")),
                              ("realdrift", ("digits",))):
        evidence = {name: {"evidence": f"claims/{study}/evidence/{name}"} for name in substrates}
        ledgers.append({"study": study, "substrates": evidence})
        for name in substrates:
            if name != "kit":
                (tmp_path / evidence[name]["evidence"] / SPLIT).parent.mkdir(parents=True)
                shutil.copy(ROOT / "claims/drift/evidence/digits" / SPLIT,
                            tmp_path / evidence[name]["evidence"] / SPLIT)
    assert split_copies(tmp_path, ledgers) == []
    copy = tmp_path / "claims/realdrift/evidence/digits" / SPLIT
    copy.write_text(copy.read_text().replace('"heldout"', '"calibration"', 1))
    [problem] = split_copies(tmp_path, ledgers)
    assert problem.startswith(f"{copy}: differs from the drift study's split")


def test_the_shipped_training_weights_are_those_every_digits_fetch_record_names(
        tmp_path: Path) -> None:
    """A weights file missing, of other bytes, or named by no fetch record is a failed
    check naming it; the checkout's own weights pass."""
    assert training_weights_problems(ROOT) == []
    weights = tmp_path / "claims" / "drift" / "weights" / "digits"
    weights.mkdir(parents=True)
    (weights / "a.pt").write_bytes(b"a's weights")
    for study in ("drift", "realdrift"):
        record = tmp_path / "claims" / study / "evidence" / "digits" / "fetch" / "fetch.json"
        record.parent.mkdir(parents=True)
        record.write_text(json.dumps({"models": {
            "a": {"weights_sha256": sha256(weights / "a.pt")},
            "b": {"weights_sha256": "0" * 64}}}))
    found = training_weights_problems(tmp_path)
    assert len(found) == 2
    assert all(p.startswith(f"{weights / 'b.pt'}: missing;") for p in found)
    (weights / "b.pt").write_bytes(b"other bytes")
    (weights / "c.pt").write_bytes(b"nobody's")
    found = training_weights_problems(tmp_path)
    assert found[0].startswith(f"{weights / 'b.pt'}: sha256 {sha256(weights / 'b.pt')}, "
                               f"but {tmp_path / 'claims' / 'drift'}")
    assert found[-1].startswith(f"{weights / 'c.pt'}: training weights no shipped fetch "
                                "record names")
    assert len(found) == 3
