"""The papers' own arithmetic: every printed number that follows from other printed numbers
of the same paper, recomputed from those printed inputs.

``claims/papers/arithmetic.yaml`` (schema ``arithmetic.schema.json``, under the evidence
root) lists each such number: the paper and line it is printed at, its printed inputs
(each with its line), the formula that derives it, and what the paper says of the result:

- a printed value with its printed ``decimals``: it agrees when some value the printed
  inputs allow rounds to it;
- a prose quantifier ("more than an order of magnitude", "roughly a factor of three"):
  the bound it states (``gt``, ``ge``, ``lt``, ``le``, or ``within`` a closed range),
  which some value the printed inputs allow meets, or none does.

An input printed with ``decimals`` stands for any value within half a unit of its last
digit; the formula is evaluated at every corner of those ranges (and at the printed
values), and the paper is given the benefit of its own rounding: a check is
``inconsistent`` only when no value between the smallest and the largest corner agrees
with the printed result (the formulas are monotone in each input, so the corners bound
them). Counts are exact.

A check whose paper disagrees with itself is ``inconsistent``; verify counts them in its
summary, the claims page lists each with both lines, and a ledger row the check names
(``claim``) is graded on the numbers the paper printed, not on its prose, with the check
in its note. Nothing here reads evidence: it is the paper checked against itself.

Formulas are arithmetic on the inputs' names only (``+ - * / **``, parentheses, numbers and
the functions of ``FUNCTIONS``), parsed with ``ast`` and evaluated without ``eval``.
"""

from __future__ import annotations

import ast
import itertools
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kit import schema
from kit.errors import KitError
from kit.files import read_yaml
from kit.stats import clopper_pearson, wilson

FILE = Path("claims") / "papers" / "arithmetic.yaml"
QUANTIFIERS: dict[str, Callable[[float, float], bool]] = {
    "gt": operator.gt, "ge": operator.ge, "lt": operator.lt, "le": operator.le}
OPERATORS: dict[type, Callable[..., float]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.Pow: operator.pow, ast.USub: operator.neg}


def _interval(method: Callable[[int, int], tuple[float, float]], end: int
              ) -> Callable[[float, float], float]:
    return lambda k, n: method(int(k), int(n))[end]


def _log10(x: float) -> float:
    return math.log10(x) if x > 0 else (math.inf if x == math.inf else math.nan)


FUNCTIONS: dict[str, Callable[..., float]] = {
    "mean": lambda *xs: sum(xs) / len(xs), "min": min, "max": max, "abs": abs,
    "log10": _log10, "wilson_lo": _interval(wilson, 0), "wilson_hi": _interval(wilson, 1),
    "exact_lo": _interval(clopper_pearson, 0), "exact_hi": _interval(clopper_pearson, 1)}


@dataclass(frozen=True)
class Check:
    """One derived printed number and what the paper's own inputs give."""

    id: str
    paper: str
    line: str
    printed: str
    claim: str | None
    recomputed: float
    consistent: bool
    expected: str  # the printed value or the quantifier's bound, as compared
    inputs: str  # every input with its line, for the page

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "paper": self.paper, "line": self.line, "printed": self.printed,
                "claim": self.claim, "recomputed": f"{self.recomputed:.6g}",
                "consistent": self.consistent, "expected": self.expected,
                "inputs": self.inputs}


def evaluate(formula: str, names: dict[str, float]) -> float:
    """``formula`` over ``names`` (module docstring); a KitError names what is not allowed."""
    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return float(node.value)
        if isinstance(node, ast.Name) and node.id in names:
            return names[node.id]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            top, bottom = walk(node.left), walk(node.right)
            if bottom == 0:  # a ratio to an exact zero: infinite, or undefined for 0/0
                return math.copysign(math.inf, top) if top else math.nan
            return top / bottom
        if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
            return OPERATORS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in OPERATORS:
            return OPERATORS[type(node.op)](walk(node.operand))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in FUNCTIONS and not node.keywords:
            return float(FUNCTIONS[node.func.id](*(walk(a) for a in node.args)))
        raise KitError(f"{ast.unparse(node)!r} in {formula!r}: not a number, an input's name "
                       f"or an allowed function ({', '.join(sorted(FUNCTIONS))})")

    try:
        tree = ast.parse(formula, mode="eval")
    except SyntaxError as exc:
        raise KitError(f"{formula!r}: not a formula ({exc.msg})") from exc
    return walk(tree)


def corners(entry: dict[str, Any]) -> list[dict[str, float]]:
    """The printed inputs, then every corner of their rounding ranges."""
    printed = {i["name"]: float(i["value"]) for i in entry["inputs"]}
    spans = [(i["name"], 0.5 * 10.0 ** -int(i["decimals"])) for i in entry["inputs"]
             if "decimals" in i]
    found = [printed]
    for signs in itertools.product((-1, 1), repeat=len(spans)):
        found.append({**printed, **{name: printed[name] + sign * half
                                    for (name, half), sign in zip(spans, signs, strict=True)}})
    return found


def _agrees(low: float, high: float, printed: dict[str, Any]) -> bool:
    """Whether some value in [low, high] (what the printed inputs allow) gives the printed
    result."""
    if "value" in printed:
        half = 0.5 * 10.0 ** -int(printed["decimals"])
        value, slack = float(printed["value"]), 1e-9 * max(1.0, abs(low), abs(high))
        return low - slack <= value + half and value - half <= high + slack
    if "within" in printed:
        bottom, top = printed["within"]
        return bool(low <= top and bottom <= high)
    word = next(k for k in QUANTIFIERS if k in printed)
    return QUANTIFIERS[word](high if word in ("gt", "ge") else low, float(printed[word]))


def _expected(printed: dict[str, Any]) -> str:
    if "value" in printed:
        return f"{float(printed['value']):.{int(printed['decimals'])}f}"
    if "within" in printed:
        return f"within [{printed['within'][0]:g}, {printed['within'][1]:g}]"
    word = next(k for k in QUANTIFIERS if k in printed)
    return f"{word} {float(printed[word]):g}"


def check(entry: dict[str, Any], paper: str) -> Check:
    """One entry of the file, recomputed at its printed inputs and compared at every
    corner of their rounding (module docstring)."""
    values = [evaluate(entry["formula"], names) for names in corners(entry)]
    printed = entry["printed"]
    finite = [v for v in values if not math.isnan(v)]
    consistent = bool(finite) and _agrees(min(finite), max(finite), printed)
    inputs = "; ".join(f"{i['name']} = {i['value']:g} ({i['line']})" for i in entry["inputs"])
    return Check(entry["id"], paper, printed["line"], printed["text"], entry.get("claim"),
                 values[0], consistent, _expected(printed), inputs)


def load_checks(root: Path, only: tuple[str, ...] = ()) -> list[Check]:
    """Every check of the file (or only those of the ``only`` claims; the whole file is
    still read and validated), recomputed (a KitError naming the file and the entry when
    it does not load or an entry cannot be computed)."""
    path = root / FILE
    document = read_yaml(path)
    schema.check(document, "arithmetic.schema.json", path)
    found = []
    for paper in document["papers"]:
        for entry in paper["checks"]:
            if only and entry.get("claim") not in only:
                continue
            try:
                found.append(check(entry, paper["paper"]))
            except (KitError, ZeroDivisionError, ValueError) as exc:
                raise KitError(f"{path}: check {entry['id']}: {exc}") from exc
    ids = [c.id for c in found]
    if len(set(ids)) != len(ids):
        raise KitError(f"{path}: a check id appears twice")
    return found


def inconsistent_by_claim(checks: list[Check]) -> dict[str, list[Check]]:
    """The inconsistent checks that name a ledger row, by claim id."""
    out: dict[str, list[Check]] = {}
    for c in checks:
        if not c.consistent and c.claim:
            out.setdefault(c.claim, []).append(c)
    return out


def describe(c: Check) -> str:
    """One line: the printed number, what its printed inputs give, and both lines."""
    agrees = "agrees" if c.consistent else "DISAGREES"
    return (f"{c.id} ({c.paper} paper, {c.line}): printed {c.printed!r} ({c.expected}); "
            f"its printed inputs give {c.recomputed:.6g} [{c.inputs}]: {agrees}")


def attach(outcomes: list[Any], root: Path, problems: list[str], only: tuple[str, ...] = ()
           ) -> tuple[list[Any], list[dict[str, Any]]]:
    """The outcomes, each row an inconsistent check names with the check in its note, and
    every check (of the ``only`` claims, when named) for verify's report. A file that does
    not load is a failed check, never a pass."""
    if not (root / FILE).is_file():  # a checkout without it (the manifests name a deletion)
        return outcomes, []
    try:
        checks = load_checks(root, only)
    except KitError as exc:
        problems.append(str(exc))
        return outcomes, []
    by_claim = inconsistent_by_claim(checks)
    noted = []
    for outcome in outcomes:
        said = "; ".join(f"the paper disagrees with itself: {describe(c)}"
                         for c in by_claim.get(outcome.claim, []))
        if said:
            outcome = replace(outcome, note=f"{outcome.note}; {said}" if outcome.note else said)
        noted.append(outcome)
    return noted, [c.as_dict() for c in checks]


def summary_line(checks: list[dict[str, Any]]) -> str:
    """verify's line: how many printed numbers were recomputed, and which disagree."""
    wrong = [c["id"] for c in checks if not c["consistent"]]
    numbers = "printed number" if len(checks) == 1 else "printed numbers"
    return (f"verify: the papers' own arithmetic: {len(checks)} {numbers} recomputed "
            f"from the papers' own printed inputs ({FILE}), {len(wrong)} inconsistent"
            + (f": {', '.join(wrong)}" if wrong else ""))
