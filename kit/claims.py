"""Claim ledgers: load and validate them, and decide each claim by its rule.

A ledger (``claims/<study>.yaml``, ``kit/schemas/claim_ledger.schema.json``) lists every
number of a paper: the value as printed, the named ``kit.recompute`` function that
recomputes it from raw evidence, and per substrate the rule that decides it with its
reason. Statuses: ``holds``, ``differs`` (both numbers shown), ``not run here`` (the
substrate's evidence is absent, or the claim cannot be recomputed by any substrate: the
entry says why). A "not run here" claim is never counted as held.

Rules: ``exact``; ``rounds_to`` (to ``decimals`` places, the printed precision;
elementwise for pairs); ``abs_tol``; ``sign``; ``compare`` (``op`` against another
recomputed quantity ``than``); ``agrees`` (equal, to a relative 1e-9 and elementwise, to
another recomputed quantity ``than``, typically the value the run recorded: the number
recomputed from raw evidence is the number reported); ``within`` (inside an interval
another function recomputes); ``true`` (a boolean finding must hold). A rule may name its
own ``compute`` (e.g. the upper end of an interval, whose sign is the digits finding).

On a stand-in substrate (``digits``, the SciML ``kit`` subjects) the paper's value cannot
be expected, so a rule there is the finding's direction or the kit's own interval. Where
the paper's direction did not reproduce on the stand-in, the entry keeps that direction as
its ``finding`` (a rule of its own, printed as ``reproduced`` or ``reversed`` beside the
status) and decides the status by the kit's own interval or by agreement with what the run
recorded. ``verify --strict-findings`` counts a reversed finding as a failure too.
"""

from __future__ import annotations

import json
import math
import operator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator

from kit.errors import KitError
from kit.recompute import RECOMPUTE, Evidence, Value
from kit.recompute_sciml import RECOMPUTE_SCIML, SciEvidence

FUNCTIONS = {**RECOMPUTE, **RECOMPUTE_SCIML}
# Per study: how its evidence folder is read, and the file whose presence means "run here".
STUDIES: dict[str, tuple[type[Evidence] | type[SciEvidence], str]] = {
    "drift": (Evidence, "score/score.json"), "sciml": (SciEvidence, "ledger.json")}

SCHEMA = Path(__file__).with_name("schemas") / "claim_ledger.schema.json"
# libyaml's safe loader when PyYAML has it (the ledgers are large), else the Python one
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
OPS = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
       "eq": operator.eq}


def load_ledger(path: Path) -> dict[str, Any]:
    """Read and validate a ledger; errors name the file, the claim and the field."""
    try:
        ledger = yaml.load(path.read_text(), Loader=SAFE_LOADER)
    except (OSError, yaml.YAMLError) as exc:
        raise KitError(f"{path}: cannot read the ledger ({exc})") from exc
    errors = sorted(Draft202012Validator(json.loads(SCHEMA.read_text())).iter_errors(ledger),
                    key=lambda e: list(e.absolute_path))
    if errors:
        where = "/".join(str(p) for p in errors[0].absolute_path) or "(top)"
        raise KitError(f"{path}: {where}: {errors[0].message}")
    ids = [c["id"] for c in ledger["claims"]]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise KitError(f"{path}: duplicate claim ids {duplicates}")
    for claim in ledger["claims"]:
        for spec in _specs(claim):
            if spec["function"] not in FUNCTIONS:
                raise KitError(f"{path}: claim {claim['id']}: unknown function "
                               f"{spec['function']!r}")
        for substrate in claim.get("rules", {}):
            if substrate not in ledger["substrates"]:
                raise KitError(f"{path}: claim {claim['id']}: unknown substrate {substrate!r}")
    return ledger  # type: ignore[no-any-return]


def _specs(claim: dict[str, Any]) -> list[dict[str, Any]]:
    found = [claim["compute"]] if "compute" in claim else []
    for rule in claim.get("rules", {}).values():
        for part in (rule, rule.get("finding", {})):
            found += [part[k] for k in ("than", "interval", "compute") if k in part]
    return found


def call(spec: dict[str, Any], evidence: Any) -> Value:
    """Run one named recompute function."""
    try:
        return FUNCTIONS[spec["function"]](evidence, **spec.get("args", {}))
    except KitError:
        raise
    except (KeyError, IndexError, TypeError, ValueError) as exc:
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
    """(holds, what was compared) for one rule."""
    kind = rule["rule"]
    if kind == "exact":
        return value == published, f"== {published}"
    if kind == "true":
        return value is True, "is true"
    if kind == "rounds_to":
        d = int(rule["decimals"])
        if isinstance(published, list):
            ok = isinstance(value, list) and all(_close(_num(a), _num(b), d)
                                                 for a, b in zip(value, published, strict=True))
        else:
            ok = _close(_num(value), _num(published), d)
        return ok, f"rounds to {published} at {d} decimals"
    if kind == "abs_tol":
        return abs(_num(value) - _num(published)) <= float(rule["tol"]), \
            f"|x - {published}| <= {rule['tol']}"
    if kind == "sign":
        x = _num(value)
        ok = {"negative": x < 0, "positive": x > 0, "zero": x == 0,
              "nonnegative": x >= 0}[rule["sign"]]
        return ok, f"sign {rule['sign']}"
    if kind == "compare":
        other = call(rule["than"], evidence)
        return bool(OPS[rule["op"]](value, other)), f"{rule['op']} {_show(other)}"
    if kind == "agrees":
        other = call(rule["than"], evidence)
        return _agree(value, other), f"agrees with {_show(other)}"
    if kind == "within":
        bounds = call(rule["interval"], evidence)
        if not isinstance(bounds, list) or len(bounds) != 2:
            raise KitError(f"{rule['interval']['function']} did not give an interval")
        lo, hi = _num(bounds[0]), _num(bounds[1])
        return lo <= _num(value) <= hi, f"within [{lo:.4g}, {hi:.4g}]"
    raise KitError(f"unknown rule {kind!r}")


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
    """One claim on one substrate."""

    claim: str
    substrate: str
    published: str
    recomputed: str
    rule: str
    status: str
    note: str = ""
    finding: str = ""

    def as_dict(self) -> dict[str, str]:
        return dict(self.__dict__)


def evaluate(ledger: dict[str, Any], root: Path, problems: list[str] | None = None
             ) -> list[Outcome]:
    """Every claim on every substrate of the ledger; evidence folders relative to root.
    A claim that cannot be recomputed raises KitError, or, when ``problems`` is given, is
    appended there (naming the claim and the file) while the other claims go on."""
    outcomes = []
    if ledger["study"] not in STUDIES:
        raise KitError(f"ledger of unknown study {ledger['study']!r}; studies: {sorted(STUDIES)}")
    reader, marker = STUDIES[ledger["study"]]
    present = {name: (root / s["evidence"]) for name, s in ledger["substrates"].items()}
    for claim in ledger["claims"]:
        if not claim.get("rules"):
            outcomes.append(Outcome(claim["id"], "-", claim["published"], "-", "-",
                                    "not run here", claim["not_reproducible"]))
            continue
        for substrate, rule in claim["rules"].items():
            folder = present[substrate]
            if not (folder / marker).is_file():
                outcomes.append(Outcome(claim["id"], substrate, claim["published"], "-",
                                        rule["rule"], "not run here",
                                        f"no {substrate} evidence in {folder}"))
                continue
            evidence = _evidence(folder, reader)
            try:
                value = call(rule.get("compute", claim["compute"]), evidence)
                holds, shown = decide(rule, value, claim.get("value"), evidence)
                finding = ""
                if "finding" in rule:
                    direction = rule["finding"]
                    found = call(direction.get("compute", claim["compute"]), evidence)
                    kept, said = decide(direction, found, claim.get("value"), evidence)
                    finding = f"{'reproduced' if kept else 'reversed'} ({_show(found)} {said})"
            except KitError as exc:
                if problems is None:
                    raise
                problems.append(f"claim {claim['id']} ({substrate}): {exc}")
                continue
            outcomes.append(Outcome(claim["id"], substrate, claim["published"], _show(value),
                                    f"{rule['rule']}: {shown}",
                                    "holds" if holds else "differs", finding=finding))
    return outcomes


_CACHE: dict[Path, Any] = {}


def _evidence(folder: Path, reader: Any) -> Any:
    if folder not in _CACHE:
        _CACHE[folder] = reader(folder)
    return _CACHE[folder]


def clear_cache() -> None:
    _CACHE.clear()
