"""The detector study's record judged through its inputs: the replay verdict of
``detectors/hosts.json`` (``kit.claims.fresh``).

Every measure of a host (accuracy, flips, the largest logit change, the release control,
detection counts and rates at the calibrated thresholds, localisation) is computed from the
host's evidence arrays (``kit.corpus.detector_measures``). On another CPU a clean score near
its calibrated threshold moves within the arrays' bound and may flip a decision, so a count
of the record differs although every array it comes from is within its bound. Where the
record differs and every evidence array is within its bound, the measures are recomputed
from each side's own arrays: when each side gives its stored values within the record's
bound and everything else of the record (which hosts, their placements and pairs, the
cases not hosted, Polygraphy's version, the protocol) is the same on both sides, the
record moved only through its inputs, and the verdict says so. Anything else stays
``differs``; the claims' status diff stays the decisive line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kit.corpus.recompute_detectors import HOSTS_JSON, measured
from kit.files import canonical_json, read_json
from kit.tolerance import Bound, Verdict, bound_for, compare_json, through_inputs

EVIDENCE = "detectors/evidence/"
# The fields of a hosted row that host_measures computes from its arrays.
MEASURES = ("accuracy", "release_control", "max_abs_logit", "flips", "detection",
            "localisation")


def _rest(record: dict[str, Any]) -> dict[str, Any]:
    """The record without the measures computed from the arrays."""
    hosts = [{k: v for k, v in row.items() if k not in MEASURES} for row in record["hosts"]]
    return {**record, "hosts": hosts}


def first_unlike(root: Path, bound: Bound) -> str:
    """Where one side's stored measures first differ from those recomputed from its own
    arrays (``recompute_detectors.measured``; "" when none does)."""
    again = measured(root)
    for i, row in enumerate(read_json(root / HOSTS_JSON)["hosts"]):
        if not row.get("hosted"):
            continue
        check = Verdict(HOSTS_JSON, "within tolerance")
        compare_json({k: row.get(k) for k in MEASURES},
                     json.loads(canonical_json(again[(row["case"], row["model"])])), bound,
                     f"/hosts/{i}", check)
        if check.verdict != "within tolerance":
            return check.where
    return ""


def judge_hosts(fresh: Path, shipped: Path, bounds: list[Bound], found: Verdict,
                inputs_within: bool) -> Verdict:
    """A differing ``hosts.json`` judged through its inputs (module docstring)."""
    bound = bound_for(bounds, "corpus", HOSTS_JSON)
    if bound is None or not inputs_within:
        return found
    if _rest(read_json(fresh / HOSTS_JSON)) != _rest(read_json(shipped / HOSTS_JSON)):
        found.where += "; the records differ outside the measures computed from the arrays"
        return found
    return through_inputs(found, lambda root: first_unlike(root, bound), fresh, shipped,
                          "arrays", "every measure recomputed from each side's own arrays "
                          "gives its stored value")


def revise(verdicts: list[Verdict], fresh: Path, shipped: Path, bounds: list[Bound]
           ) -> list[Verdict]:
    """The detector study's verdicts with a differing ``hosts.json`` judged through its
    inputs, where every evidence array is within its bound."""
    inputs_within = all(v.verdict != "differs" for v in verdicts if v.file.startswith(EVIDENCE))
    return [judge_hosts(fresh, shipped, bounds, v, inputs_within)
            if v.verdict == "differs" and v.file == HOSTS_JSON else v for v in verdicts]
