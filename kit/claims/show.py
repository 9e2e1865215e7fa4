"""What verify prints: one line per claim check, a claim in full, the summary before the
rows and, on a failure, the reason beside the last line."""

from __future__ import annotations

import sys
from typing import Any

from kit.claims.ledger import Outcome


def print_rows(shown: list[Outcome], in_full: bool) -> None:
    """The selected claim checks between blank lines: in full when claims were named, one
    line each otherwise."""
    print()
    if in_full:
        print_details(shown)
    else:
        print_outcomes(shown)
    print()


def print_outcomes(outcomes: list[Outcome]) -> None:
    """One line per claim check: the claim, its statement (shortened), the paper's number
    as printed, the kit's in the same form (an interval as an interval, a pair as a pair,
    k/n with the kit's n), the status and the rule in words."""
    print(f"{'claim':<8} {'substrate':<9} {'statement':<34} {'published':<24} "
          f"{'kit, as printed':<20} {'status':<20} rule")
    for o in outcomes:
        paper = "" if o.effect is None or o.effect["ratio"] is None else \
            f" [kit {_short(o.effect['kit'])} vs paper {_short(o.effect['paper'])}: " \
            f"x{o.effect['ratio']:.3g}]"
        print(f"{o.claim:<8} {o.substrate:<9} {_cut(o.statement, 34):<34} "
              f"{_cut(o.published, 24):<24} {_cut(o.printed or o.recomputed, 20):<20} "
              f"{o.status:<20} "
              f"{o.rule}{paper}" + (f" ({o.note})" if o.status == "not run here" else ""))


def print_details(outcomes: list[Outcome]) -> None:
    """Every field of each claim check, one per line (``verify --claim``)."""
    for o in outcomes:
        print(f"{o.claim} ({o.study}, {o.substrate}): {o.status}")
        fields = [("statement", o.statement), ("section", o.section),
                  ("paper printed", o.published), ("kit", o.recomputed),
                  ("kit, as printed", o.printed if o.printed != o.recomputed else ""),
                  ("rule", o.rule),
                  *(("threshold from", t) for t in o.thresholds),
                  ("note", o.note), ("evidence", ", ".join(f"{o.evidence_folder}/{e}"
                                                           for e in o.evidence))]
        for name, text in fields:
            if text:
                print(f"  {name + ':':<15} {text}")


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "~"


def _short(x: Any) -> str:
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def failure_reason(problems: list[str], differing: list[str], reversed_: list[str]) -> str:
    """Why verify failed, for its last line (the first failed check, the claims that
    differ, the reversed findings under ``--strict-findings``), with how many more there
    are."""
    parts = []
    if problems:
        more = f" (and {len(problems) - 1} more failed checks above)" if len(problems) > 1 \
            else ""
        parts.append(f"{problems[0]}{more}")
    if differing:
        parts.append(f"{len(differing)} claims differ: {', '.join(differing[:5])}"
                     + (" ..." if len(differing) > 5 else ""))
    if reversed_:
        parts.append(f"{len(reversed_)} findings reversed under --strict-findings")
    return "; ".join(parts)


def print_summary(verdict: str, report: dict[str, Any], reversed_: list[str],
                  differing: list[str]) -> None:
    """The verdict, the counts per study, the roots, every failed check, the reversed
    findings and the differing claims: what verify prints before the rows."""
    print(verdict)
    for study, found in report["counts"].items():
        print(f"verify: {study}: " + ", ".join(f"{n} {s}" for s, n in found.items() if n))
    print(f"verify: evidence root {report['roots']['evidence']} (ledgers, evidence, "
          "manifests, schemas, MR cards, protocols, locks)")
    print(f"verify: code root {report['roots']['code']} (every module of the kit package, "
          "pyproject.toml)")
    if report.get("arithmetic"):
        from kit.claims.arithmetic import summary_line

        print(summary_line(report["arithmetic"]))
    for problem in report["problems"]:
        print(f"verify: FAIL {problem}", file=sys.stderr)
    if reversed_:
        print(f"verify: the paper's direction is reversed on the stand-in substrate for "
              f"{len(reversed_)} claims"
              f"{' (failures under --strict-findings)' if report['strict_findings'] else ''}"
              ": " + ", ".join(reversed_))
    if differing:
        print(f"verify: {len(differing)} claims differ: " + ", ".join(differing))
