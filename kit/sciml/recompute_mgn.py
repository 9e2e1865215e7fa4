"""The ``sciml.`` recompute functions of the MeshGraphNet case study: each reads the raw
per-case records (``mgn.json``) and the verdict ledger of a SciML evidence folder and
recomputes one number (the seeded-fault catalogue's are in ``recompute_faults``, the
unified catalogue's and the second task's in ``recompute_catalogue``).

Case names in the ledger: ``<arch>-seed<k>-<trajectory>-f<frame>[-p<seed>]`` for the
cylinder relations, ``<arch>-seed<k>-channel-input<i>`` for the exact mirror,
``airfoil-subject<i>-p<seed>`` for the second task. Subjects: the MeshGraphNet roster
(``mgn``: seeds 0-3 the seed replicas, 4 wider, 5 deeper) and the PointMLP (``pointmlp``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kit.errors import KitError
from kit.sciml.stats import bootstrap_ci, clopper_pearson
from kit.values import Value

REPLICAS = (0, 1, 2, 3)
VARIANTS = (4, 5)
METRICS = ("one_step_relative_l2", "mirror_violation", "mirror_mapping_floor", "mirror_ratio",
           "continuity_ratio", "continuity_v_tol", "permutation_max", "permutation_v_tol")
V_TOL_CARDS = {"permutation_v_tol": "mgn-node-permutation",
               "continuity_v_tol": "mgn-continuity-guard"}


def _subjects(ev: Any, arch: str, seeds: list[int] | None) -> list[dict[str, Any]]:
    found = [s for s in ev.json("mgn.json")["subjects"]
             if s["arch"] == arch and (seeds is None or s["seed"] in seeds)]
    if not found:
        raise KitError(f"{ev.root}/mgn.json: no {arch} subjects with seeds {seeds}")
    return found


def _cases(ev: Any, arch: str, seeds: list[int] | None, trajectory: str | None
           ) -> list[dict[str, Any]]:
    rows = [r for s in _subjects(ev, arch, seeds) for r in s["cases"]
            if trajectory is None or r["trajectory"] == trajectory]
    if not rows:
        raise KitError(f"{ev.root}/mgn.json: no {arch} cases on trajectory {trajectory!r}")
    return rows


def recorded_tolerance(ev: Any, card: str) -> float:
    """The one tolerance the ledger records with every verdict of ``card``."""
    found = {v["tolerance"] for v in ev.json("ledger.json")["verdicts"] if v["card"] == card}
    if len(found) != 1:
        raise KitError(f"{ev.root}/ledger.json: {card} verdicts record "
                       f"{len(found)} tolerances {sorted(found)}, not one")
    return float(found.pop())


def _metrics(ev: Any, rows: list[dict[str, Any]], metric: str) -> np.ndarray[Any, Any]:
    scale = recorded_tolerance(ev, V_TOL_CARDS[metric]) if metric in V_TOL_CARDS else 1.0
    return np.array([_metric(r, metric) for r in rows]) / scale


def _metric(row: dict[str, Any], metric: str) -> float:
    if metric == "mirror_ratio":
        return float(row["mirror_violation"] / row["mirror_mapping_floor"])
    if metric in ("permutation_max", "permutation_v_tol"):
        return float(max(row["permutation_violations"]))
    if metric == "continuity_v_tol":
        return max(float(row["continuity_ratio"]) - 1.0, 0.0)
    if metric not in METRICS:
        raise KitError(f"unknown MGN metric {metric!r}; metrics: {METRICS}")
    return float(row[metric])


def _stat(values: np.ndarray[Any, Any], stat: str) -> Value:
    if stat == "count":
        return len(values)
    if stat == "range":
        return [float(values.min()), float(values.max())]
    return float(getattr(np, stat)(values))


def mgn_metric(ev: Any, metric: str, stat: str, arch: str = "mgn",
               seeds: list[int] | None = None, trajectory: str | None = None) -> Value:
    """median/mean/min/max/count/range of a per-case metric over some subjects' cases."""
    return _stat(_metrics(ev, _cases(ev, arch, seeds, trajectory), metric), stat)


def mgn_metric_ratio(ev: Any, top: str, bottom: str, stat: str = "median",
                     trajectory: str | None = "train", bottom_trajectory: str | None = None,
                     seeds: list[int] | None = None) -> Value:
    """stat(top) / stat(bottom) over the MeshGraphNet cases (e.g. mirror violation over
    one-step error)."""
    a = mgn_metric(ev, top, stat, "mgn", seeds, trajectory)
    b = mgn_metric(ev, bottom, stat, "mgn", seeds, bottom_trajectory or trajectory)
    return float(a) / float(b)  # type: ignore[arg-type]


def mgn_median_ci(ev: Any, metric: str, end: str, arch: str = "mgn", seed: int = 300,
                  resamples: int = 10_000) -> Value:
    """Percentile bootstrap 95% interval of the median of a metric over every case."""
    values = _metrics(ev, _cases(ev, arch, None, None), metric)
    low, high = bootstrap_ci(values, np.median, seed, resamples)
    return low if end == "low" else high


def mgn_subjects(ev: Any, arch: str = "mgn") -> Value:
    return len(_subjects(ev, arch, None))


def mgn_trajectories(ev: Any) -> Value:
    """Distinct evaluation trajectories (the temporal hold-out and the other flows)."""
    return len({r["trajectory"] for r in _cases(ev, "mgn", None, None)})


def mgn_transitions(ev: Any, trajectory: str, seed: int = 0) -> Value:
    return len(_cases(ev, "mgn", [seed], trajectory))


def mgn_architectures(ev: Any, include_roster: bool = False) -> Value:
    """Cylinder-flow architectures beyond the seed replicas: the wider/deeper variants,
    the PointMLP and PhysicsNeMo's MeshGraphNet, as far as ``mgn.json`` holds them; with
    ``include_roster`` the MeshGraphNet seed replicas count as one more (the paper's "four
    architectures" at L353: the roster, the variants, PointMLP, PhysicsNeMo)."""
    groups = set()
    for s in ev.json("mgn.json")["subjects"]:
        groups.add("variants" if s["arch"] == "mgn" and s["seed"] in VARIANTS else s["arch"])
    if not include_roster:
        groups.discard("mgn")
    return len(groups)


TASKS = {"mgn-": "incompressible cylinder flow", "cmp-": "compressible airfoil"}


def cfd_tasks(ev: Any) -> Value:
    """CFD tasks with at least one executed verdict in the verdict ledger (cylinder flow:
    ``mgn-`` cards, the compressible airfoil: ``cmp-`` cards)."""
    return len({task for v in ev.json("ledger.json")["verdicts"]
                for prefix, task in TASKS.items() if v["card"].startswith(prefix)})


def physicsnemo_ran(ev: Any) -> Value:
    """Whether the run included NVIDIA PhysicsNeMo's MeshGraphNet (``mgn.json`` says
    ``run: ...`` or ``not run: why``); claims on it are not run here otherwise."""
    return str(ev.json("mgn.json")["physicsnemo"]).startswith("run:")


Prefix = str | list[str] | None


def _verdicts(ev: Any, card: str, prefix: Prefix, contains: str | None) -> list[str]:
    starts = (prefix,) if isinstance(prefix, str) else tuple(prefix or ())
    rows = [v["verdict"] for v in ev.json("ledger.json")["verdicts"]
            if v["card"] == card and (not starts or v["case"].startswith(starts))
            and (contains is None or contains in v["case"])]
    if not rows:
        raise KitError(f"{ev.root}/ledger.json: no verdicts of {card} ({prefix}, {contains})")
    return rows


def verdict_count(ev: Any, card: str, verdicts: list[str], prefix: Prefix = None,
                  contains: str | None = None) -> Value:
    return sum(v in verdicts for v in _verdicts(ev, card, prefix, contains))


def verdict_share(ev: Any, card: str, verdicts: list[str], prefix: Prefix = None,
                  contains: str | None = None) -> Value:
    rows = _verdicts(ev, card, prefix, contains)
    return sum(v in verdicts for v in rows) / len(rows)


def verdict_exact_interval(ev: Any, card: str, verdicts: list[str], prefix: Prefix = None,
                           contains: str | None = None) -> Value:
    """Clopper-Pearson 95% interval of the share of those verdicts."""
    rows = _verdicts(ev, card, prefix, contains)
    return list(clopper_pearson(sum(v in verdicts for v in rows), len(rows)))


def decision(ev: Any, card: str) -> Value:
    for d in ev.json("ledger.json")["decisions"]:
        if d["card"] == card:
            return str(d["decision"])
    raise KitError(f"{ev.root}/ledger.json: no gate decision for {card}")


def exact_mirror(ev: Any, stat: str, arch: str = "mgn", seeds: list[int] | None = None
                 ) -> Value:
    """Over the subjects' exact-mirror violations: ``first`` (seed 0, input 0),
    ``control`` (its normaliser-symmetrised violation), ``control_change`` (relative),
    or min/median/max."""
    subjects = _subjects(ev, arch, seeds)
    if stat in ("first", "control", "control_change"):
        first = subjects[0]["exact_mirror"]
        v, c = first["violations"][0], first["normaliser_control"]
        return float({"first": v, "control": c, "control_change": abs(c - v) / v}[stat])
    return _stat(np.array([v for s in subjects for v in s["exact_mirror"]["violations"]]),
                 stat)


FUNCTIONS: tuple[Callable[..., Value], ...] = (
    mgn_metric, mgn_metric_ratio, mgn_median_ci, mgn_subjects, mgn_trajectories,
    mgn_transitions, mgn_architectures, physicsnemo_ran, verdict_count, verdict_share,
    verdict_exact_interval, decision, exact_mirror, cfd_tasks)
