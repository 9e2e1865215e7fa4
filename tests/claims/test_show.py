"""What verify prints (``kit.claims.show``) and how its selection reads the command line:
the reason for a failure sits beside the last line, ``--claim`` given twice keeps both,
and a mistyped claim gets the nearest ids."""

from __future__ import annotations

import subprocess
import sys

from kit.claims.show import failure_reason
from kit.paths import ROOT


def test_the_reason_names_the_first_failed_check_and_what_else_failed() -> None:
    line = failure_reason(["root digest abc differs from the expected def", "x", "y"],
                          ["A-001/digits"], ["B-083/kit", "B-084/kit"])
    assert line == ("verify: FAILED because root digest abc differs from the expected def "
                    "(and 2 more failed checks above); 1 claims differ: A-001/digits; "
                    "2 findings reversed under --strict-findings")


def _verify(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kit", "verify", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, check=False)


def test_a_wrong_expected_root_says_so_beside_the_last_line() -> None:
    proc = _verify("--expect-root", "0" * 64, "--claim", "A-052")
    lines = proc.stdout.rstrip().splitlines()
    assert proc.returncode == 1
    assert lines[-1].endswith("FAILED")
    assert lines[-2].startswith("verify: FAILED because root digest ")
    assert f"differs from the expected {'0' * 64}" in lines[-2]


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
