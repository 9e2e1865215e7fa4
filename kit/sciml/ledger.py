"""The verdict ledger: gate decisions and verdicts, counted per card, schema-checked.

A verdict whose card the gate did not retain cannot enter the ledger: a rejected or
deferred relation is recorded as a decision, never executed as if it were admitted.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit import schema
from kit.errors import KitError
from kit.files import canonical_json, write_atomic
from kit.schema import SCHEMAS
from kit.sciml.gate import Decision
from kit.sciml.verdicts import VERDICTS, Verdict

SCHEMA = SCHEMAS / "verdict_ledger.schema.json"
RETAINED = ("retained-executable", "retained-as-OOD-stress")
# The note of the null run (``Config.null``): ship files it as the ``null`` substrate.
NULL_NOTE = ("Null subjects: every subject untrained (the seeded initial weights of the same "
             "architectures) and run through the same probes, so that every rule can be "
             "checked against a subject that learned nothing.")


@dataclass
class Ledger:
    """Decisions and verdicts of one SciML run."""

    subjects_note: str
    decisions: dict[str, Decision] = field(default_factory=dict)
    verdicts: list[Verdict] = field(default_factory=list)

    def decide(self, decision: Decision) -> None:
        if decision.card in self.decisions:
            raise KitError(f"card {decision.card!r} already has a gate decision")
        self.decisions[decision.card] = decision

    def add(self, verdict: Verdict) -> None:
        decision = self.decisions.get(verdict.card)
        if decision is None or decision.decision not in RETAINED:
            state = decision.decision if decision else "no gate decision"
            raise KitError(f"card {verdict.card!r} ({state}) cannot carry verdicts")
        self.verdicts.append(verdict)

    def counts(self) -> dict[str, dict[str, int]]:
        table: dict[str, Counter[str]] = {}
        for verdict in self.verdicts:
            table.setdefault(verdict.card, Counter())[verdict.verdict] += 1
        return {card: {v: counter[v] for v in VERDICTS if counter[v]}
                for card, counter in sorted(table.items())}

    def as_dict(self) -> dict[str, Any]:
        return {"study": "sciml", "subjects_note": self.subjects_note,
                "decisions": [d.as_dict() for _, d in sorted(self.decisions.items())],
                "verdicts": [v.as_dict() for v in self.verdicts], "counts": self.counts()}

    def write(self, path: Path) -> Path:
        """Validate against the schema, then write canonical JSON atomically."""
        record = self.as_dict()
        schema.check(record, SCHEMA.name, path)
        write_atomic(path, canonical_json(record))
        return path
