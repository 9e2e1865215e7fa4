"""What verify prints (``kit.claims.show``) and how its selection reads the command line:
the reason for a failure ends the last line, ``--claim`` given twice keeps both,
and a mistyped claim gets the nearest ids."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from kit.claims.show import failure_reason
from kit.paths import ROOT


def test_the_reason_names_the_first_failed_check_and_what_else_failed() -> None:
    line = failure_reason(["root digest abc differs from the expected def", "x", "y"],
                          ["A-001/digits"], ["B-083/kit", "B-084/kit"])
    assert line == ("root digest abc differs from the expected def "
                    "(and 2 more failed checks above); 1 claims differ: A-001/digits; "
                    "2 findings reversed under --strict-findings")


def _verify(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kit", "verify", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, check=False)


def test_a_wrong_expected_root_says_so_beside_the_last_line() -> None:
    proc = _verify("--expect-root", "0" * 64, "--claim", "A-052")
    lines = proc.stdout.rstrip().splitlines()
    assert proc.returncode == 1
    assert lines[-1].startswith("verify: ")  # the verdict line, ending in the reason
    assert "; FAILED because root digest " in lines[-1]
    assert f"differs from the expected {'0' * 64}" in lines[-1]


def test_two_claim_options_keep_both_and_a_typo_gets_a_suggestion() -> None:
    both = _verify("--claim", "A-052", "--claim", "A-061")
    assert both.returncode == 0, both.stderr
    assert "verify: 4 of 4 claim checks selected" in both.stdout  # each on two substrates
    assert "A-052 (drift, digits)" in both.stdout
    assert "A-061 (drift, digits)" in both.stdout
    typo = _verify("--claim", "A-0522")
    assert typo.returncode == 2
    assert "no claim A-0522 in the ledgers" in typo.stderr
    hint = typo.stderr.split("did you mean ")[1]
    assert "A-052" in hint.split(", ")


def test_a_row_shows_the_kits_number_in_the_papers_printed_form(
        capsys: pytest.CaptureFixture[str]) -> None:
    from kit.claims.ledger import Outcome
    from kit.claims.show import print_outcomes

    row = Outcome("B-018", "sciml", "kit", "5", "boundary detections", "180/180", "168",
                  "counts agree", "consistent", printed="168/168")
    print_outcomes([row, dataclasses.replace(row, claim="B-019", printed=None)])
    first, second = capsys.readouterr().out.splitlines()[1:]
    assert " 168/168 " in first
    assert " 168 " in second
    assert "168/168" not in second
