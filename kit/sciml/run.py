"""``nox -s sciml``: the SciML study through cards, gate, verdicts and ledger.

The P1 divergence floor sweep (kit/sciml/operator_floor.py) decides the
absolute-divergence card per resolution (numerically decidable only where the card's
tolerance dominates the measured floor by its margin), and the flux-form finite-volume
balance is admitted and executed as a conservation verdict; the FNO subjects
(kit/sciml/fno_study.py) add periodic translation and conservation verdicts, the rejected
Dirichlet translation and the K=15 admission roster; the PINN subjects
(kit/sciml/pinn_study.py) add MR-A, MR-B and MR-C with their statistics; the
MeshGraphNet study (kit/sciml/mgn_study.py) adds node permutation, the mirror-y
relations and continuity on the simulated cylinder flow, its fault catalogue and the
second task; the closed-form output-level PINN and FNO probes (kit/sciml/probes.py)
complete the 60-entry unified catalogue.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from kit.sciml import pinn
from kit.sciml.cards import load_cards
from kit.sciml.cylinder import Flow
from kit.sciml.deepmind import read_meta
from kit.sciml.fno import Recipe
from kit.sciml.fno_study import run_fno
from kit.sciml.gate import Evidence, decide
from kit.sciml.ledger import Ledger
from kit.sciml.mgn_study import HELDOUT_FLOWS, run_mgn
from kit.sciml.mgn_train import Subject
from kit.sciml.operator_floor import finite_volume_balance, sweep
from kit.sciml.pinn_study import run_pinn
from kit.sciml.probes import reference_check, run_fno_probes, run_pinn_probes, unified_catalogue
from kit.sciml.second_task import Airfoil
from kit.sciml.verdicts import judge
from kit.stages.common import say, write_manifest
from kit.worker import canonical_json, write_atomic

ABSOLUTE_TOLERANCE = 0.05  # |div u| tolerance in the field's units, ~0.5% of |grad u| ~ pi^2
NOTE = ("The paper's subjects were trained on public data out of reach here; the kit "
        "measures its own operators and (as they land) trains its own surrogates on data it "
        "generates, with the same cards, gate and verdict rules.")


class Steps:
    """The study's progress on stderr, as the drift stages give theirs: step n of N, what
    it trains or evaluates, and the wall time of each step (a cold run trains for most of
    an hour)."""

    def __init__(self, total: int) -> None:
        self.total, self.done = total, 0
        self.begun = self.last = time.monotonic()

    def _close(self) -> None:
        if self.done:
            say(f"sciml: step {self.done}/{self.total} done in "
                f"{time.monotonic() - self.last:.0f} s")

    def start(self, what: str) -> None:
        self._close()
        self.done += 1
        self.last = time.monotonic()
        say(f"sciml: step {self.done}/{self.total}: {what}")

    def finish(self, out: Path) -> None:
        self._close()
        say(f"sciml: {self.total} steps in {time.monotonic() - self.begun:.0f} s; evidence in "
            f"{out}")


def run_sciml(out: Path, refinements: range = range(1, 10), fv_cells: int = 256,
              fno_roster: int = 15, fno_seeds: int = 3, fno_recipe: Recipe | None = None,
              pinn_roster: int = 15, pinn_recipe: pinn.Recipe | None = None,
              mgn_roster: int = 6, mgn_flow: Flow | None = None,
              mgn_subject: Subject | None = None, mgn_permutations: int = 5,
              airfoil: Airfoil | None = None, mgn_heldout: tuple[Flow, ...] = HELDOUT_FLOWS,
              mgn_pointmlp: int = 3, physicsnemo: Path | None = None,
              physicsnemo_backend: str = "physicsnemo", cache: Path | None = None,
              mgn_source: Path | None = None, mgn_resimulate: bool = False) -> dict[str, Any]:
    """Write the sweep, the FV balance, the FNO study and the verdict ledger under ``out``."""
    if mgn_source is not None:
        read_meta(mgn_source)  # a bad folder fails before hours of work, naming the file
    cards = load_cards()
    steps = Steps(5)
    steps.start(f"operator floor over {len(refinements)} refinements and the finite-volume "
                f"balance on {fv_cells} cells")
    floor = sweep(refinements)
    balance = finite_volume_balance(fv_cells)
    ledger = Ledger(NOTE)

    p1 = cards["p1-divergence-absolute"]
    margin = p1["tolerance"]["floor_margin"]
    per_resolution = []
    for row in floor["resolutions"]:
        evidence = Evidence(preconditions={p: "holds" for p in p1["preconditions"]},
                            boundary_compatibility="holds", output_mapping="holds",
                            floor=row["measured"], tolerance=ABSOLUTE_TOLERANCE)
        per_resolution.append({"refinements": row["refinements"], "h": row["h"],
                               "decision": decide(p1, evidence).decision})
    finest = floor["resolutions"][-1]
    ledger.decide(decide(p1, Evidence(
        preconditions={p: "holds" for p in p1["preconditions"]},
        boundary_compatibility="holds", output_mapping="holds",
        floor=finest["measured"], tolerance=ABSOLUTE_TOLERANCE)))

    fv = cards["fv-flux-conservation"]
    tolerance = float(100 * np.finfo(np.float64).eps * balance["flux_scale"])
    ledger.decide(decide(fv, Evidence(
        preconditions={p: "holds" for p in fv["preconditions"]},
        boundary_compatibility="holds", output_mapping="holds",
        floor=balance["floor"], tolerance=tolerance)))
    ledger.add(judge(fv["id"], f"grid-{fv_cells}", balance["imbalance"], tolerance,
                     floor=balance["floor"]))

    steps.start(f"FNO subjects (train or load from {cache or 'the cache'}: {fno_seeds} seeds "
                f"per PDE, admission roster of {fno_roster})")
    fno_record = run_fno(ledger, cards, fno_seeds, fno_roster, fno_recipe, cache)

    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "fno.json", canonical_json(fno_record))
    steps.start(f"PINN subjects (train or load: roster of {pinn_roster})")
    pinn_record = run_pinn(ledger, cards, pinn_roster, pinn_recipe, cache)
    write_atomic(out / "pinn.json", canonical_json(pinn_record))
    steps.start(f"MeshGraphNet study (roster of {mgn_roster}, {mgn_permutations} permutation "
                f"seeds, fault catalogue, second task"
                f"{', PhysicsNeMo' if physicsnemo is not None else ', without PhysicsNeMo'})")
    records = run_mgn(ledger, cards, mgn_roster, mgn_permutations, mgn_flow, mgn_subject,
                      cache, airfoil, mgn_heldout, mgn_pointmlp, physicsnemo,
                      physicsnemo_backend, mgn_source, mgn_resimulate)
    steps.start("closed-form PINN and FNO probes and the unified catalogue")
    records["unified.json"] = {
        **unified_catalogue(records["mgn_faults.json"],
                            run_pinn_probes(pinn_roster, pinn_recipe, cache),
                            run_fno_probes(fno_seeds, fno_recipe, cache)),
        "reference_check": reference_check()}
    for name, record in records.items():
        write_atomic(out / name, canonical_json(record))
    write_atomic(out / "operator_floor.json", canonical_json(
        {**floor, "absolute_tolerance": ABSOLUTE_TOLERANCE, "floor_margin": margin,
         "gate_per_resolution": per_resolution}))
    write_atomic(out / "fv_balance.json", canonical_json(balance))
    ledger.write(out / "ledger.json")
    write_manifest(out)
    steps.finish(out)
    return ledger.as_dict()


def default_folder(resimulate: bool, deepmind: Path | None) -> str:
    """The run folder's name under ``runs/`` for the trajectories the study reads."""
    return "sciml-deepmind" if deepmind else "sciml-resimulated" if resimulate else "sciml"


def run_command(run: Path | None = None, without_physicsnemo: bool = False,
                resimulate: bool = False, deepmind: Path | None = None) -> Path:
    """``python -m kit sciml``: build the PhysicsNeMo environment unless left out, then the
    whole study into ``run`` (default ``runs/<default_folder>``); returns the folder."""
    from kit.paths import ROOT
    from kit.stages.runlock import hold
    from kit.venvs import ensure_physicsnemo

    out = run or ROOT / "runs" / default_folder(resimulate, deepmind)
    with hold(out) as folder:
        if deepmind is not None:
            read_meta(deepmind)  # before building anything: a bad folder fails at once
        physicsnemo = None if without_physicsnemo else ensure_physicsnemo()
        run_sciml(folder, physicsnemo=physicsnemo,
                  mgn_source=None if deepmind is None else deepmind.resolve(),
                  mgn_resimulate=resimulate)
    return folder

