"""The SciML study as named steps over one run folder, like the drift stages:

    floor      the P1 operator floor over the refinements and the finite-volume balance
    fno        FNO subjects: train or load, admission roster, relations
    pinn       PINN subjects: train or load, roster, relations
    mgn        the MeshGraphNet study: roster, PointMLP, PhysicsNeMo, the seeded-fault
               catalogue and its sweeps, the second task
    catalogue  the closed-form PINN and FNO probes and the unified catalogue
    ledger     the verdict ledger of every step, and the run manifest
    report     tables and figures (``kit.sciml.report``; outside the run manifest)

Each step writes its records, then ``<run>/steps/<step>.json`` (unhashed run metadata):
the configuration's identity, the sha256 of each record it wrote and the gate decisions
and verdicts it added to the ledger. A rerun keeps every step whose state file matches the
configuration and whose records are unchanged, reloads its decisions and verdicts, and
runs from the first step that does not; a killed step left no state file, so it runs
again. A folder started with another configuration is refused, not mixed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kit.errors import KitError
from kit.files import canonical_json, read_json, sha256, write_atomic
from kit.heartbeat import heartbeat
from kit.machine import fingerprint
from kit.paths import cache_dir
from kit.runfolder import MACHINE, STEPS_DIR, WEIGHTS_DIR, say, write_manifest
from kit.sciml.cards import fixed_tolerance, load_cards
from kit.sciml.checkpoints import pin_numerics, take_used
from kit.sciml.config import Config
from kit.sciml.deepmind import read_meta
from kit.sciml.fno_study import run_fno
from kit.sciml.gate import Decision, GateFindings, decide
from kit.sciml.ledger import NULL_NOTE, Ledger
from kit.sciml.mgn_study import run_mgn
from kit.sciml.operator_floor import finite_volume_balance, sweep
from kit.sciml.pinn_study import run_pinn
from kit.sciml.probes import reference_check, run_fno_probes, run_pinn_probes, unified_catalogue
from kit.sciml.verdicts import Verdict, judge

ABSOLUTE_TOLERANCE = fixed_tolerance("p1-divergence-absolute")  # |div u|, field units
NOTE = ("The paper's subjects were trained on public data out of reach here; the kit "
        "measures its own operators and (as they land) trains its own surrogates on data it "
        "generates, with the same cards, gate and verdict rules.")


@dataclass
class Study:
    """What the steps share: the configuration, the cards, the run folder and the ledger."""

    config: Config
    out: Path
    cards: dict[str, dict[str, Any]] = field(default_factory=load_cards)
    ledger: Ledger = field(default_factory=lambda: Ledger(NOTE))

    def write(self, name: str, record: Any) -> str:
        write_atomic(self.out / name, canonical_json(record))
        return name


def _admitted(card: dict[str, Any], floor: float, tolerance: float) -> Decision:
    return decide(card, GateFindings(preconditions={p: "holds" for p in card["preconditions"]},
                                 boundary_compatibility="holds", output_mapping="holds",
                                 floor=floor, tolerance=tolerance))


def step_floor(s: Study) -> list[str]:
    c = s.config
    say(f"sciml: operator floor over {len(c.refinements)} refinements and the finite-volume "
        f"balance on {c.fv_cells} cells")
    floor = sweep(c.refinements)
    balance = finite_volume_balance(c.fv_cells)
    p1 = s.cards["p1-divergence-absolute"]
    per_resolution = [{"refinements": row["refinements"], "h": row["h"],
                       "decision": _admitted(p1, row["measured"], ABSOLUTE_TOLERANCE).decision}
                      for row in floor["resolutions"]]
    s.ledger.decide(_admitted(p1, floor["resolutions"][-1]["measured"], ABSOLUTE_TOLERANCE))
    fv = s.cards["fv-flux-conservation"]
    tolerance = float(100 * np.finfo(np.float64).eps * balance["flux_scale"])
    s.ledger.decide(_admitted(fv, balance["floor"], tolerance))
    s.ledger.add(judge(fv["id"], f"grid-{c.fv_cells}", balance["imbalance"], tolerance,
                       floor=balance["floor"]))
    return [s.write("operator_floor.json", {
                **floor, "absolute_tolerance": ABSOLUTE_TOLERANCE,
                "floor_margin": p1["tolerance"]["floor_margin"],
                "gate_per_resolution": per_resolution}),
            s.write("fv_balance.json", balance)]


def step_fno(s: Study) -> list[str]:
    c = s.config
    say(f"sciml: FNO subjects (train or load from {c.cache or 'the cache'}: {c.fno_seeds} "
        f"seeds per PDE, admission roster of {c.fno_roster})")
    return [s.write("fno.json", run_fno(s.ledger, s.cards, c.fno_seeds, c.fno_roster,
                                        c.fno_recipe, c.cache))]


def step_pinn(s: Study) -> list[str]:
    c = s.config
    say(f"sciml: PINN subjects (train or load: roster of {c.pinn_roster})")
    return [s.write("pinn.json", run_pinn(s.ledger, s.cards, c.pinn_roster, c.pinn_recipe,
                                          c.cache))]


def step_mgn(s: Study) -> list[str]:
    c = s.config
    say(f"sciml: MeshGraphNet study (roster of {c.mgn_roster}, {c.mgn_permutations} "
        "permutation seeds, fault catalogue, second task, "
        f"{'with' if c.physicsnemo is not None else 'without'} PhysicsNeMo)")
    records = run_mgn(s.ledger, s.cards, c.mgn_roster, c.mgn_permutations, c.mgn_flow,
                      c.mgn_subject, c.cache, c.airfoil, c.mgn_heldout, c.mgn_pointmlp,
                      c.physicsnemo, c.physicsnemo_backend, c.mgn_source, c.mgn_resimulate)
    return [s.write(name, record) for name, record in records.items()]


def step_catalogue(s: Study) -> list[str]:
    c = s.config
    say("sciml: closed-form PINN and FNO probes and the unified catalogue")
    faults = read_json(s.out / "mgn_faults.json")
    return [s.write("unified.json", {
        **unified_catalogue(faults, run_pinn_probes(c.pinn_roster, c.pinn_recipe, c.cache),
                            run_fno_probes(c.fno_seeds, c.fno_recipe, c.cache)),
        "reference_check": reference_check()})]


def step_ledger(s: Study) -> list[str]:
    """The verdict ledger, every subject's checkpoint the steps used (``weights/``, from
    the steps' state files, checked against the sha256 each recorded; none for the null
    subjects), and the run manifest over both."""
    s.ledger.write(s.out / "ledger.json")
    cache = s.config.cache or cache_dir()
    folder = s.out / WEIGHTS_DIR
    used: dict[str, str] = {}
    # the null subjects' weights are the seeded initial ones, which the code rebuilds from
    # their seeds (``Config.null``): not evidence to copy
    for name in () if s.config.untrained else STEPS:
        if _state_path(s.out, name).is_file():
            used.update(read_json(_state_path(s.out, name)).get("weights", {}))
    for name, expected in sorted(used.items()):
        source = cache / name
        if not source.is_file() or sha256(source) != expected:
            raise KitError(f"{source}: the checkpoint a step of {s.out} used is gone or "
                           "changed since; delete the run folder's steps/ and rerun")
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, source.read_bytes())
    for stale in sorted(folder.rglob("*.pt")) if folder.is_dir() else []:
        if stale.relative_to(folder).as_posix() not in used:
            stale.unlink()  # a checkpoint of an earlier run of this folder, not used now
    write_atomic(s.out / MACHINE, canonical_json(fingerprint()))  # run metadata, unhashed
    write_manifest(s.out)
    return ["ledger.json"]


def step_report(s: Study) -> list[str]:
    from kit.sciml.report import publish_report

    say(f"sciml: report {publish_report(s.out)}")
    return []


STEPS: dict[str, Callable[[Study], list[str]]] = {
    "floor": step_floor, "fno": step_fno, "pinn": step_pinn, "mgn": step_mgn,
    "catalogue": step_catalogue, "ledger": step_ledger, "report": step_report}


def _state_path(out: Path, name: str) -> Path:
    return out / STEPS_DIR / f"{name}.json"


def _kept(s: Study, name: str) -> dict[str, Any] | None:
    """The state of a step that finished under this configuration with its records
    unchanged, else None; a state from another configuration is an error."""
    path = _state_path(s.out, name)
    if not path.is_file():
        return None
    state = read_json(path, f"delete {path.parent} to rerun every step")
    if state.get("config") != s.config.identity():
        raise KitError(f"{path}: {s.out} was started with another configuration; "
                       "use another --run folder or delete this one")
    if "weights" not in state:  # written before the steps noted their checkpoints
        return None
    same = all((s.out / f).is_file() and sha256(s.out / f) == h
               for f, h in state["outputs"].items())
    return state if same else None


def _keep(s: Study, state: dict[str, Any]) -> None:
    for d in state["decisions"]:
        s.ledger.decide(Decision(**d))
    for v in state["verdicts"]:
        s.ledger.add(Verdict(**v))


def run_pipeline(config: Config, out: Path) -> dict[str, Any]:
    """Run (or resume) every step into ``out``; returns the ledger."""
    if config.mgn_source is not None:
        read_meta(config.mgn_source)  # a bad folder fails before hours of work, naming it
    capability = pin_numerics()
    out.mkdir(parents=True, exist_ok=True)
    s = Study(config, out, ledger=Ledger(NULL_NOTE if config.untrained else NOTE))
    say(f"sciml: torch kernels {capability} (kit/sciml/checkpoints.py NUMERICS)")
    begun, resuming = time.monotonic(), True
    for number, (name, step) in enumerate(STEPS.items(), 1):
        state = _kept(s, name) if resuming else None
        if state is not None:
            _keep(s, state)
            say(f"sciml: step {number}/{len(STEPS)} {name}: kept from an earlier run")
            continue
        resuming = False
        _state_path(out, name).unlink(missing_ok=True)
        say(f"sciml: step {number}/{len(STEPS)} {name}")
        started, decided, verdicts = time.monotonic(), set(s.ledger.decisions), \
            len(s.ledger.verdicts)
        take_used()
        with heartbeat(f"sciml: step {number}/{len(STEPS)} {name}"):  # training is long
            outputs = step(s)
        write_atomic(_state_path(out, name), canonical_json({
            "step": name, "config": config.identity(),
            "outputs": {f: sha256(out / f) for f in outputs},
            "weights": {n: sha256(p) for n, p in take_used().items() if p.is_file()},
            "decisions": [d.as_dict() for c, d in s.ledger.decisions.items()
                          if c not in decided],
            "verdicts": [v.as_dict() for v in s.ledger.verdicts[verdicts:]]}))
        say(f"sciml: step {number}/{len(STEPS)} {name} done in "
            f"{time.monotonic() - started:.0f} s")
    say(f"sciml: {len(STEPS)} steps in {time.monotonic() - begun:.0f} s; evidence in {out}")
    return s.ledger.as_dict()
