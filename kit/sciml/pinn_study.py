"""The PINN part of the SciML study: K=15 subjects per PDE, three relations, statistics.

Per PDE (Burgers, heat) and seed: MR-A collocation permutation (vacuous by construction:
recorded, every verdict a pass that says nothing), MR-B boundary residual over the
residual floor, MR-C reference-relative conservation. Pass rates carry Wilson 95%
intervals, mean ratios percentile-bootstrap intervals (seeded); the PDEs are compared on
the MR-B ratios with Cliff's delta, the Wilcoxon signed-rank test paired by seed and the
Mann-Whitney rank-sum test (the groups are independent fits; both are reported).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as scipy_stats

from kit.runfolder import Progress
from kit.sciml import pinn
from kit.sciml.cards import fixed_tolerance
from kit.sciml.gate import GateFindings, decide
from kit.sciml.ledger import Ledger
from kit.sciml.stats import bootstrap_mean_ci, cliffs_delta, rate, wilcoxon
from kit.sciml.verdicts import judge

EXACT = float(np.finfo(np.float64).eps)  # the boundary residual's rounding floor


def reference_floor(pde: str) -> float:
    """Discretisation error of the reference's integral: 400 cells against 800 (0 for the
    exact heat solution)."""
    if pde == "heat":
        return 0.0
    x = np.linspace(0, 1, 201)
    coarse = np.trapezoid(pinn.reference(pde, x, pinn.HORIZON), x)
    fine_x = np.linspace(0, 1, 2001)
    fine = np.trapezoid(pinn.reference(pde, fine_x, pinn.HORIZON), fine_x)
    return float(abs(coarse - fine) / abs(fine))


def summarise(values: list[float], passes: list[bool], seed: int) -> dict[str, Any]:
    """One relation's summary over a PDE's subjects: the pass rate with its Wilson
    interval, the mean ratio and its percentile bootstrap interval (``seed``)."""
    arr = np.asarray(values)
    mean_ci = bootstrap_mean_ci(arr, seed) if len(arr) > 1 else (float(arr[0]), float(arr[0]))
    return {**rate(sum(passes), len(passes), count="passes", value=False),
            "mean_ratio": float(arr.mean()), "mean_ratio_ci95": list(mean_ci)}


def summaries(rows: list[dict[str, Any]], p_index: int) -> dict[str, Any]:
    """A PDE's summary of MR-A, MR-B and MR-C from its subjects' rows (``p_index``: the
    PDE's place in ``pinn.PDES``, which seeds the bootstrap)."""
    return {
        "mr_a": {"passes": sum(r["verdicts"]["mr_a"] == "pass" for r in rows),
                 "n": len(rows), "vacuous": True,
                 "max_violation": max(r["mr_a_violation"] for r in rows)},
        "mr_b": summarise([r["mr_b_ratio"] for r in rows],
                          [r["verdicts"]["mr_b"] == "pass" for r in rows], 100 + p_index),
        "mr_c": summarise([r["mr_c_ratio"] for r in rows],
                          [r["verdicts"]["mr_c"] == "pass" for r in rows], 200 + p_index)}


def comparison(heat: Any, burgers: Any) -> dict[str, Any]:
    """MR-B's ratios of the two PDEs compared: Cliff's delta, and with more than one seed
    the signed-rank test paired by seed and the Mann-Whitney test."""
    heat, burgers = np.asarray(heat), np.asarray(burgers)
    found: dict[str, Any] = {"n_per_pde": len(heat),
                             "cliffs_delta_heat_vs_burgers": cliffs_delta(heat, burgers)}
    if len(heat) > 1:
        found["wilcoxon_signed_rank_p_paired_by_seed"] = wilcoxon(heat, burgers)
        found["mann_whitney_p"] = float(scipy_stats.mannwhitneyu(heat, burgers).pvalue)
    return found


def run_pinn(ledger: Ledger, cards: dict[str, dict[str, Any]], roster: int = 15,
             recipe: pinn.Recipe | None = None, cache: Path | None = None) -> dict[str, Any]:
    """Train (or load) every PINN, decide, judge; returns the PINN evidence record."""
    base = recipe or pinn.Recipe("heat", 0)
    a, b, c = (cards["pinn-collocation-permutation"], cards["pinn-boundary-residual"],
               cards["pinn-reference-conservation"])
    exact, boundary, conservation = (fixed_tolerance(card["id"]) for card in (a, b, c))
    floors = {pde: reference_floor(pde) for pde in pinn.PDES}
    ledger.decide(decide(a, GateFindings({a["preconditions"][0]: "holds"}, "holds", "holds",
                                     floor=0.0, tolerance=exact,
                                     notes={"vacuous": "pointwise network: cannot fail"})))
    ledger.decide(decide(b, GateFindings({b["preconditions"][0]: "holds"}, "holds", "holds",
                                     floor=EXACT, tolerance=boundary)))
    ledger.decide(decide(c, GateFindings({c["preconditions"][0]: "holds"}, "holds", "holds",
                                     floor=max(floors.values()),
                                     tolerance=conservation)))
    record: dict[str, Any] = {"reference_floor": floors, "subjects": [], "summary": {},
                              "boundary_floor": boundary,
                              "conservation_tolerance": conservation}
    ratios: dict[str, list[float]] = {}
    progress = Progress("sciml: PINN subjects", len(pinn.PDES) * roster)
    for p_index, pde in enumerate(pinn.PDES):
        rows = []
        for seed in range(roster):
            net, trained = pinn.train(replace(base, pde=pde, seed=seed), cache)
            found = pinn.evaluate(net, pde)
            case = f"pinn-{pde}-seed{seed}"
            va = judge(a["id"], case, found["mr_a_violation"], exact)
            vb = judge(b["id"], case, found["mr_b_violation"], boundary)
            vc = judge(c["id"], case, abs(found["mr_c_ratio"] - 1.0),
                       conservation, floor=floors[pde])
            for verdict in (va, vb, vc):
                ledger.add(verdict)
            rows.append({"seed": seed, "final_loss": trained["final_loss"], **found,
                         "mr_b_ratio": found["mr_b_violation"] / boundary,
                         "verdicts": {"mr_a": va.verdict, "mr_b": vb.verdict,
                                      "mr_c": vc.verdict}})
            progress.step(f"{pde} seed {seed}")
        record["subjects"] += [{"pde": pde, **r} for r in rows]
        ratios[pde] = [r["mr_b_ratio"] for r in rows]
        record["summary"][pde] = summaries(rows, p_index)
    record["mr_b_comparison"] = comparison(ratios["heat"], ratios["burgers"])
    return record
