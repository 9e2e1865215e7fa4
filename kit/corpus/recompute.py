"""Recompute functions of the corpus ledger (``claims/corpus.yaml``). Each reads a corpus
evidence folder (a run's, or the shipped ``claims/corpus/evidence/kit``): the per-case
entries of ``corpus/cases.json`` for what each case declares, and the raw outputs
(``cases/<id>/reference.npz``, ``cases/<id>/outputs/<release>/<level>.npz``) from which every
deviation and decision is recomputed with the protocol's rule (``kit.corpus.rule``), never
read from the recorded ones. Polygraphy's verdicts (K5) are Polygraphy's own, run again on
the shipped outputs (``kit.corpus.recount.polygraphy_verdict``; Polygraphy is locked in the
verify environment).

The hypotheses K1-K5 take ``rule_version``: the ledger decides them under the deviation
rule as first committed (``rule.FROZEN``, before any corpus evidence) and shows the revised
rule (``rule.REVISED``, 02e59e2) beside; the describing functions use the revised rule the
pipeline recorded.

Imports nothing of the runtime layer: verify runs these offline.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Any

from kit.corpus import rule
from kit.corpus.case import LEVELS
from kit.corpus.crashes import decide_crash, finite_scale
from kit.errors import KitError
from kit.files import load_npz, read_json
from kit.stats import wilson
from kit.values import Value

CASES_JSON, CRASHES_JSON = rule.CASES_JSON, rule.CRASHES_JSON


class CorpusEvidence:
    """Checked access to one corpus evidence folder, every decision recomputed."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._by_version: dict[int, dict[str, dict[str, Any]]] = {}

    def _listing(self, name: str, key: str) -> dict[str, Any]:
        """An evidence JSON object with a list under ``key``; KitError naming it otherwise."""
        path = self.root / name
        if not path.is_file():
            raise KitError(f"{path}: evidence file missing")
        found = read_json(path)
        if not isinstance(found, dict) or not isinstance(found.get(key), list):
            raise KitError(f"{path}: no {key!r} list")
        return found

    @cached_property
    def record(self) -> dict[str, Any]:
        return self._listing(CASES_JSON, "cases")

    @cached_property
    def decisions(self) -> dict[str, dict[str, Any]]:
        """Per case id: its entry with deviations and decision recomputed from the outputs
        under the revised deviation rule (the one the pipeline records)."""
        return self.decisions_under(rule.REVISED)

    def decisions_under(self, rule_version: int) -> dict[str, dict[str, Any]]:
        """Per case id: its entry with deviations and decision recomputed from the outputs
        under one version of the deviation rule (``kit.corpus.rule.RULE_VERSIONS``)."""
        if rule_version not in rule.RULE_VERSIONS:
            raise KitError(f"unknown corpus rule version {rule_version!r} "
                           f"(known: {list(rule.RULE_VERSIONS)})")
        if rule_version not in self._by_version:
            self._by_version[rule_version] = {case["id"]: self._recompute(case, rule_version)
                                              for case in self.record["cases"]}
        return self._by_version[rule_version]

    @cached_property
    def detector_hosts(self) -> dict[tuple[str, str], dict[str, Any]]:
        """The detector study's hosts, every measure recomputed
        (``kit.corpus.recompute_detectors.measured``)."""
        from kit.corpus.recompute_detectors import measured

        return measured(self.root)

    @cached_property
    def polygraphy(self) -> dict[str, dict[str, Any] | None]:
        """Per case id: Polygraphy's verdict run again on the shipped outputs of its first
        affected and first fixed release (``kit.corpus.recount.polygraphy_verdict``)."""
        from kit.corpus.recount import polygraphy_verdict

        return {case["id"]: polygraphy_verdict(self.root / "cases" / case["id"], case,
                                               self.record["releases"])
                for case in self.record["cases"]}

    @cached_property
    def crashes(self) -> dict[str, dict[str, Any]]:
        """Per crash-only case: its decision recomputed from the outputs that exist."""
        found = self._listing(CRASHES_JSON, "crashes")
        out = {}
        for case in found["crashes"]:
            reference = load_npz(self.root / "cases" / case["id"] / "reference.npz")
            deviations = self._deviations(case, found["releases"], reference)
            out[case["id"]] = decide_crash(case, deviations,
                                           rule.RELATIVE_TOLERANCE * finite_scale(reference))
        return out

    def _recompute(self, case: dict[str, Any], rule_version: int) -> dict[str, Any]:
        folder = self.root / "cases" / case["id"]
        reference = load_npz(folder / "reference.npz")
        deviations = self._deviations(case, self.record["releases"], reference, rule_version)
        decision = rule.decide(case, deviations, rule.scale(reference))
        ran = [r for r in deviations if deviations[r][case["level"]] is not None]
        return {**case, "deviations": deviations, "decision": decision,
                "range": rule.range_mismatch(case, decision, ran)}

    def _deviations(self, case: dict[str, Any], releases: list[str],
                    reference: dict[str, Any], rule_version: int = rule.REVISED
                    ) -> dict[str, dict[str, float | None]]:
        """d per release and level from the outputs (under ``rule_version``); a missing
        output must have its error recorded."""
        folder = self.root / "cases" / case["id"]
        deviations: dict[str, dict[str, float | None]] = {}
        for release in releases:
            deviations[release] = {}
            for level in LEVELS:
                path = folder / "outputs" / release / f"{level}.npz"
                loaded = path.is_file()
                if not loaded and level not in case["errors"].get(release, {}):
                    raise KitError(f"{path}: missing, and {CASES_JSON} records no error for it")
                deviations[release][level] = rule.deviation(
                    load_npz(path), reference, str(path), rule_version) if loaded else None
        return deviations

    def reproduced(self, rule_version: int = rule.REVISED) -> list[str]:
        return [i for i, c in self.decisions_under(rule_version).items()
                if c["decision"]["reproduced"]]


def k1_every_case_reproduces(ev: CorpusEvidence, rule_version: int = rule.FROZEN) -> bool:
    """K1: every listed case reproduces by the protocol's rule (``rule_version``)."""
    return len(ev.reproduced(rule_version)) == len(ev.decisions_under(rule_version)) > 0


def k2_ranges_as_declared(ev: CorpusEvidence, rule_version: int = rule.FROZEN) -> bool:
    """K2: per case, the releases that deviate are exactly the declared affected ones."""
    return all(not c["range"]["extra"] and not c["range"]["missing"]
               for c in ev.decisions_under(rule_version).values())


def ranges(ev: CorpusEvidence, stat: str = "as_declared", rule_version: int = rule.FROZEN
           ) -> int:
    """K2's inputs: how many cases deviate on exactly their declared affected releases
    (``as_declared``), of how many (``listed``), under ``rule_version``."""
    decisions = ev.decisions_under(rule_version).values()
    found = {"as_declared": sum(not c["range"]["extra"] and not c["range"]["missing"]
                                for c in decisions), "listed": len(decisions)}
    if stat not in found:
        raise KitError(f"unknown corpus ranges statistic {stat!r}")
    return found[stat]


def k3_rate_at_least_paper(ev: CorpusEvidence, rule_version: int = rule.FROZEN) -> bool:
    """K3: reproduced / listed >= the paper's 10/14."""
    return len(ev.reproduced(rule_version)) * rule.PAPER_LISTED >= \
        rule.PAPER_REPRODUCED * len(ev.decisions_under(rule_version))


def k4_kernel_defects(ev: CorpusEvidence, rule_version: int = rule.FROZEN) -> bool:
    """K4: more than half of the reproduced cases deviate at disable_all on every declared
    affected release."""
    decisions = ev.decisions_under(rule_version)
    reproduced = [decisions[i] for i in ev.reproduced(rule_version)]
    kernel = sum(1 for c in reproduced if c["decision"]["at_disable_all"])
    return 2 * kernel > len(reproduced)


def k5_polygraphy_flags_all(ev: CorpusEvidence, rule_version: int = rule.FROZEN) -> bool:
    """K5: Polygraphy's check, run again on the shipped outputs, reports a mismatch on every
    reproduced case."""
    found = ev.polygraphy
    return all(bool((found[i] or {}).get("mismatch")) for i in ev.reproduced(rule_version))


def rate(ev: CorpusEvidence, stat: str = "value", rule_version: int = rule.FROZEN) -> Value:
    """The issue-level reproduction rate (``value``), its Wilson 95% interval
    (``wilson95``), or the counts (``reproduced``, ``listed``), under the deviation rule
    ``rule_version`` (default: as first committed)."""
    hits, n = len(ev.reproduced(rule_version)), len(ev.decisions_under(rule_version))
    if n == 0:
        raise KitError(f"{ev.root / CASES_JSON}: no cases")
    found: dict[str, Value] = {"value": hits / n, "wilson95": list(wilson(hits, n)),
                               "reproduced": hits, "listed": n}
    if stat not in found:
        raise KitError(f"unknown corpus rate statistic {stat!r}")
    return found[stat]


def crashes_as_declared(ev: CorpusEvidence, stat: str = "as_declared") -> int:
    """Crash-only cases (never in the rate): how many are listed (``listed``), and how many
    fail on exactly their declared affected releases and run right on the fixed ones
    (``as_declared``), recomputed from the outputs."""
    found = ev.crashes
    counts = {"listed": len(found), "as_declared": sum(1 for d in found.values()
                                                       if d["reproduced"])}
    if stat not in counts:
        raise KitError(f"unknown crash statistic {stat!r}")
    return counts[stat]


def case_reproduced(ev: CorpusEvidence, case: str) -> bool:
    """Whether one named case reproduces (recomputed)."""
    if case not in ev.decisions:
        raise KitError(f"{ev.root / CASES_JSON}: no case {case!r}")
    return bool(ev.decisions[case]["decision"]["reproduced"])


def largest_deviation(ev: CorpusEvidence, case: str) -> float:
    """The largest deviation from the reference of a declared affected release, at the
    case's level (recomputed)."""
    entry = ev.decisions.get(case)
    if entry is None:
        raise KitError(f"{ev.root / CASES_JSON}: no case {case!r}")
    found = [entry["deviations"][r][entry["level"]] for r in entry["affected"]
             if entry["deviations"].get(r, {}).get(entry["level"]) is not None]
    if not found:
        raise KitError(f"{ev.root / CASES_JSON}: case {case!r} has no affected output")
    return float(max(found))


RECOMPUTE_CORPUS: dict[str, Callable[..., Value]] = {
    f"corpus.{f.__name__}": f for f in (
        k1_every_case_reproduces, k2_ranges_as_declared, ranges, k3_rate_at_least_paper,
        k4_kernel_defects, k5_polygraphy_flags_all, rate, case_reproduced, largest_deviation,
        crashes_as_declared)}
