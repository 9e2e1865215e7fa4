"""Recount, never read, for the corpus's evidence: every stored decision and summary
against what verify recomputes from the shipped outputs, each contradiction a failed check
naming the file and the field.

- ``corpus/cases.json`` (substrate ``kit``): each case's deviations, decision and range
  against their recount under the revised rule the pipeline records; its Polygraphy verdict
  (K5 decides on it) against Polygraphy run again on the shipped outputs of the first
  affected and first fixed release (``polygraphy_verdict``, which the pipeline calls too;
  Polygraphy is locked in the verify environment); the summary (listed, reproduced, rate,
  Wilson interval: the revised rule's count) against the recounted decisions.
- ``corpus/crashes.json``: each crash-only case's decision against its recount.
- ``detectors/hosts.json`` (substrate ``detectors``): every stored measure of every host
  (accuracy, release control, logit scale, flips, detection rates and intervals,
  localisation) against ``kit.corpus.recompute_detectors.measured``, which the J claims
  compute; with ``deep``, each host's per-image Polygraphy verdicts against Polygraphy run
  again on its logits (about 2.7 s a host on 2 cores, so a plain verify leaves them out
  and says so).

Imports nothing of the runtime layer: verify runs this offline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kit.corpus import rule
from kit.errors import KitError
from kit.files import load_npz, read_json
from kit.stats import wilson
from kit.values import contradictions

SOURCE = "the shipped outputs"
NOT_DEEP = ("detectors: the hosts' per-image Polygraphy verdicts are recounted by verify "
            "--deep only (Polygraphy again on every host's logits)")


def polygraphy_verdict(case_folder: Path, case: dict[str, Any], releases: list[str]
                       ) -> dict[str, Any] | None:
    """Polygraphy's default comparison of the first affected release against the first
    fixed release run (of ``releases``), at the case's level (``mismatch``: it reports
    one); None when either has no output. ``case``: the declared fields (``fixed``,
    ``affected``, ``level``)."""
    from kit.drift.polygraphy_check import polygraphy_fails

    fixed = [r for r in case["fixed"] if r in releases]
    affected = [r for r in case["affected"] if r in releases]
    if not fixed or not affected:
        return None
    paths = [case_folder / "outputs" / r / f"{case['level']}.npz"
             for r in (fixed[0], affected[0])]
    if not all(p.is_file() for p in paths):
        return None
    right, wrong = (load_npz(p) for p in paths)
    fails = any(bool(polygraphy_fails(right[name][None], wrong[name][None], name).any())
                for name in sorted(right))
    return {"fixed": fixed[0], "affected": affected[0], "mismatch": fails}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The record's summary of its cases' decisions (as the pipeline writes it)."""
    reproduced = sum(1 for r in rows if r["decision"]["reproduced"])
    low, high = wilson(reproduced, len(rows)) if rows else (None, None)
    return {"listed": len(rows), "reproduced": reproduced,
            "rate": reproduced / len(rows) if rows else None, "wilson95": [low, high],
            "paper": {"reproduced": rule.PAPER_REPRODUCED, "listed": rule.PAPER_LISTED}}


def kit_problems(ev: Any) -> list[str]:
    """The ``kit`` substrate's cases.json and crashes.json against their recount (``ev``: its
    ``kit.corpus.recompute.CorpusEvidence``, whose recounts the claims share)."""
    root = ev.root
    recounted = ev.decisions_under(rule.REVISED)
    problems = []
    for i, case in enumerate(ev.record["cases"]):
        again = recounted[case["id"]]
        expected = {k: again[k] for k in ("deviations", "decision", "range")}
        expected["polygraphy"] = ev.polygraphy[case["id"]]
        problems += contradictions(case, expected, f"cases/{i}", SOURCE)
    problems += contradictions(ev.record["summary"], summary(list(recounted.values())),
                               "summary", SOURCE)
    found = [f"{root / rule.CASES_JSON}: {p}" for p in problems]
    crashes = read_json(root / rule.CRASHES_JSON)
    for i, case in enumerate(crashes["crashes"]):
        found += [f"{root / rule.CRASHES_JSON}: {p}" for p in contradictions(
            case["decision"], ev.crashes[case["id"]], f"crashes/{i}/decision", SOURCE)]
    return found


def detector_problems(ev: Any, deep: bool = False) -> list[str]:
    """The ``detectors`` substrate's hosts.json against its recount (module docstring;
    ``ev``: its ``CorpusEvidence``, whose ``detector_hosts`` the J claims share)."""
    from kit.corpus.recompute_detectors import HOSTS_JSON

    root = ev.root
    path = root / HOSTS_JSON
    again = ev.detector_hosts
    problems = []
    for i, row in enumerate(read_json(path)["hosts"]):
        if row.get("hosted"):
            problems += contradictions(row, again[(row["case"], row["model"])], f"hosts/{i}",
                                       SOURCE)
            if deep:
                problems += _polygraphy_arrays(root / row["evidence"], f"hosts/{i}")
    return [f"{path}: {p}" for p in problems]


def _polygraphy_arrays(evidence: Path, where: str) -> list[str]:
    from kit.drift.polygraphy_check import polygraphy_fails

    arrays = load_npz(evidence)
    held = arrays["logits/reference/orig/heldout"]
    return [f"{where} ({evidence.name}): polygraphy/{cell} says other than Polygraphy run "
            "again on its logits"
            for cell in ("clean", "positive")
            if not (polygraphy_fails(held, arrays[f"logits/{cell}/orig/heldout"])
                    == arrays[f"polygraphy/{cell}"]).all()]


def problems(ev: Any, deep: bool = False) -> list[str]:
    """A corpus evidence folder's recount (by what it holds; ``ev``: its
    ``CorpusEvidence``), or the error that stopped it."""
    try:
        if (ev.root / "corpus" / "cases.json").is_file():
            return kit_problems(ev)
        if (ev.root / "detectors" / "hosts.json").is_file():
            return detector_problems(ev, deep)
    except KitError as exc:
        return [str(exc)]
    return []
