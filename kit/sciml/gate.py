"""The admissibility gate: four conditions, each decided from recorded evidence.

A candidate relation is admissible when (i) it has a physical or software basis, (ii) its
transformation preconditions hold, (iii) boundary conditions and output mapping stay
compatible, and (iv) it is numerically decidable: its tolerance exceeds the measuring
operator's own floor by the card's margin. Decisions:

- ``rejected``: (i) missing from the card or measured not to hold for the data
  (``GateFindings.basis``), or (ii)/(iii) fail outright;
- ``deferred``: nothing fails outright but some evidence is missing, or (iv) cannot be
  established (no measured floor, or the tolerance does not dominate it);
- ``retained-as-OOD-stress``: (ii) or (iii) hold only approximately; the relation runs as a
  stress probe against its mapping floor, not as an exact relation;
- ``retained-executable``: all four hold.

The six rubric criteria are recorded beside the four conditions they make auditable.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

HOLDS, APPROXIMATE, FAILS, UNKNOWN = "holds", "approximate", "fails", "unknown"
DECISIONS = ("retained-executable", "retained-as-OOD-stress", "rejected", "deferred")


@dataclass(frozen=True)
class GateFindings:
    """What was measured before the gate decides (each field a finding, not a wish)."""

    preconditions: dict[str, str]          # precondition text -> holds/approximate/fails
    boundary_compatibility: str            # holds / approximate / fails
    output_mapping: str                    # holds / approximate / fails
    floor: float | None                    # measured floor of the measuring operator
    tolerance: float | None                # the verdict tolerance it must dominate
    notes: dict[str, str] = field(default_factory=dict)
    basis: str = HOLDS                     # whether the card's basis holds for this data,
    basis_why: str = ""                    # where it was measured (e.g. density variation)


@dataclass(frozen=True)
class Decision:
    """The gate's decision with every condition and rubric criterion recorded."""

    card: str
    decision: str
    conditions: dict[str, dict[str, str]]
    rubric: dict[str, str]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _worst(states: list[str]) -> str:
    for state in (FAILS, UNKNOWN, APPROXIMATE):
        if state in states:
            return state
    return HOLDS


def decision_of(basis: str, pre: str, compat: str, decidable: str) -> str:
    """The decision from the four conditions' states (what ``decide`` records beside it,
    so verify recounts it from them)."""
    if basis == FAILS or FAILS in (pre, compat):
        return "rejected"
    if UNKNOWN in (pre, compat) or decidable != HOLDS:
        return "deferred"
    if APPROXIMATE in (pre, compat):
        return "retained-as-OOD-stress"
    return "retained-executable"


def decide(card: dict[str, Any], evidence: GateFindings) -> Decision:
    """Apply the four conditions to one card."""
    margin = float(card["tolerance"].get("floor_margin", 1.0))
    basis = evidence.basis if card.get("basis", "").strip() else FAILS
    pre = _worst(list(evidence.preconditions.values())) if evidence.preconditions else HOLDS
    missing = [p for p in card["preconditions"] if p not in evidence.preconditions]
    if missing:
        pre = UNKNOWN
    compat = _worst([evidence.boundary_compatibility, evidence.output_mapping])
    if evidence.floor is None or evidence.tolerance is None:
        decidable, why = UNKNOWN, "no measured floor or tolerance"
    elif evidence.tolerance > margin * evidence.floor:
        decidable, why = HOLDS, (f"tolerance {evidence.tolerance:.3g} > {margin:g} x floor "
                                 f"{evidence.floor:.3g}")
    else:
        decidable, why = FAILS, (f"tolerance {evidence.tolerance:.3g} does not dominate "
                                 f"{margin:g} x floor {evidence.floor:.3g}")
    conditions = {
        "basis": {"state": basis, "why": (evidence.basis_why + "; " if evidence.basis_why
                                          else "") + card.get("basis", "")[:200]},
        "preconditions": {"state": pre, "why": "; ".join(
            f"{k}: {v}" for k, v in evidence.preconditions.items()) +
            (f"; not measured: {missing}" if missing else "")},
        "boundary_and_mapping": {"state": compat, "why":
                                 f"boundary {evidence.boundary_compatibility}, "
                                 f"mapping {evidence.output_mapping}"},
        "numerically_decidable": {"state": decidable, "why": why},
    }
    decision = decision_of(basis, pre, compat, decidable)
    rubric = {
        "physical basis": basis,
        "transformation preconditions": pre,
        "boundary-condition compatibility": evidence.boundary_compatibility,
        "output mapping": evidence.output_mapping,
        "metric and tolerance": decidable,
        "failure diagnosability": HOLDS if card.get("fault_interpretation") else FAILS,
    }
    return Decision(card["id"], decision, conditions, rubric)
