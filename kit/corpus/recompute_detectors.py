"""Recompute functions of the detector study's claims (``claims/corpus.yaml``, substrate
``detectors``). Each reads a detector-study evidence folder (a run's, or the shipped
``claims/corpus/evidence/detectors``): ``detectors/hosts.json`` for which hosts exist and
where their evidence arrays are, and every measure recomputed from those arrays with the
committed protocols' numbers (``kit.corpus.detector_measures``), never read from the
recorded ones. Polygraphy's per-image verdicts are the run's records; ``verify --deep``
runs Polygraphy again on every host's logits and names any that differs
(``kit.corpus.recount``). A folder made under another protocol than the committed one is
refused.

Imports nothing of the runtime layer: verify runs these offline.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kit.corpus.detector_measures import Params, host_measures, params
from kit.drift.detectors import DETECTORS
from kit.errors import KitError
from kit.files import load_npz, read_json, read_yaml, sha256
from kit.paths import ROOT
from kit.values import Value

HOSTS_JSON = "detectors/hosts.json"
PROTOCOL = ROOT / "kit" / "protocols" / "corpus-detectors.yaml"
DRIFT_PROTOCOL = ROOT / "kit" / "protocols" / "drift.yaml"
Key = tuple[str, str]  # case, model


def committed_params() -> Params:
    return params(read_yaml(PROTOCOL), read_yaml(DRIFT_PROTOCOL))


def measured(root: Path) -> dict[Key, dict[str, Any]]:
    """Per hosted (case, model): every measure, recomputed from its evidence arrays."""
    path = root / HOSTS_JSON
    if not path.is_file():
        raise KitError(f"{path}: evidence file missing")
    record = read_json(path)
    if not isinstance(record, dict) or not isinstance(record.get("hosts"), list):
        raise KitError(f"{path}: no 'hosts' list")
    if record.get("protocol_sha256") != sha256(PROTOCOL):
        raise KitError(f"{path}: made under another protocol than {PROTOCOL} "
                       f"(sha256 {record.get('protocol_sha256')})")
    p = committed_params()
    found = {}
    for row in record["hosts"]:
        if row.get("hosted"):
            found[(row["case"], row["model"])] = host_measures(load_npz(root / row["evidence"]),
                                                               p)
    if not found:
        raise KitError(f"{path}: no hosted case")
    return found


def _hosts(ev: Any) -> dict[Key, dict[str, Any]]:
    """The hosts' measures, computed once per evidence reader (``CorpusEvidence``, which
    the ledger keeps per folder until ``clear_cache``)."""
    return ev.detector_hosts  # type: ignore[no-any-return]


def j1_release_control_identical(ev: Any) -> bool:
    """J1: without the case's node, affected and fixed release give identical logits."""
    return all(m["release_control"] == 0.0 for m in _hosts(ev).values())


def j2_direct_catches_most(ev: Any) -> bool:
    """J2: the direct detector's TPR interval starts at 0.5 or above on every host."""
    return all(m["detection"]["direct"]["tpr"]["interval"][0] >= 0.5
               for m in _hosts(ev).values())


def j3_direct_over_metamorphic(ev: Any) -> bool:
    """J3: direct minus metamorphic TPR, paired interval above 0 on every host."""
    return all(m["detection"]["direct_minus_metamorphic"]["interval"][0] > 0
               for m in _hosts(ev).values())


def j4_maximum_best(ev: Any) -> bool:
    """J4: the two-input maximum's TPR is at least every other detector's on every host."""
    return all(all(d["maximum"]["tpr"]["rate"] >= d[name]["tpr"]["rate"] for name in DETECTORS)
               for d in (m["detection"] for m in _hosts(ev).values()))


def j5_polygraphy_catches_without_false_alarms(ev: Any) -> bool:
    """J5: Polygraphy's TPR >= 0.5 and realised FPR <= 0.01 on every host."""
    return all(m["detection"]["polygraphy"]["tpr"]["rate"] >= 0.5
               and m["detection"]["polygraphy"]["fpr"]["rate"] <= 0.01
               for m in _hosts(ev).values())


def pooled_localisation(ev: Any, kind: str, stat: str = "top1") -> float:
    """A localiser's top-1, top-3 or MRR pooled over every host's positive images."""
    rows = [m["localisation"][kind] for m in _hosts(ev).values()]
    return float(sum(r[stat] * r["n"] for r in rows) / sum(r["n"] for r in rows))


def j6_direct_localises_more(ev: Any) -> bool:
    """J6: pooled direct top-1 exceeds pooled metamorphic top-1."""
    return pooled_localisation(ev, "direct") > pooled_localisation(ev, "metamorphic")


def hosted(ev: Any) -> int:
    """How many (case, model) hosts the study measured."""
    return len(_hosts(ev))


def pooled_rate(ev: Any, detector: str, rate: str = "tpr") -> float:
    """A detector's TPR or realised FPR at matched FPR, pooled over hosts as summed counts
    (``polygraphy`` for Polygraphy's)."""
    rows = [m["detection"][detector][rate] for m in _hosts(ev).values()]
    return float(sum(r["alarms"] for r in rows) / sum(r["n"] for r in rows))


RECOMPUTE_DETECTORS: dict[str, Callable[..., Value]] = {
    f"corpus.{f.__name__}": f for f in (
        j1_release_control_identical, j2_direct_catches_most, j3_direct_over_metamorphic,
        j4_maximum_best, j5_polygraphy_catches_without_false_alarms, j6_direct_localises_more,
        hosted, pooled_rate, pooled_localisation)}
