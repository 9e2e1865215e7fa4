"""The papers' own arithmetic (``kit.claims.arithmetic``): every printed number that follows
from other printed numbers of the same paper is recomputed from them within their printed
rounding; the drift paper's "more than an order of magnitude" is among the
inconsistencies, its row is graded on the numbers, and verify and the page list them."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from kit.claims import arithmetic
from kit.claims.ledger import Outcome
from kit.errors import KitError
from kit.paths import ROOT


def test_the_shipped_checks_find_where_the_papers_disagree_with_themselves() -> None:
    checks = {c.id: c for c in arithmetic.load_checks(ROOT)}
    assert len(checks) >= 50
    assert {i for i, c in checks.items() if not c.consistent} == {
        "PA-01", "PA-08", "PB-01", "PB-04", "PB-20"}
    widening = checks["PA-01"]
    assert widening.claim == "A-061"
    assert widening.recomputed == pytest.approx(4.99 / 0.77)
    assert widening.expected == "gt 10"


def entry(formula: str, printed: dict[str, Any], *inputs: tuple[str, float, int | None]
          ) -> dict[str, Any]:
    return {"id": "PA-99", "formula": formula, "printed": {"text": "x", "line": "L1", **printed},
            "inputs": [{"name": n, "value": v, "line": "L2", **({"decimals": d} if d else {})}
                       for n, v, d in inputs]}


def test_a_rounded_input_gets_the_benefit_of_its_rounding() -> None:
    """The mean of three 2-decimal rates is 82.7533, printed elsewhere as 82.7531: within the
    inputs' rounding, so consistent; as exact counts the same numbers would disagree."""
    rates = (("a", 75.22, 2), ("b", 85.15, 2), ("c", 87.89, 2))
    assert arithmetic.check(entry("mean(a, b, c)", {"value": 82.7531, "decimals": 4}, *rates),
                            "drift").consistent
    exact = tuple((n, v, None) for n, v, _ in rates)
    assert not arithmetic.check(entry("mean(a, b, c)", {"value": 82.7531, "decimals": 4},
                                      *exact), "drift").consistent


@pytest.mark.parametrize(("printed", "consistent"), [
    ({"value": 71.4, "decimals": 1}, True), ({"value": 71.5, "decimals": 1}, False),
    ({"gt": 70}, True), ({"gt": 72}, False), ({"lt": 72}, True), ({"within": [60, 70]}, False)])
def test_each_kind_of_printed_result_can_agree_or_not(printed: dict[str, Any],
                                                       consistent: bool) -> None:
    found = arithmetic.check(entry("100 * k / n", printed, ("k", 10, None), ("n", 14, None)),
                             "drift")
    assert found.consistent is consistent


def test_a_ratio_to_an_exact_zero_is_never_a_finite_number_of_orders() -> None:
    found = arithmetic.check(entry("log10(a / b)", {"within": [1.5, 2.5]}, ("a", 0.01, 2),
                                   ("b", 0, None)), "sciml")
    assert found.recomputed == float("inf")
    assert not found.consistent


@pytest.mark.parametrize("formula", ["__import__('os')", "a.real", "open('x')", "a if a else 1",
                                     "unknown + 1", "mean(a, k=1)"])
def test_a_formula_is_arithmetic_on_the_inputs_only(formula: str) -> None:
    with pytest.raises(KitError, match="not a number, an input's name or an allowed function"):
        arithmetic.evaluate(formula, {"a": 1.0})


def test_a_bad_file_is_a_failed_check_naming_it(tmp_path: Path) -> None:
    (tmp_path / arithmetic.FILE).parent.mkdir(parents=True)
    document = yaml.safe_load((ROOT / arithmetic.FILE).read_text())
    document["papers"][0]["checks"][0]["formula"] = "nested_hi - missing"
    (tmp_path / arithmetic.FILE).write_text(yaml.safe_dump(document))
    problems: list[str] = []
    outcomes, checks = arithmetic.attach([], tmp_path, problems)
    assert (outcomes, checks) == ([], [])
    [problem] = problems
    assert problem.startswith(f"{tmp_path / arithmetic.FILE}: check PA-01: 'missing'")


def test_the_row_a_check_names_carries_it_in_its_note() -> None:
    row = Outcome("A-061", "drift", "digits", "", "", "", "6.46", "rounds_to",
                  "direction reproduced", note="as graded")
    other = Outcome("A-062", "drift", "digits", "", "", "", "1", "exact", "reproduced")
    [noted, untouched], checks = arithmetic.attach([row, other], ROOT, [])
    assert noted.note.startswith("as graded; the paper disagrees with itself: PA-01 (drift "
                                 "paper, L153)")
    assert untouched == other
    assert sum(not c["consistent"] for c in checks) == 5


def test_verify_prints_the_count_and_the_page_lists_both_lines(tmp_path: Path) -> None:
    from kit.claims.verify import verify

    root = tmp_path / "repo"
    for name in ("claims", "manifests", "locks"):
        shutil.copytree(ROOT / name, root / name)
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    page = tmp_path / "page.html"
    assert verify(root, json_out=tmp_path / "out.json", page=page) == 0
    text = page.read_text()
    assert 'id="arithmetic"' in text
    assert "threshold uncertainty widens the interval by more than an order of magnitude" in text
    assert "nested_lo = -8.8 (L153)" in text
