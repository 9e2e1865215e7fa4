"""The worked example of ``docs/reusable.md`` runs as written: its claim row appended to the
drift ledger, its substrate added beside ``digits``, and its study (reader, function and
ledger) registered, each decided by the kit's own ledger code with the status the page
states; and the study's row differs once one trial changes."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from kit.claims import ledger as ledger_module
from kit.claims import rules
from kit.claims.ledger import clear_cache, evaluate, load_ledger
from kit.paths import ROOT

DOC = (ROOT / "docs" / "reusable.md").read_text()


def block(name: str) -> str:
    """The fenced block right after ``<!-- worked example: NAME -->``."""
    found = re.search(rf"<!-- worked example: {re.escape(name)} -->\n```[a-z]*\n(.*?)```",
                      DOC, re.S)
    assert found is not None, name
    return found.group(1)


def stated(name: str) -> tuple[str, str, str]:
    """(claim, substrate, status) of a result block: ``ID (study, substrate): status``."""
    found = re.fullmatch(r"(\S+) \((\S+), (\S+)\): (.+)\n", block(name))
    assert found is not None, name
    return found.group(1), found.group(3), found.group(4)


def decided(ledger_path: Path, root: Path, claim: str) -> dict[str, str]:
    """Per substrate, the status the kit's ledger code gives ``claim``."""
    clear_cache()
    ledger = load_ledger(ledger_path)
    ledger = {**ledger, "claims": [c for c in ledger["claims"] if c["id"] == claim]}
    problems: list[str] = []
    outcomes = evaluate(ledger, root, problems)
    assert problems == []
    return {o.substrate: o.status for o in outcomes}


def with_row(tmp_path: Path, substrate: bool) -> Path:
    document = yaml.safe_load((ROOT / "claims" / "drift.yaml").read_text())
    [row] = yaml.safe_load(block("claim"))
    if substrate:
        document["substrates"].update(yaml.safe_load(block("substrate")))
        row["rules"].update(yaml.safe_load(block("substrate rule")))
    document["claims"].append(row)
    path = tmp_path / "drift.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def test_the_claim_row_is_decided_as_the_page_says(tmp_path: Path) -> None:
    claim, substrate, status = stated("claim result")
    assert decided(with_row(tmp_path, False), ROOT, claim)[substrate] == status


def test_the_substrate_is_decided_as_the_page_says(tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(ROOT / "claims" / "drift" / "evidence" / "digits",
                    root / "claims" / "drift" / "evidence" / "mine")
    claim, substrate, status = stated("substrate result")
    found = decided(with_row(tmp_path, True), root, claim)
    assert found[substrate] == status
    assert found["digits"] == "not run here"  # this root holds only the new substrate's
    assert decided(with_row(tmp_path, True), ROOT, claim)["digits"] == \
        stated("claim result")[2]


@pytest.fixture
def trials_study(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    code: dict[str, Any] = {}
    exec(compile(block("study code"), "docs/reusable.md", "exec"), code)  # the page's code
    monkeypatch.setitem(ledger_module.STUDIES, "trials", (code["TrialsEvidence"], "trials.json"))
    for name, function in code["RECOMPUTE_TRIALS"].items():
        monkeypatch.setitem(rules.FUNCTIONS, name, function)
    return code


def test_the_study_is_decided_from_its_trials_as_the_page_says(
        tmp_path: Path, trials_study: dict[str, Any]) -> None:
    shape = json.loads(block("study evidence"))["trials"][0]
    trials = [{**shape, "model": f"m{i:02d}", "flagged": i < 18} for i in range(20)]
    ledger = tmp_path / "trials.yaml"
    ledger.write_text(block("study ledger"))
    folder = tmp_path / "claims" / "trials" / "evidence" / "artifact"
    folder.mkdir(parents=True)
    (folder / "trials.json").write_text(json.dumps({"trials": trials}))
    claim, substrate, status = stated("study result")
    assert decided(ledger, tmp_path, claim) == {substrate: status}
    trials[0]["flagged"] = False  # 17 of 20
    (folder / "trials.json").write_text(json.dumps({"trials": trials}))
    assert decided(ledger, tmp_path, claim) == {substrate: "differs"}
