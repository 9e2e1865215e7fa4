"""The FNO part of the SciML study: gate decisions and verdicts over the kit's subjects.

- K=6 checkpoints (``seeds_per_pde`` per PDE, heat and Burgers) x 4 held-out cases:
  periodic translation (gate: periodic data, no positional embedding, the tolerance above
  the float32 sensitivity floor) and periodic conservation (gate: reference floor) give
  per-case verdicts; Dirichlet translation is rejected by the gate for every checkpoint
  (the shift changes the boundary-value problem) and never executed.
- A K=15 roster per PDE decides translation admission per checkpoint; the admitted
  share carries a Wilson 95% interval.

Tolerances: translation 1e-5 relative L2 (``TRANSLATION_TOLERANCE``: about 100 float32
ulps, fixed before any subject ran); conservation the card's margin times the larger of
the reference solver's own drift and the float32 rounding of the reference's sum.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from kit.runfolder import Progress
from kit.sciml import fno
from kit.sciml.cards import fixed_tolerance
from kit.sciml.gate import GateFindings, decide
from kit.sciml.ledger import Ledger
from kit.sciml.solvers import PDES
from kit.sciml.stats import rate
from kit.sciml.verdicts import judge

TRANSLATION_TOLERANCE = fixed_tolerance("fno-periodic-translation")
PDE_NAMES = tuple(PDES)


def _translation_evidence(card: dict[str, Any], floor: float, embedding: str | None,
                          embedding_effect: dict[str, float]) -> GateFindings:
    return GateFindings(
        preconditions={card["preconditions"][0]: "holds",
                       card["preconditions"][1]: "holds" if embedding is None else "fails"},
        boundary_compatibility="holds", output_mapping="holds", floor=floor,
        tolerance=TRANSLATION_TOLERANCE,
        notes={"positional_embedding": str(embedding),
               "untrained violation with the grid embedding":
                   f"{embedding_effect['grid']:.3g}",
               "untrained violation without it": f"{embedding_effect['none']:.3g}"})


def _admission_roster(trans: dict[str, Any], base: fno.Recipe, roster: int,
                      shifts: list[list[int]], effect: dict[str, float], cache: Path | None
                      ) -> tuple[dict[str, Any], dict[tuple[str, int], Any]]:
    """Train (or load) ``roster`` subjects per PDE and gate each on translation: the roster
    record (with each PDE's admitted count and Wilson interval) and the models."""
    record: dict[str, Any] = {}
    models: dict[tuple[str, int], Any] = {}
    progress = Progress("sciml: FNO subjects", len(PDE_NAMES) * roster)
    for pde in PDE_NAMES:
        admitted = []
        for seed in range(roster):
            model, trained = fno.train(
                replace(base, pde=pde, seed=seed), cache)
            models[(pde, seed)] = model
            u0, _ = fno.heldout(pde)
            found = fno.translation(model, u0, shifts)
            decision = decide(trans, _translation_evidence(
                trans, float(found["floor"].max()), base.embedding, effect))
            admitted.append(decision.decision == "retained-executable")
            record.setdefault(pde, []).append({
                "seed": seed, "final_loss": trained["final_loss"],
                "decision": decision.decision,
                "mean_violation": float(found["violation"].mean()),
                "floor": float(found["floor"].max())})
            progress.step(f"{pde} seed {seed}")
        record[f"{pde}_admitted"] = rate(sum(admitted), len(admitted), value=False)
    return record, models


def _checkpoint(ledger: Ledger, cards: tuple[dict[str, Any], ...], model: Any, pde: str,
                name: str, shifts: list[list[int]], embedding: str | None,
                effect: dict[str, float], first: bool) -> dict[str, Any]:
    """Decide the three relations on one checkpoint (recording the decisions on the first),
    judge every held-out case and return the checkpoint's record."""
    trans, cons, dirichlet = cards
    u0, target = fno.heldout(pde)
    t = fno.translation(model, u0, shifts)
    t_decision = decide(trans, _translation_evidence(
        trans, float(t["floor"].max()), embedding, effect))
    c = fno.conservation(model, u0, target)
    tolerance = cons["tolerance"]["floor_margin"] * float(
        max(c["reference_drift"].max(), c["float32_floor"].max()))
    c_decision = decide(cons, GateFindings(
        preconditions={p: "holds" for p in cons["preconditions"]},
        boundary_compatibility="holds", output_mapping="holds",
        floor=float(c["reference_drift"].max()), tolerance=tolerance))
    d_decision = decide(dirichlet, GateFindings(
        preconditions={dirichlet["preconditions"][0]: "fails"},
        boundary_compatibility="fails", output_mapping="holds", floor=None,
        tolerance=None))
    if first:
        for decision in (t_decision, c_decision, d_decision):
            ledger.decide(decision)
    for case in range(len(u0)):
        ledger.add(judge(trans["id"], f"{name}-case{case}",
                         float(t["violation"][case]), TRANSLATION_TOLERANCE,
                         floor=float(t["floor"][case])))
        ledger.add(judge(cons["id"], f"{name}-case{case}", float(c["violation"][case]),
                         tolerance, floor=float(c["subject_floor"][case])))
    return {"name": name, "decisions": {"translation": t_decision.decision,
                                        "conservation": c_decision.decision,
                                        "dirichlet_translation": d_decision.decision},
            "translation_violation": t["violation"].tolist(),
            "translation_floor": t["floor"].tolist(),
            "conservation_violation": c["violation"].tolist(),
            "conservation_tolerance": tolerance,
            "reference_drift": c["reference_drift"].tolist(),
            "subject_floor": c["subject_floor"].tolist()}


def run_fno(ledger: Ledger, cards: dict[str, dict[str, Any]], seeds_per_pde: int = 3,
            roster: int = 15, recipe: fno.Recipe | None = None, cache: Path | None = None
            ) -> dict[str, Any]:
    """Train (or load) every subject, decide, judge; returns the FNO evidence record."""
    base = recipe or fno.Recipe("heat", 0)
    relations = (cards["fno-periodic-translation"], cards["fno-periodic-conservation"],
                 cards["fno-dirichlet-translation"])
    shifts = relations[0]["transformation"]["parameters"]["shifts"]
    effect = fno.embedding_effect(shifts)
    record: dict[str, Any] = {"embedding_effect": effect, "checkpoints": [], "roster": {},
                              "translation_tolerance": TRANSLATION_TOLERANCE}
    record["roster"], models = _admission_roster(relations[0], base, roster, shifts, effect,
                                                 cache)
    for pde in PDE_NAMES:
        for seed in range(seeds_per_pde):
            record["checkpoints"].append(_checkpoint(
                ledger, relations, models[(pde, seed)], pde, f"fno-{pde}-seed{seed}", shifts,
                base.embedding, effect, first=not record["checkpoints"]))
    record["max_translation_violation"] = max(
        max(c["translation_violation"]) for c in record["checkpoints"])
    record["dirichlet_rejected"] = sum(
        c["decisions"]["dirichlet_translation"] == "rejected" for c in record["checkpoints"])
    return record
