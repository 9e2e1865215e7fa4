"""A null subject behind every rule: a rule that grants ``reproduced`` or a direction must
be one that a subject which learned nothing fails.

A substrate may name its ``null_evidence``: the evidence folder of the same study run on null
subjects (the SciML study's: every subject untrained, the seeded initial weights of the
same architectures, through the same probes; ``python -m kit sciml --models null``), or
build its null from its own evidence (``null_from: controls``, the drift study's detector
and fault rows: every injected fault undone, each fault case scored as its unmutated
control; ``kit.drift.shipped.ControlNull``). A claim whose evidence is the null already (a
false-alarm rate on the controls) names why in ``no_null``, shown in its note.
Every claim that passes there with ``reproduced`` or a direction is decided again, by the
same rule and recompute functions, on the null evidence. When the null passes too, the
agreement is structural (the architecture or the probe, not anything learned): the row is
``by design`` at most, never ``reproduced`` or a direction, and its note says "the null
passes too" with the null's value; except where the rule compares two of the drift study's
detectors on the same fault cases (detection rates, or localisation scorings) and the
finding exceeds the null (``kit.drift.beyond``: on the controls both detectors' false
alarms, or both scorings' ranks of the fault's layer, are decided by clean drift alone). A
value the null leaves undefined (``Undefined``: a precision where nothing was flagged)
decides nothing alone, but a rule is all of its halves: where another half fails on the null,
the null fails the rule (``kit.claims.ledger._decide_null``). A row the null cannot be
decided on keeps its status and says why in its note, so a reader sees which rows no null
stands behind; a null record whose summaries contradict its cases (``RecountError``) is a
failed check like any other, never a reason to keep a status.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kit.errors import KitError, RecountError
from kit.paths import ROOT

CAPPED = ("reproduced", "direction reproduced")  # what a passing null takes away
PASSES = ("reproduced", "by design", "direction reproduced", "consistent")


def why(exc: Exception) -> str:
    """A null's error as a note shows it: paths relative to the checkout."""
    return str(exc).replace(f"{ROOT}/", "")


def against_null(outcome: Any, decide: Any, who: str = "untrained subjects",
                 beyond: Any = None) -> Any:
    """``outcome`` (one claim on a substrate with a null), capped at ``by design`` when
    ``decide()`` (the same claim and rule on the null evidence) passes too; ``who``: the
    null's subjects, as the note names them. ``beyond``, where the rule has one, is asked
    when the null passes: ``beyond()`` gives (the finding exceeds the null, in words), and
    a finding that exceeds it keeps its status (``kit.drift.beyond``)."""
    if outcome.status not in CAPPED:
        return outcome
    try:
        null = decide()
    except RecountError:
        raise  # a null record that contradicts itself is a failed check, never a pass
    except KitError as exc:  # named, relative to the checkout, beside the kept status
        return replace(outcome, note=f"{outcome.note}; the null could not be decided "
                                     f"({why(exc)})")
    if null.status not in PASSES:
        said = f"the null fails this rule ({who}: {null.recomputed}, {null.status})"
        return replace(outcome, note=f"{outcome.note}; {said}")
    passes = f"the null passes too: {who} give {null.recomputed} ({null.status})"
    if beyond is not None:
        exceeds, how = beyond()
        if exceeds:
            return replace(outcome, note=f"{outcome.note}; {passes}, but the finding "
                                         f"exceeds it: {how}")
        passes = f"{passes}, and the finding does not exceed it: {how}"
    said = f"{passes}, so the agreement is structural; {outcome.status} without the null"
    return replace(outcome, status="by design", note=f"{said}; {outcome.note}")
