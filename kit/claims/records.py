"""The shipped evidence records the ledgers point at, checked by ``python -m kit verify``
(``kit.claims.verify``): each against its schema, a drift folder's protocol copy, and every
stored summary or decision against its recount from the per-case evidence (the drift
study's, ``kit.drift.recount``; the corpus's, ``kit.corpus.recount``); the SciML MR cards
against theirs. Every problem is collected, none stops the rest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kit import papers
from kit.claims.coverage import collect, read_shipped
from kit.drift.protocol import load_protocol
from kit.schema import problems as schema_problems


def check_schemas(root: Path, ledgers: list[dict[str, Any]], recounts: str = "summaries"
                  ) -> list[str]:
    """Problems with the evidence records and protocol copies the ledgers point at, and
    with the SciML MR cards where the SciML ledger is one of them (every violation of every
    file, empty when all validate);
    ``recounts``: the stored summaries and decisions against their recount
    (``summaries``), with the drift localisation fields and the Polygraphy verdicts run
    again too (``deep``), or neither (``none``: ``verify --claim`` leaves them to the full
    run)."""
    problems = []
    for ledger in ledgers:
        for substrate in ledger["substrates"].values():
            problems += collect(_record_problems, root / substrate["evidence"],
                                ledger["study"], recounts)
    if recounts != "none":
        problems += collect(split_copies, root, ledgers)
    if any(ledger["study"] == "sciml" for ledger in ledgers):
        from kit.sciml.cards import CARDS

        for card in sorted(CARDS.glob("*.yaml")):
            problems += collect(_card_problems, card)
    return problems + papers.problems(root, ledgers)


SPLIT = Path("split") / "split.json"


def split_copies(root: Path, ledgers: list[dict[str, Any]]) -> list[str]:
    """The split each study on the digits models ships beside its records (the detector
    study's, the sweep's) against the drift study's, which is recounted from its rows
    (``kit.drift.recount_records``): every run made it from one protocol and seed, so a
    copy that differs in a byte was changed after its run."""
    folders = [root / s["evidence"] for ledger in ledgers for s in ledger["substrates"].values()]
    drift = [root / ledger["substrates"]["digits"]["evidence"] / SPLIT for ledger in ledgers
             if ledger["study"] == "drift" and "digits" in ledger["substrates"]]
    if not drift or not drift[0].is_file():
        return []  # no drift evidence on the digits models: not run here, as the rest
    original = drift[0].read_bytes()
    return [f"{folder / SPLIT}: differs from the drift study's split ({drift[0]}), which "
            "every run on the digits models makes from the same protocol and seed; restore "
            "it from git" for folder in folders if (folder / SPLIT).is_file()
            and folder / SPLIT != drift[0] and (folder / SPLIT).read_bytes() != original]


def _card_problems(path: Path) -> list[str]:
    from kit.sciml.cards import load_card

    load_card(path)  # raises KitError naming the card and the field
    return []


def _protocol_problems(path: Path) -> list[str]:
    load_protocol(path)  # raises KitError naming the file and the field
    return []


def _record_problems(folder: Path, study: str, recounts: str = "summaries") -> list[str]:
    """One evidence folder: its record against its schema, a drift folder's protocol copy
    and its stored summaries against their recount (``kit.drift.recount``), a corpus
    folder's records against theirs (``kit.corpus.recount``) and, with ``deep``, the
    sweep's drift-cell rows' Polygraphy alarms; absent records are not run here, not
    problems."""
    if study == "sciml":
        verdicts = folder / "ledger.json"
        return schema_problems(read_shipped(verdicts), "verdict_ledger.schema.json",
                               verdicts) if verdicts.is_file() else []
    if study == "realdrift":
        return _sweep_deep(folder) if recounts == "deep" else []
    if study == "corpus":
        if recounts == "none":
            return []
        from kit.claims.ledger import _evidence
        from kit.corpus import recount as corpus_recount
        from kit.corpus.recompute import CorpusEvidence

        return corpus_recount.problems(_evidence(folder, CorpusEvidence), recounts == "deep")
    record = folder / "score" / "score.json"
    if not record.is_file():
        return []
    problems = collect(lambda: schema_problems(read_shipped(record), "score_record.schema.json",
                                               record))
    problems += collect(_protocol_problems, folder / "score" / "protocol.yaml")
    if problems or recounts == "none":
        return problems
    from kit.claims.ledger import _evidence
    from kit.drift import recount
    from kit.drift.shipped import Evidence

    # the stored bootstrap summaries
    return recount.check(_evidence(folder, Evidence), recounts == "deep")


def _sweep_deep(folder: Path) -> list[str]:
    """``verify --deep`` on the sweep: its drift-cell rows' Polygraphy alarms too
    (``kit.drift.recompute_realdrift.recount_pair``); a plain run checks the rest of those
    rows when a claim first reads them."""
    from kit.drift.recompute_realdrift import drift_beside, recount_pair
    from kit.drift.shipped import Evidence
    from kit.files import read_json

    cells, drift = folder / "sweep" / "cells.json", drift_beside(folder)
    if not cells.is_file() or not (drift / "score" / "score.json").is_file():
        return []
    return [f"{cells}: {p}" for p in recount_pair(read_json(cells), Evidence(drift), deep=True)]
