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
is shown beside and fails the row when it fails, but does not stand in for a measurement.

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
import operator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit import schema
from kit.claims.values import Value
from kit.corpus.recompute import RECOMPUTE_CORPUS, CorpusEvidence
from kit.corpus.recompute_detectors import RECOMPUTE_DETECTORS
from kit.drift.recompute import RECOMPUTE
from kit.drift.recompute_realdrift import RECOMPUTE_REALDRIFT, SweepEvidence
from kit.drift.shipped import Evidence
from kit.errors import KitError
from kit.files import read_yaml
from kit.sciml.recompute import RECOMPUTE_SCIML, SciEvidence

FUNCTIONS = {**RECOMPUTE, **RECOMPUTE_SCIML, **RECOMPUTE_REALDRIFT, **RECOMPUTE_CORPUS,
             **RECOMPUTE_DETECTORS}
# Per study: how its evidence folder is read, and the file whose presence means "run here"
# (a substrate may name its own ``marker``).
STUDIES: dict[str, tuple[type[Evidence] | type[SciEvidence] | type[SweepEvidence]
                         | type[CorpusEvidence], str]] = {
    "drift": (Evidence, "score/score.json"), "sciml": (SciEvidence, "ledger.json"),
    "realdrift": (SweepEvidence, "sweep/cells.json"),
    "corpus": (CorpusEvidence, "corpus/cases.json")}

SCHEMA = schema.SCHEMAS / "claim_ledger.schema.json"
OPS = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
       "eq": operator.eq}
WORDS = {"lt": "below", "le": "at most", "gt": "above", "ge": "at least", "eq": "equal to"}
STATUSES = ("reproduced", "by design", "direction reproduced", "direction reversed", "described",
            "consistent", "hypothesis holds", "hypothesis fails", "differs", "not run here")
# The weakest half decides a row graded on several halves (a printed pair).
RANK = {"differs": 0, "direction reversed": 1, "hypothesis fails": 1, "described": 2,
        "consistent": 3, "hypothesis holds": 4, "direction reproduced": 4, "by design": 5,
        "reproduced": 6}
CONSTANTS = {"drift.constant", "sciml.constant_value"}
# The statuses that claim agreement with the paper: each such rule must be able to fail.
AGREEMENT = ("reproduced", "by design", "direction reproduced")
GRADES = {"exact": "value", "rounds_to": "value", "abs_tol": "value",
          "sign": "direction", "compare": "direction", "true": "direction",
          "agrees": "consistency", "within": "consistency", "describe": "description"}


def load_ledger(path: Path) -> dict[str, Any]:
    """Read and validate a ledger; errors name the file, the claim and the field. Flat YAML
    aliases are kept (``yaml.safe_dump`` writes a shared list as one), bombs refused
    (``kit.files.read_yaml``)."""
    ledger = read_yaml(path, aliases=True)
    schema.check(ledger, SCHEMA.name, path)
    ids = [c["id"] for c in ledger["claims"]]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise KitError(f"{path}: duplicate claim ids {duplicates}")
    for claim in ledger["claims"]:
        for spec in _specs(claim):
            _bind(spec, f"{path}: claim {claim['id']}")
        for substrate in claim.get("rules", {}):
            if substrate not in ledger["substrates"]:
                raise KitError(f"{path}: claim {claim['id']}: unknown substrate {substrate!r}")
    return ledger  # type: ignore[no-any-return]


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
    return found


def call(spec: dict[str, Any], evidence: Any) -> Value:
    """Run one named recompute function."""
    try:
        return FUNCTIONS[spec["function"]](evidence, **spec.get("args", {}))
    except KitError:
        raise
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
        other = _num(call(rule["than"], evidence))
        return bool(OPS[rule["op"]](_num(value), other)), \
            f"{WORDS[rule['op']]} {_show(other)} ({_name(rule['than'])})"
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

    def as_dict(self) -> dict[str, Any]:
        found = dict(self.__dict__)
        found["evidence"] = list(self.evidence)
        found["thresholds"] = list(self.thresholds)
        return found


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
                "published": claim["published"], "evidence": tuple(claim.get("evidence", ()))}
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
                outcomes.append(_decide_claim(claim, rule, evidence, bool(spec["paper"]),
                                              base, where))
            except KitError as exc:
                if problems is None:
                    raise
                failed.setdefault((substrate, str(exc)), []).append(claim["id"])
    if problems is not None:
        problems += [_failed(ids, substrate, why) for (substrate, why), ids in failed.items()]
    return outcomes


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
    halves = [verdict]
    for part in rule.get("parts", ()):
        part_verdict, part_words = _decide_part(part, evidence, paper)
        halves.append(part_verdict)
        words += f"; {part_words} [{part_verdict}]"
    verdict = weakest(halves)
    if "revised" in rule:
        words += "; " + _revised(rule["revised"], claim, evidence)
    kit_value = value if "compute" not in rule else call(claim["compute"], evidence)
    return Outcome(**base, **where, recomputed=_show(kit_value), rule=words, status=verdict,
                   note=note, effect=effect(published, kit_value),
                   thresholds=tuple(thresholds(rule)))


def weakest(halves: list[str]) -> str:
    """The status of a row graded on several halves: the weakest half that decides
    something. A half equal by design or only described (the n of a printed k/n) is
    shown beside but neither lends a measured half its status nor takes it away; it
    decides only when no half is measured, and fails the row when it fails."""
    measured = [h for h in halves if h not in ("by design", "described")]
    return min(measured or halves, key=RANK.__getitem__)


def _decide_part(part: dict[str, Any], evidence: Any, paper: bool) -> tuple[str, str]:
    """One more half of a printed pair: its status and what it compared, in words."""
    value = call(part["compute"], evidence)
    passed, shown = decide(part, value, part["value"], evidence)
    return (status(grade(part), passed, paper),
            f"{part['label']} {_show(value)} (paper {_show(part['value'])}): "
            f"{part['rule']} {shown}{MET[passed]}")


def _revised(revised: dict[str, Any], claim: dict[str, Any], evidence: Any) -> str:
    """A later revision of a hypothesis's rule, decided and shown beside the frozen one."""
    found = call(revised.get("compute", claim["compute"]), evidence)
    kept, said = decide(revised, found, claim.get("value"), evidence)
    revision = revised["revision"]
    return (f"revised rule ({revision['commit']}, {revision['date']}; evidence existed: "
            f"{'yes' if revision['evidence_existed'] else 'no'}): {_show(found)} {said}"
            f" -> {status(grade(revised), kept, False)} (shown beside; the frozen rule "
            "decides)")


def thresholds(rule: dict[str, Any]) -> list[str]:
    """Where every threshold of a rule (its finding, halves and revision) comes from."""
    found = []
    for part in (rule, rule.get("finding"), *rule.get("parts", ()), rule.get("revised")):
        if part is not None and "threshold" in part:
            source = part["threshold"]
            detail = source.get("line") or source.get("why")
            found.append(f"{source['source']}: {detail}")
    return found


_CACHE: dict[Path, Any] = {}


def _evidence(folder: Path, reader: Any) -> Any:
    if folder not in _CACHE:
        _CACHE[folder] = reader(folder)
    return _CACHE[folder]


def clear_cache() -> None:
    _CACHE.clear()
