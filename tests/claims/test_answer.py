"""An answer in a second (``kit.claims.answer``): ``verify --claim`` recomputes only what
the named claims read. The rates of the drift study come without scikit-learn, the stored
bootstrap summaries' recount, the other studies' schema checks and the papers' arithmetic of
other rows are left to the full run (and the run says so), and the bench measures fresh
starts and names a failing call."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kit.claims import verify as verify_module
from kit.claims.answer import bench_answer
from kit.claims.arithmetic import load_checks
from kit.claims.ledger import load_ledger
from kit.errors import KitError
from kit.paths import ROOT


def test_the_rates_of_the_drift_study_need_no_scikit_learn() -> None:
    program = (
        "import sys\n"
        "from kit.drift.shipped import Evidence\n"
        "from kit.drift.recompute import rate\n"
        "ev = Evidence(__import__('pathlib').Path('claims/drift/evidence/digits'))\n"
        "alone = [rate(ev, d, w) for d in ('metamorphic', 'direct') for w in ('tpr', 'fpr')]\n"
        "assert 'sklearn' not in sys.modules, 'the rates imported scikit-learn'\n"
        "full = [ev.primary[d][w]['rate'] * 100 for d in ('metamorphic', 'direct')\n"
        "        for w in ('tpr', 'fpr')]\n"
        "assert 'sklearn' in sys.modules\n"
        "assert [float(a) for a in alone] == full, (alone, full)\n"
        "assert 'auroc' not in ev.rates['direct'] and 'auroc' in ev.primary['direct']\n")
    proc = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr


def test_a_run_for_named_claims_leaves_the_bootstrap_recount_to_the_full_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from kit.drift import recount

    calls: list[Any] = []
    monkeypatch.setattr(recount, "check", lambda ev, deep: calls.append((ev, deep)) or [])
    ledgers = [load_ledger(p) for p in sorted((ROOT / "claims").glob("*.yaml"))]
    assert verify_module.check_schemas(ROOT, ledgers, recounts="none") == []
    assert calls == []
    assert verify_module.check_schemas(ROOT, ledgers) == []
    assert verify_module.check_schemas(ROOT, ledgers, recounts="deep") == []
    assert [(ev.root.name, deep) for ev, deep in calls] == [("digits", False), ("digits", True)]


def test_a_run_for_named_claims_checks_the_records_of_their_studies_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The schema checks of records and MR cards no named claim reads are left to the full
    run: a drift claim never validates the SciML verdict ledger or loads an MR card."""
    from kit.claims import records

    studies: list[list[str]] = []
    cards: list[Path] = []
    checked = verify_module.check_schemas
    monkeypatch.setattr(verify_module, "check_schemas", lambda root, ledgers, recounts: (
        studies.append(sorted(ledger["study"] for ledger in ledgers)) or []))
    monkeypatch.setattr(records, "_card_problems", lambda card: cards.append(card) or [])
    paths = sorted((ROOT / "claims").glob("*.yaml"))
    for only in (("A-052",), ("B-077",), ("A-052", "B-077"), ()):
        problems: list[str] = []
        verify_module.evaluate_all(ROOT, paths, problems, only)
        assert problems == []
    assert studies == [["drift"], ["sciml"], ["drift", "sciml"],
                       ["corpus", "drift", "realdrift", "sciml"]]
    drift = [load_ledger(ROOT / "claims" / "drift.yaml")]
    assert checked(ROOT, drift, "none") == []
    assert cards == []
    assert checked(ROOT, [*drift, load_ledger(ROOT / "claims" / "sciml.yaml")], "none") == []
    assert len(cards) > 10


def test_the_arithmetic_of_named_claims_only() -> None:
    every = load_checks(ROOT)
    named = load_checks(ROOT, ("A-061",))
    assert len(every) > len(named) >= 1
    assert {c.claim for c in named} == {"A-061"}
    assert named == [c for c in every if c.claim == "A-061"]


def test_verify_for_a_claim_says_what_it_left_to_the_full_run() -> None:
    proc = subprocess.run([sys.executable, "-m", "kit", "verify", "--claim", "A-061"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert f"verify: {verify_module.LEFT_TO_FULL}" in proc.stdout
    assert "verify: the papers' own arithmetic: 1 printed number recomputed" in proc.stdout


def test_the_bench_names_a_claim_that_fails(tmp_path: Path) -> None:
    with pytest.raises(KitError, match=r"verify --claim Z-999 failed"):
        bench_answer("Z-999", runs=1)


def test_deep_does_not_go_with_a_claim() -> None:
    proc = subprocess.run([sys.executable, "-m", "kit", "verify", "--deep", "--claim", "A-052"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2
    assert "--deep recounts every stored summary" in proc.stderr
