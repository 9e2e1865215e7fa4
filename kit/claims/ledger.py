"""Claim ledgers: load and validate them, and decide each claim by its rule.

A ledger (``claims/<study>.yaml``, ``kit/schemas/claim_ledger.schema.json``) lists every
number of a paper: the value as printed, the named recompute function that recomputes it
from raw evidence (its ``args`` bound to the function's signature when the ledger loads),
and per substrate the rule that decides it with its reason.

Rules: ``exact``; ``rounds_to`` (to ``decimals`` places, the printed precision;
elementwise for pairs); ``abs_tol``; ``sign``; ``compare`` (``op`` against another
recomputed number ``than``); ``agrees`` (equal, to a relative 1e-9 and elementwise, to
another recomputed quantity ``than``, typically the value the run recorded); ``within``
(inside an interval another function recomputes); ``true`` (a boolean finding must hold);
``describe`` (no decision: the number describes the substrate). A rule may name its own
``compute`` (e.g. the upper end of an interval, whose sign is the finding).

Each rule grants one kind of agreement when it passes (``GRADES``, overridable per rule
with ``grade``), and the status of a claim on a substrate says which kind it is:

    reproduced            a measured value equal to the published value at its printed
                          precision
    by design             equal to the published value because the kit was built to the
                          paper's design (counts of mutants, trials, images, structural
                          checks, gate decisions the cards fix); never counted as reproduced
    direction reproduced  a stand-in substrate shows the finding the number supports
    direction reversed    that finding does not hold on the stand-in
    described             the number describes the stand-in; shown beside the paper's
    consistent            internal consistency only (recomputed equals recorded, a point
                          inside its own interval); never counted as a reproduction
    hypothesis holds      a hypothesis the kit froze before its study ran (no paper value:
    hypothesis fails      the real-drift sweep) holds, or fails, by its decision rule
    differs               a rule failed on the paper's substrate, a value or consistency
                          rule failed anywhere (both numbers shown)
    not run here          the evidence is absent, or no substrate can hold it (with why)

A rule with a ``finding`` (the paper's direction, kept where it was not what the rule
first decided) takes its status from the finding; its own rule (an interval or an
agreement with the run's record) must still pass, else the claim ``differs``.

A printed pair (precision/recall, both ends of an interval) is graded on every half: the
rule grades the first half and each of its ``parts`` (its own ``label``, printed ``value``
and ``compute``) another; the row's status is the weakest measured half's (``RANK``,
``weakest``): a half equal by design or only described, such as the n of a printed k/n,
is shown beside and fails the row when it fails, but does not stand in for a measurement;
a row with a half only described (an n that is not the paper's) is a direction at most.

Every threshold a deciding rule compares against carries its ``threshold`` source:
``paper`` (with the line it is printed on), ``boundary`` (a natural boundary: zero, one,
a sign) or ``kit`` (the kit's own choice, with its reason).

A hypothesis (grade ``hypothesis``) is decided by its decision rule as first committed,
before any of its evidence; a later revision is its ``revised`` rule (with the
``revision``: commit, date, why, and whether evidence existed), decided and shown beside,
never in its place. A hypothesis that follows from the study's own selection rule or
whose inputs were read off the kit's own run is ``not_a_finding`` (with why): when it
holds it is internal consistency (``consistent``), never counted as a hypothesis that
holds; when it fails, it fails as a hypothesis (a result, not an integrity failure).
"""

from __future__ import annotations

import inspect
import math
import numbers
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from kit.claims.null import PASSES, against_null, why
from kit.claims.printed import printed
from kit.claims.rules import CONSTANTS as CONSTANTS
from kit.claims.rules import FUNCTIONS as FUNCTIONS
from kit.claims.rules import GRADES as GRADES
from kit.claims.rules import RANK as RANK
from kit.claims.rules import _name, _show, call, decide, effect, grade, status, thresholds
from kit.claims.rules import weakest as weakest
from kit.corpus.recompute import CorpusEvidence
from kit.drift.beyond import exceeds, pair
from kit.drift.recompute_realdrift import SweepEvidence
from kit.drift.shipped import ControlNull, Evidence
from kit.errors import KitError, Undefined
from kit.papers import read_ledger
from kit.sciml.recompute import SciEvidence

# Per study: how its evidence folder is read, and the file whose presence means "run here"
# (a substrate may name its own ``marker``).
STUDIES: dict[str, tuple[type[Evidence] | type[SciEvidence] | type[SweepEvidence]
                         | type[CorpusEvidence], str]] = {
    "drift": (Evidence, "score/score.json"), "sciml": (SciEvidence, "ledger.json"),
    "realdrift": (SweepEvidence, "sweep/cells.json"),
    "corpus": (CorpusEvidence, "corpus/cases.json")}

# The nulls a substrate builds from its own evidence (``null_from: controls``).
NULLS = {"controls": ControlNull}

STATUSES = ("reproduced", "by design", "direction reproduced", "direction reversed", "described",
            "consistent", "hypothesis holds", "hypothesis fails", "differs", "not run here")
# The statuses that claim agreement with the paper: each such rule must be able to fail.
AGREEMENT = ("reproduced", "by design", "direction reproduced")


def load_ledger(path: Path) -> dict[str, Any]:
    """Read and validate a ledger (``kit.papers.read_ledger``) and bind every recompute
    function it names; errors name the file, the claim and the field."""
    ledger = read_ledger(path)
    for claim in ledger["claims"]:
        for spec in _specs(claim):
            _bind(spec, f"{path}: claim {claim['id']}")
        for substrate in claim.get("rules", {}):
            if substrate not in ledger["substrates"]:
                raise KitError(f"{path}: claim {claim['id']}: unknown substrate {substrate!r}")
    return ledger


def _bind(spec: dict[str, Any], where: str) -> None:
    """Refuse a spec whose function is unknown or whose args do not fit its signature."""
    function = FUNCTIONS.get(spec["function"])
    if function is None:
        raise KitError(f"{where}: unknown function {spec['function']!r}")
    try:
        inspect.signature(function).bind(None, **spec.get("args", {}))
    except TypeError as exc:
        raise KitError(f"{where}: {spec['function']}: arguments {spec.get('args', {})} do "
                       f"not fit its signature ({exc})") from exc


def _specs(claim: dict[str, Any]) -> list[dict[str, Any]]:
    found = [claim["compute"]] if "compute" in claim else []
    for rule in claim.get("rules", {}).values():
        for part in (rule, rule.get("finding", {}), rule.get("revised", {}),
                     *rule.get("parts", ())):
            found += [part[k] for k in ("than", "interval", "compute", "requires")
                      if k in part]
            found += list(part.get("shows", ()))
    return found




















@dataclass(frozen=True)
class Outcome:
    """One claim on one substrate, as verify prints and writes it."""

    claim: str
    study: str
    substrate: str
    section: str
    statement: str
    published: str
    recomputed: str
    rule: str
    status: str
    note: str = ""
    effect: dict[str, Any] | None = None
    evidence: tuple[str, ...] = ()
    evidence_folder: str = ""
    thresholds: tuple[str, ...] = ()
    cell: dict[str, str] | None = None
    halves: tuple[dict[str, Any], ...] = ()  # each further half: label, kit, paper
    printed: str | None = None  # the kit's number in the paper's printed form

    def as_dict(self) -> dict[str, Any]:
        found = dict(self.__dict__)
        found["halves"] = [dict(h) for h in self.halves]
        found["evidence"] = list(self.evidence)
        found["thresholds"] = list(self.thresholds)
        return found




def evaluate(ledger: dict[str, Any], root: Path, problems: list[str] | None = None
             ) -> list[Outcome]:
    """Every claim on every substrate of the ledger; evidence folders relative to root.
    A claim that cannot be recomputed raises KitError, or, when ``problems`` is given, is
    appended there (naming the claim and the file) while the other claims go on; claims
    that fail for the same reason on one substrate (an evidence file that cannot be read)
    are named together in one problem."""
    outcomes = []
    failed: dict[tuple[str, str], list[str]] = {}
    if ledger["study"] not in STUDIES:
        raise KitError(f"ledger of unknown study {ledger['study']!r}; studies: {sorted(STUDIES)}")
    reader, marker = STUDIES[ledger["study"]]
    for claim in ledger["claims"]:
        base = {"claim": claim["id"], "study": ledger["study"],
                "section": claim.get("section", ""), "statement": claim["statement"],
                "published": claim["published"], "evidence": tuple(claim.get("evidence", ())),
                "cell": claim.get("cell")}
        if not claim.get("rules"):
            outcomes.append(Outcome(**base, substrate="-", recomputed="-", rule="-",
                                    status="not run here", note=claim["not_reproducible"]))
            continue
        for substrate, rule in claim["rules"].items():
            spec = ledger["substrates"][substrate]
            folder = root / spec["evidence"]
            where: dict[str, Any] = {"substrate": substrate,
                                     "evidence_folder": spec["evidence"]}
            if not (folder / spec.get("marker", marker)).is_file():
                outcomes.append(Outcome(**base, **where, recomputed="-", rule=rule["rule"],
                                        status="not run here",
                                        note=f"no {substrate} evidence in {spec['evidence']}"))
                continue
            try:
                evidence = _evidence(folder, reader)
                if "requires" in rule and call(rule["requires"], evidence) is not True:
                    outcomes.append(Outcome(
                        **base, **where, recomputed="-", rule=rule["rule"],
                        status="not run here", note=f"the {substrate} run did not include "
                        f"what this claim needs ({_name(rule['requires'])} is false)"))
                    continue
                found = _decide_claim(claim, rule, evidence, bool(spec["paper"]), base, where)
                outcomes.append(_behind_null(found, claim, rule, root, spec, reader, marker,
                                             base, where))
            except KitError as exc:
                if problems is None:
                    raise
                failed.setdefault((substrate, str(exc)), []).append(claim["id"])
    if problems is not None:
        problems += [_failed(ids, substrate, why) for (substrate, why), ids in failed.items()]
    return outcomes


def _behind_null(found: Outcome, claim: dict[str, Any], rule: dict[str, Any], root: Path,
                 spec: dict[str, Any], reader: Any, marker: str, base: dict[str, Any],
                 where: dict[str, Any]) -> Outcome:
    """``found``, decided again on the substrate's null when it has one (``null_evidence``:
    a folder of null subjects; ``null_from: controls``: its own evidence with every fault
    undone) and capped by ``against_null``; a claim whose evidence is the null already
    (``no_null``) says so in its note."""
    if "null_evidence" not in spec and spec.get("null_from") != "controls":
        return found
    if "no_null" in claim:
        return replace(found, note=f"{found.note}; no null: {claim['no_null']}")
    if spec.get("null_from") == "controls":
        null = _evidence(root / spec["evidence"], NULLS["controls"], "null")
    else:
        null_folder = root / spec["null_evidence"]
        if not (null_folder / marker).is_file():
            raise KitError(f"{null_folder}: the null evidence the {where['substrate']} "
                           "substrate names is missing; restore it with git checkout claims")
        null = _evidence(null_folder, reader)
    who = "the unmutated controls" if "null_evidence" not in spec else "untrained subjects"
    compared = pair(rule, rule.get("compute", claim["compute"])) \
        if spec.get("null_from") == "controls" else None
    beyond = None if compared is None else partial(
        exceeds, compared, _evidence(root / spec["evidence"], reader), null)
    capped: Outcome = against_null(found, partial(
        _decide_null, claim, rule, null, bool(spec["paper"]), base, where), who, beyond)
    return capped


def _decide_null(claim: dict[str, Any], rule: dict[str, Any], null: Any, paper: bool,
                 base: dict[str, Any], where: dict[str, Any]) -> Outcome:
    """The claim decided on its null. A value the null leaves undefined (``Undefined``: a
    precision where nothing was flagged) decides nothing by itself, but a rule is all of its
    halves: when another half fails on the null, the null fails the rule; otherwise it stays
    undecided (``against_null`` names why)."""
    try:
        return _decide_claim(claim, rule, null, paper, base, where)
    except Undefined as undefined:
        for part in rule.get("parts", ()):
            verdict, words, _ = _decide_part(part, null, paper)
            if verdict not in PASSES:
                return Outcome(**base, **where, recomputed=f"{why(undefined)}; {words}",
                               rule=words, status=verdict)
        raise


def _failed(ids: list[str], substrate: str, why: str) -> str:
    if len(ids) == 1:
        return f"claim {ids[0]} ({substrate}): {why}"
    return f"{len(ids)} claims ({substrate}: {ids[0]} .. {ids[-1]}): {why}"


MET = {True: " (met)", False: " (not met)"}


def _decide_claim(claim: dict[str, Any], rule: dict[str, Any], evidence: Any, paper: bool,
                  base: dict[str, Any], where: dict[str, Any]) -> Outcome:
    published = claim.get("value")
    value = call(rule.get("compute", claim["compute"]), evidence)
    passed, shown = decide(rule, value, published, evidence)
    verdict = status(grade(rule), passed, paper)
    met = {True: ""} if rule["rule"] == "describe" else MET
    words, note = f"{rule['rule']}: {shown}{met[passed]}", rule["reason"]
    if "compute" in rule:
        words = f"{rule['rule']}: {_name(rule['compute'])} = {_show(value)} {shown}{met[passed]}"
    if "finding" in rule and verdict != "differs":
        finding = rule["finding"]
        found = call(finding.get("compute", claim["compute"]), evidence)
        kept, said = decide(finding, found, published, evidence)
        # a finding is the paper's pattern: matched at its value it is reproduced, any
        # other match is a direction, and a miss on a stand-in is a reversed direction
        finding_grade = "value" if grade(finding) == "value" else "direction"
        verdict = status(finding_grade if kept else "direction", kept, paper)
        words = f"finding {finding['rule']}: {_show(found)} {said}{MET[kept]}; and {words}"
        note = finding["reason"]
    if "not_a_finding" in rule:
        note = f"not a finding: {rule['not_a_finding']}; {note}"
    halves, measured = [verdict], []
    for part in rule.get("parts", ()):
        part_verdict, part_words, part_value = _decide_part(part, evidence, paper)
        halves.append(part_verdict)
        measured.append({"label": part["label"], "kit": _plain(part_value),
                         "paper": _plain(part["value"])})
        words += f"; {part_words} [{part_verdict}]"
    verdict = weakest(halves)
    if verdict == "reproduced" and "described" in halves[1:]:
        # a half the kit only describes (a printed k/n whose n is not the paper's) never
        # lets the row read as a measurement equal to the printed number
        verdict = "direction reproduced"
        words += "; a half is only described, so the row is a direction at most"
    if "shows" in rule:  # the quantities a hypothesis's boolean was decided on
        words += "; decided on " + ", ".join(f"{_name(spec)} = {_show(call(spec, evidence))}"
                                             for spec in rule["shows"])
    if "revised" in rule:
        words += "; " + _revised(rule["revised"], claim, evidence)
    kit_value = value if "compute" not in rule else call(claim["compute"], evidence)
    return Outcome(**base, **where, recomputed=_show(kit_value), rule=words, status=verdict,
                   note=note, effect=effect(published, kit_value),
                   thresholds=tuple(thresholds(rule)), halves=tuple(measured),
                   printed=printed(claim.get("published", ""), published, kit_value, measured))




def _decide_part(part: dict[str, Any], evidence: Any, paper: bool) -> tuple[str, str, Any]:
    """One more half of a printed pair: its status, what it compared in words, and the
    kit's value."""
    value = call(part["compute"], evidence)
    passed, shown = decide(part, value, part["value"], evidence)
    return (status(grade(part), passed, paper),
            f"{part['label']} {_show(value)} (paper {_show(part['value'])}): "
            f"{part['rule']} {shown}{MET[passed]}", value)


def _plain(value: Any) -> Any:
    """A half's value for the report: a finite number as a float, anything else as text."""
    if isinstance(value, bool):
        return _show(value)
    if isinstance(value, numbers.Real) and math.isfinite(float(value)):
        return float(value)
    return _show(value)


def _revised(revised: dict[str, Any], claim: dict[str, Any], evidence: Any) -> str:
    """A later revision of a hypothesis's rule, decided and shown beside the frozen one."""
    found = call(revised.get("compute", claim["compute"]), evidence)
    kept, said = decide(revised, found, claim.get("value"), evidence)
    revision = revised["revision"]
    return (f"revised rule ({revision['commit']}, {revision['date']}; evidence existed: "
            f"{'yes' if revision['evidence_existed'] else 'no'}): {_show(found)} {said}"
            f" -> {status(grade(revised), kept, False)} (shown beside; the frozen rule "
            "decides)")




_CACHE: dict[tuple[Path, str], Any] = {}


def _evidence(folder: Path, reader: Any, kind: str = "") -> Any:
    key = (folder, kind)
    if key not in _CACHE:
        _CACHE[key] = reader(folder)
    return _CACHE[key]


def clear_cache() -> None:
    _CACHE.clear()
