"""Typed relation-level verdicts, read on two axes: V/tolerance and the domain score D.

- ``inconclusive``: the artifact is missing or its metric is not finite;
- ``skip``: a precondition of the case is missing;
- ``out-of-relation-domain``: the transformed case lies outside the relation's validity
  domain (D above the card's ``domain_limit``);
- ``pass``: V <= tolerance;
- ``numerical-tolerance-issue``: V exceeds the tolerance by no more than the measuring
  floor, so threshold and resolution uncertainty decide it;
- ``fail``: V exceeds tolerance + floor inside the relation's domain.

D is a per-relation normalised coordinate (e.g. ``m / (m + 1)`` for a geometric mismatch
``m`` in median edge lengths); it is not comparable across relations.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

VERDICTS = ("pass", "fail", "skip", "out-of-relation-domain", "numerical-tolerance-issue",
            "inconclusive")


@dataclass(frozen=True)
class Verdict:
    """One execution of one relation on one case."""

    card: str
    case: str
    verdict: str
    violation: float | None
    tolerance: float
    floor: float
    ratio: float | None
    domain: float
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def domain_score(mismatch: float) -> float:
    """D = m / (m + 1) in [0, 1) for a non-negative mismatch m."""
    if mismatch < 0 or not math.isfinite(mismatch):
        raise ValueError(f"a domain mismatch must be finite and >= 0, not {mismatch}")
    return mismatch / (mismatch + 1.0)


def judge(card: str, case: str, violation: float | None, tolerance: float, floor: float = 0.0,
          domain: float = 0.0, domain_limit: float = 0.5, preconditions_met: bool = True
          ) -> Verdict:
    """The verdict of one case; every class of ``VERDICTS`` is reachable."""
    if tolerance <= 0:
        raise ValueError("a verdict tolerance must be positive")

    def make(verdict: str, reason: str) -> Verdict:
        ratio = violation / tolerance if violation is not None and math.isfinite(violation) \
            else None
        return Verdict(card, case, verdict, violation, tolerance, floor, ratio, domain, reason)

    if violation is None or not math.isfinite(violation):
        return make("inconclusive", "no finite metric from the artifacts")
    if not preconditions_met:
        return make("skip", "a precondition of this case is missing")
    if domain > domain_limit:
        return make("out-of-relation-domain", f"D {domain:.3g} > domain limit {domain_limit:g}")
    if violation <= tolerance:
        return make("pass", f"V {violation:.3g} <= tolerance {tolerance:.3g}")
    if violation <= tolerance + floor:
        return make("numerical-tolerance-issue",
                    f"V {violation:.3g} within the floor {floor:.3g} of the tolerance")
    return make("fail", f"V {violation:.3g} > tolerance {tolerance:.3g} + floor {floor:.3g}")
