"""How one rule decides one recomputed value, and what kind of agreement that is.

    decide    (passed, what was compared in words) for one rule and one value
    grade     the kind of agreement a rule grants when it passes (``GRADES``)
    status    the status of a decided rule (reproduced, by design, direction ...)
    weakest   the status of a row graded on several halves of a printed pair
    call      run one named recompute function (``FUNCTIONS``) on an evidence folder
    effect    the paper's number beside the kit's, with their ratio
    thresholds  where each threshold of a rule comes from (paper line, boundary, kit)

The rule kinds, the grades and the statuses are described in ``kit.claims.ledger``.
"""

from __future__ import annotations

import math
import operator
from typing import Any

from kit.corpus.recompute import RECOMPUTE_CORPUS
from kit.corpus.recompute_detectors import RECOMPUTE_DETECTORS
from kit.drift.recompute import RECOMPUTE
from kit.drift.recompute_realdrift import RECOMPUTE_REALDRIFT
from kit.errors import KitError, Undefined
from kit.sciml.recompute import RECOMPUTE_SCIML
from kit.values import Value

FUNCTIONS = {**RECOMPUTE, **RECOMPUTE_SCIML, **RECOMPUTE_REALDRIFT, **RECOMPUTE_CORPUS,
             **RECOMPUTE_DETECTORS}


OPS = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
       "eq": operator.eq}


WORDS = {"lt": "below", "le": "at most", "gt": "above", "ge": "at least", "eq": "equal to"}


# The weakest half decides a row graded on several halves (a printed pair).
RANK = {"differs": 0, "direction reversed": 1, "hypothesis fails": 1, "described": 2,
        "consistent": 3, "hypothesis holds": 4, "direction reproduced": 4, "by design": 5,
        "reproduced": 6}


CONSTANTS = {"drift.constant", "sciml.constant_value"}


# Two values within this relative distance are one value computed in two orders (the null's
# AUPRC of either detector is 18/19 by construction and differs in the last bit on some
# CPUs): a comparison treats them as equal, so no direction is read off rounding.
TIE = 1e-12


GRADES = {"exact": "value", "rounds_to": "value", "abs_tol": "value",
          "sign": "direction", "compare": "direction", "true": "direction",
          "agrees": "consistency", "within": "consistency", "describe": "description"}


def call(spec: dict[str, Any], evidence: Any) -> Value:
    """Run one named recompute function."""
    try:
        return FUNCTIONS[spec["function"]](evidence, **spec.get("args", {}))
    except KitError:
        raise
    except ZeroDivisionError as exc:  # a quotient of nothing: a value left undefined
        raise Undefined(f"{evidence.root}: {spec['function']}({spec.get('args', {})}) is "
                        f"undefined on this evidence (a quotient by zero: {exc})") from exc
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise KitError(f"{evidence.root}: {spec['function']}({spec.get('args', {})}) cannot be "
                       f"recomputed from this evidence ({type(exc).__name__}: {exc})") from exc


def _num(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise KitError(f"expected a number, recomputed {value!r}")
    return float(value)


def _close(a: float, b: float, decimals: int) -> bool:
    return abs(a - b) <= 0.5 * 10.0 ** -decimals + 1e-9


def decide(rule: dict[str, Any], value: Value, published: Any, evidence: Any
           ) -> tuple[bool, str]:
    """(passed, what was compared, in words) for one rule."""
    kind = rule["rule"]
    if kind == "describe":
        return True, "describes the substrate (no decision)"
    if kind == "exact":
        return value == published, f"equals {_show(published)}"
    if kind == "true":
        return value is True, "is true"
    if kind == "rounds_to":
        d = int(rule["decimals"])
        if isinstance(published, list):
            ok = isinstance(value, list) and len(value) == len(published) and all(
                _close(_num(a), _num(b), d) for a, b in zip(value, published, strict=True))
        else:
            ok = _close(_num(value), _num(published), d)
        return ok, f"rounds to {_show(published)} at {d} decimals"
    if kind == "abs_tol":
        return abs(_num(value) - _num(published)) <= float(rule["tol"]), \
            f"within {rule['tol']} of {_show(published)}"
    if kind == "sign":
        x = _num(value)
        ok = {"negative": x < 0, "positive": x > 0, "zero": x == 0,
              "nonnegative": x >= 0}[rule["sign"]]
        return ok, f"is {rule['sign']}"
    if kind == "compare":
        other, mine = _num(call(rule["than"], evidence)), _num(value)
        tied = mine != other and abs(mine - other) <= TIE * max(abs(mine), abs(other))
        return bool(OPS[rule["op"]](other if tied else mine, other)), \
            f"{WORDS[rule['op']]} {_show(other)} ({_name(rule['than'])})" + \
            (" (equal to within the last bits of a double, so tied)" if tied else "")
    if kind == "agrees":
        recorded = call(rule["than"], evidence)
        return _agree(value, recorded), \
            f"agrees with {_show(recorded)} ({_name(rule['than'])})"
    if kind == "within":
        bounds = call(rule["interval"], evidence)
        if not isinstance(bounds, list) or len(bounds) != 2:
            raise KitError(f"{rule['interval']['function']} did not give an interval")
        lo, hi = _num(bounds[0]), _num(bounds[1])
        return lo <= _num(value) <= hi, \
            f"within [{lo:.4g}, {hi:.4g}] ({_name(rule['interval'])})"
    raise KitError(f"unknown rule {kind!r}")


def grade(rule: dict[str, Any]) -> str:
    """What kind of agreement a rule grants when it passes: its ``grade``, else by kind,
    except that a point inside a fixed interval (or a fixed point inside an interval) is
    a finding's direction, not a point inside its own interval."""
    if "not_a_finding" in rule:
        return "not a finding"
    if "grade" in rule:
        return str(rule["grade"])
    if rule["rule"] == "within" and CONSTANTS & {rule["interval"]["function"],
                                                 rule.get("compute", {}).get("function")}:
        return "direction"
    return GRADES[rule["rule"]]


def status(rule_grade: str, passed: bool, paper: bool) -> str:
    """The status of one decided rule: what kind of agreement (or disagreement) it is."""
    if rule_grade == "description":
        return "described"
    if rule_grade == "hypothesis":
        return "hypothesis holds" if passed else "hypothesis fails"
    if rule_grade == "not a finding":  # a hypothesis read off the kit's own run or selection
        return "consistent" if passed else "hypothesis fails"
    if passed:
        return {"value": "reproduced", "design": "by design",
                "direction": "direction reproduced", "consistency": "consistent"}[rule_grade]
    if rule_grade == "direction" and not paper:
        return "direction reversed"
    return "differs"


def _name(spec: dict[str, Any]) -> str:
    args = ", ".join(f"{k}={v}" for k, v in spec.get("args", {}).items())
    return f"{spec['function']}({args})"


def _agree(a: Value, b: Value) -> bool:
    if isinstance(a, list) or isinstance(b, list):
        return isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(
            _agree(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    x, y = _num(a), _num(b)
    return abs(x - y) <= 1e-9 * max(abs(x), abs(y)) or x == y


def _show(value: Value) -> str:
    if isinstance(value, (bool, str)):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def effect(published: Any, value: Value) -> dict[str, Any] | None:
    """The paper's number beside the kit's, with their ratio where both are scalars."""
    def numeric(x: Any) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
    if numeric(published) and numeric(value):
        ratio = _num(value) / float(published) if published != 0 else None
        return {"paper": published, "kit": value,
                "ratio": None if ratio is None else round(ratio, 4)}
    if (isinstance(published, list) and isinstance(value, list)
            and len(published) == len(value) and all(map(numeric, published + value))):
        return {"paper": published, "kit": value, "ratio": None}
    return None


def weakest(halves: list[str]) -> str:
    """The status of a row graded on several halves: the weakest half that decides
    something. A half equal by design or only described (the n of a printed k/n) is
    shown beside but neither lends a measured half its status nor takes it away; it
    decides only when no half is measured, and fails the row when it fails."""
    measured = [h for h in halves if h not in ("by design", "described")]
    return min(measured or halves, key=RANK.__getitem__)


def thresholds(rule: dict[str, Any]) -> list[str]:
    """Where every threshold of a rule (its finding, halves and revision) comes from."""
    found = []
    for part in (rule, rule.get("finding"), *rule.get("parts", ()), rule.get("revised")):
        if part is not None and "threshold" in part:
            source = part["threshold"]
            detail = source.get("line") or source.get("why")
            found.append(f"{source['source']}: {detail}")
    return found
