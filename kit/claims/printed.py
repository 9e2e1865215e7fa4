"""The kit's number in the form the paper printed its own.

A claim grades one printed number (the ledger's ``value``) that sits inside a printed
phrase: ``95% CI [0.975,0.992]``, ``conservation 1.00/0.81``, ``180/180 fail``, ``71.4%``.
The kit's number is shown the same way: at the printed token's decimals, with its ``%``,
and, where the token is the first of a printed pair (``a/b``, ``k/n``), beside the kit's
own second number (the rule's further half whose printed value is the pair's second: the
recall beside a precision, the kit's n beside its count), so a reader never compares
``168`` with ``180/180`` or ``1`` with ``1.00/0.81``. An interval the kit computed as one
is shown as an interval at the printed decimals; an interval's endpoint stays one number
at the interval's decimals; the confidence level before it (``95%``) is not the claim's
number.

``printed(published, paper, kit, halves)`` returns that text, or None when the published
phrase holds no token equal to the paper's value or the kit's value is not a number (the
kit's own text is then shown as it is).
"""

from __future__ import annotations

import math
import numbers
import re
from typing import Any

TOKEN = re.compile(r"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?")
LEVEL = re.compile(r"\s*%\s*(?:CI|confidence|Wilson|Clopper)", re.IGNORECASE)
NUMBER = r"[-+]?\d[\d,]*(?:\.\d+)?"
INTERVAL = re.compile(rf"\[\s*({NUMBER})\s*(%?)\s*,\s*({NUMBER})\s*(%?)\s*\]")
PAIR = re.compile(r"\s*/\s*[-+]?\d[\d,]*(?:\.\d+)?")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    return float(value) if math.isfinite(float(value)) else None


def _token(published: str, paper: float) -> re.Match[str] | None:
    """The printed token that is the paper's graded value (not a confidence level)."""
    for found in TOKEN.finditer(published):
        if LEVEL.match(published, found.end()):
            continue
        printed = float(found.group().replace(",", ""))
        if math.isclose(printed, paper, rel_tol=1e-9, abs_tol=1e-12):
            return found
    return None


def _form(value: float, decimals: int) -> str:
    return f"{value:,.{decimals}f}"


def _decimals(token: str) -> int:
    return len(token.partition(".")[2])


def _sign(token: str, shown: str) -> str:
    """A printed ``+`` kept before a kit's number that is not negative."""
    return "+" + shown if token.startswith("+") and not shown.startswith("-") else shown


def printed(published: str, paper: Any, kit: Any, halves: list[dict[str, Any]] | None = None
            ) -> str | None:
    """The kit's number in the printed form of ``published`` (module docstring)."""
    interval = INTERVAL.search(published)
    if interval is not None and isinstance(kit, (list, tuple)) and len(kit) == 2:
        ends = [end for end in map(_number, kit) if end is not None]  # as the paper's
        if len(ends) == 2:
            return "[" + ", ".join(
                _sign(interval.group(i), _form(end, _decimals(interval.group(i))))
                + interval.group(i + 1) for i, end in zip((1, 3), ends, strict=True)) + "]"
    paper_value, kit_value = _number(paper), _number(kit)
    if paper_value is None or kit_value is None:
        return None
    found = _token(published, paper_value)
    if found is None:
        return None
    shown = _sign(found.group(), _form(kit_value, _decimals(found.group())))
    after = published[found.end():]
    if after.startswith("%"):
        return shown + "%"
    pair = PAIR.match(after)
    if pair is not None:  # a printed pair: the half the paper printed second, if graded
        second = pair.group().split("/", 1)[1].strip()
        printed_second = float(second.replace(",", ""))
        for half in halves or []:
            other, theirs = _number(half.get("kit")), _number(half.get("paper"))
            if other is not None and theirs is not None and math.isclose(
                    theirs, printed_second, rel_tol=1e-9, abs_tol=1e-12):
                return f"{shown}/{_form(other, _decimals(second))}"
    return shown
