"""``python -m kit reproduce-all`` (``nox -s reproduce-all``): every study into one runs
root, then the claims recomputed from the fresh run beside the shipped ones.

1. The plan (``kit.reproduce.plan``): steps, disk, the expected time here.
2. Each step (``kit.reproduce.steps``) into its run folder, with a progress line at its
   start and end (elapsed, remaining). ``<runs>/reproduce-all/state.json`` records each
   finished step's options, wall and CPU seconds; a rerun, in the same or a later shell,
   keeps every step whose record matches its options and whose folder still agrees with
   its run manifest, and runs the rest (each study also resumes inside its own step).
3. Every study of this call shipped into a new ``<runs>/reproduce-all/fresh`` (``kit ship
   --into``)
   and judged against the shipped evidence (``kit.claims.fresh``): a verdict per file and
   the status diff, the page ``<runs>/replay/index.html``. The exit status is the
   verdict's. A sweep whose Polygraphy fault matrix came from an earlier call's drift run
   ships with that run beside it, recounted against and not judged (the record's
   ``support``).

Every study's trained models (``--models``): ``shipped`` starts each step that trains from
the shipped weights (sha256-checked): the digits models for the drift study and the
detector study (the drift study's fault stage then injects the shipped severities too),
every subject's checkpoint for the SciML study; the study then replays on identical
weights, judged within the measured tolerances (``docs/tolerances.md`` says where a CPU
did not hold). ``train`` retrains
them. ``auto`` (the default) trains only on the very CPU that made that study's evidence
(the same model and CPU flags, ``kit.machine``) and starts from the shipped
weights on any CPU that differs. After a retrain on another CPU the files are judged
against the study's own seed spread (``kit.spread``) and the verdict is the status diff
alone (said so). The sweep's shipped models are the drift study's, and its export with
BatchNormalization kept starts from their shipped training weights
(``claims/drift/weights/digits``, pinned by the fetch record's sha256).

``--small`` runs every study's small configuration (minutes) into ``runs/small``. Its
numbers are not the shipped configuration's, so nothing is compared with the shipped
evidence: it checks the chain (every study runs, resumes, ships, and its claims are
evaluated from what it shipped, the statuses printed, the claims a small run cannot
recompute named), and exits 0 when the chain ran end to end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path
from typing import Any

from kit.claims.coverage import unshipped
from kit.claims.fresh import RECORD, verify_fresh
from kit.claims.ship import ship
from kit.errors import KitError
from kit.files import canonical_json, read_json, write_atomic
from kit.heartbeat import minutes
from kit.paths import ROOT
from kit.reproduce.plan import Clock, load_costs, print_plan
from kit.reproduce.steps import NOT_SMALL, Options, finished, identity, run_step, steps_for
from kit.runfolder import MACHINE, cpu_seconds, say
from kit.runlock import hold

STATE = "state.json"
SHIPPED_MACHINE = ROOT / "claims" / "drift" / "evidence" / "digits" / MACHINE
# The machine record of the evidence each training step's shipped weights belong to.
MODEL_EVIDENCE = {"drift": SHIPPED_MACHINE, "corpus-detectors": SHIPPED_MACHINE,
                  "sweep": SHIPPED_MACHINE,
                  "sciml": ROOT / "claims" / "sciml" / "evidence" / "kit" / MACHINE}
# Where each step's run is judged in the replay record (study/substrate).
JUDGED_AS = {"drift": "drift/digits", "corpus": "corpus/kit",
             "corpus-detectors": "corpus/detectors", "sciml": "sciml/kit",
             "sweep": "realdrift/digits"}


def same_cpu(shipped: Path, here: dict[str, Any] | None = None) -> bool:
    """Whether this machine is the CPU that made the evidence ``shipped`` (a machine.json):
    the same architecture, CPU model and CPU flags. A missing record is another CPU."""
    from kit.machine import fingerprint

    if not shipped.is_file():
        return False
    recorded, here = read_json(shipped), here or fingerprint()
    return all(recorded.get(k) == here[k] for k in ("machine", "cpu", "cpu_flags_sha256"))


def resolve_models(asked: str, small: bool, steps: list[str],
                   here: dict[str, Any] | None = None) -> dict[str, str]:
    """Each training step's models: ``train`` or ``shipped`` (module docstring)."""
    found = {}
    for step in steps:
        if step not in MODEL_EVIDENCE:
            continue
        if small:
            found[step] = "train"
        elif asked != "auto":
            found[step] = asked
        else:
            found[step] = "train" if same_cpu(MODEL_EVIDENCE[step], here) else "shipped"
    return found


def retrained(models: dict[str, str], here: dict[str, Any] | None = None) -> list[str]:
    """The studies (``study/substrate``) whose run trained its own models on a CPU other than
    the one that made their evidence: judged against the seed spread, by status alone."""
    return sorted(JUDGED_AS[step] for step, source in models.items()
                  if source == "train" and not same_cpu(MODEL_EVIDENCE[step], here))


def run_command(args: argparse.Namespace) -> int:
    """The command line's call: check the options, then ``reproduce_all``."""
    from kit.runtime.scale import check_options

    check_options(args.scheduler, args.workers)
    if args.small and args.models == "shipped":
        raise KitError("--small --models shipped: the small configuration trains its own "
                       "one-epoch model; the shipped models belong to the full one")
    steps = steps_for(args.only, args.small)
    for step in set(steps_for(args.only)) - set(steps):
        say(f"reproduce-all: {step}: left out of --small ({NOT_SMALL[step]})")
    models = resolve_models(args.models, args.small, steps)
    for step, source in models.items():
        why = ("the small configuration trains" if args.small else
               (f"--models {args.models}" if args.models != "auto" else
                   "this is the CPU that made its evidence" if source == "train" else
                   f"this CPU is not the one that made its evidence ({MODEL_EVIDENCE[step]})"))
        say(f"reproduce-all: {step}: models {source} ({why})")
    runs = args.runs or ROOT / "runs" / ("small" if args.small else "")
    options = Options(runs=runs.resolve(), small=args.small, models=models,
                      without_physicsnemo=args.without_physicsnemo, backend=args.backend,
                      scheduler=args.scheduler, workers=args.workers)
    return reproduce_all(options, steps, plan_only=args.plan)


def reproduce_all(o: Options, steps: list[str], plan_only: bool = False) -> int:
    """Plan, run the unfinished steps, ship and judge; returns the exit status."""
    with hold(o.runs / "reproduce-all") as folder:
        state_path = folder / STATE
        state = read_state(state_path)
        kept = {s for s in steps if state.get(s, {}).get("identity") == identity(o, s)
                and finished(o, s)}
        costs = load_costs(o.small, models=o.models)
        print_plan(steps, kept, costs, o.runs, refuse=not plan_only)
        if plan_only:
            return 0
        cores = os.cpu_count() or 1
        clock = Clock({s: costs[s].expected_s(cores) for s in steps if s not in kept},
                      time.monotonic())
        for number, step in enumerate(steps, 1):
            where = f"reproduce-all: step {number}/{len(steps)} {step}"
            if step in kept:
                say(f"{where}: kept from an earlier run ({state[step]['wall_s']:.0f} s wall, "
                    f"{state[step]['cpu_s']:.0f} CPU s then)")
                continue
            say(f"{where}: started; {clock.line(time.monotonic())}")
            state.pop(step, None)
            write_atomic(state_path, canonical_json(state))
            wall, cpu = time.monotonic(), cpu_seconds()
            run_step(o, step, clock.expected.get(step, 0.0) * clock.pace())
            if not finished(o, step):
                raise KitError(f"{o.folder(step)}: {step} ended without a finished run "
                               "(its last record and a run manifest that checks out)")
            state[step] = {"identity": identity(o, step), "cores": cores,
                           "wall_s": round(time.monotonic() - wall, 1),
                           "cpu_s": round(cpu_seconds() - cpu, 1)}
            write_atomic(state_path, canonical_json(state))
            clock.finish(step, state[step]["wall_s"])
            say(f"{where}: done in {minutes(state[step]['wall_s'])} wall, "
                f"{state[step]['cpu_s']:.0f} CPU s; {clock.line(time.monotonic())}")
        return judge(o, steps, folder)


STEP_FIELDS: dict[str, type | tuple[type, ...]] = {
    "identity": str, "cores": int, "wall_s": (int, float), "cpu_s": (int, float)}
# The bounds of a step record's numbers: the progress line formats them as floats (an
# integer of 400 digits overflows there), and no step takes a century or a million cores.
STEP_BOUNDS = {"cores": (1, 1 << 20), "wall_s": (0, 3_200_000_000), "cpu_s": (0, 3_200_000_000)}


def read_state(path: Path) -> dict[str, Any]:
    """The finished steps' records (empty when there is none yet); a file that is not the
    kit's (not an object of step records with their fields) is a KitError naming it."""
    if not path.is_file():
        return {}
    state = read_json(path, f"delete {path} to run every step again")
    fix = f"it is not the kit's state; delete {path} to run every step again"
    if not isinstance(state, dict):
        raise KitError(f"{path}: a {type(state).__name__}, not an object; {fix}")
    for step, record in state.items():
        if not isinstance(record, dict) or any(
                not isinstance(record.get(k), kind) or isinstance(record.get(k), bool)
                for k, kind in STEP_FIELDS.items()):
            raise KitError(f"{path}: step {step!r} is not a record with "
                           f"{', '.join(STEP_FIELDS)}; {fix}")
        for key, (low, high) in STEP_BOUNDS.items():
            if not low <= record[key] <= high:  # NaN compares false: refused too
                raise KitError(f"{path}: step {step!r} has {key} {_shown(record[key])}, "
                               f"outside {low} to {high}; {fix}")
    return state


def _shown(value: float) -> str:
    """A number as the error shows it: a huge integer by its digit count alone."""
    digits = len(str(abs(value))) if isinstance(value, int) else 0
    return f"an integer of {digits} digits" if digits > 30 else repr(value)


# What the shipped studies and the replay record leave in the fresh folder, all of it made
# again by every call (``kit.claims.ship`` and ``kit.claims.fresh``).
FRESH_NAMES = frozenset({"claims", "manifests", RECORD})


def judge(o: Options, steps: list[str], folder: Path) -> int:
    """Ship every finished study into ``folder/fresh`` and judge it (module docstring)."""
    fresh = folder / "fresh"
    if fresh.is_dir():  # the kit's own folder: the record covers this call's steps alone
        foreign = sorted(p.name for p in fresh.iterdir() if p.name not in FRESH_NAMES)
        foreign += [p.relative_to(fresh).as_posix() for p in unshipped(fresh)]
        if foreign:  # what ship and the record write, and nothing of a user's, goes
            raise KitError(f"{fresh}: holds files the kit did not write there "
                           f"or changed since ({', '.join(foreign[:5])}"
                           f"{' and more' if len(foreign) > 5 else ''}); move them out, "
                           "and run again")
        shutil.rmtree(fresh)
    support = beside(o, steps)
    for step in [*steps, *support]:
        say(f"reproduce-all: shipping {step} into {fresh}"
            + (" (not judged: the sweep's Polygraphy fault matrix is recounted against it)"
               if step in support else ""))
        ship(o.folder(step), root=fresh)
    if o.small:
        return small_verdict(fresh)
    models = {JUDGED_AS[step]: source for step, source in o.models.items() if step in steps}
    return verify_fresh(fresh, out=o.runs / "replay" / "index.html",
                        retrained=retrained({s: m for s, m in o.models.items() if s in steps}),
                        models=models, support=[JUDGED_AS[step] for step in support])


def beside(o: Options, steps: list[str]) -> list[str]:
    """The steps shipped beside this call's only to recount one of them: the drift run,
    when the sweep ran Polygraphy on its fault matrix and the drift step is not this
    call's (an earlier call's run in the same runs root)."""
    from kit.drift.recompute_realdrift import FAULT_MATRIX

    if "sweep" in steps and "drift" not in steps and \
            (o.folder("sweep") / FAULT_MATRIX).is_file():
        if not finished(o, "drift"):
            raise KitError(f"{o.folder('sweep') / FAULT_MATRIX}: computed from the drift run "
                           f"{o.folder('drift')}, which no longer agrees with its run "
                           "manifest; run reproduce-all --only drift realdrift")
        return ["drift"]
    return []


def small_verdict(fresh: Path) -> int:
    """Every claim of each ledger evaluated from the small run's evidence, its statuses
    printed, and the claims the small configuration cannot recompute (it has one model, a
    few faults, two releases) named; returns 0: the chain ran end to end."""
    from kit.claims.ledger import clear_cache, evaluate, load_ledger
    from kit.claims.verify import count_statuses

    for path in sorted((ROOT / "claims").glob("*.yaml")):
        ledger = load_ledger(path)
        present = [name for name, s in ledger["substrates"].items()
                   if (fresh / s["evidence"]).is_dir()]
        if not present:
            continue
        clear_cache()
        problems: list[str] = []
        outcomes = [o for o in evaluate(ledger, fresh, problems) if o.substrate in present]
        counts = count_statuses(outcomes).get(ledger["study"], {})
        print(f"reproduce-all --small: {ledger['study']}: {len(outcomes)} claims evaluated ("
              + ", ".join(f"{n} {s}" for s, n in counts.items() if n) + f"), "
              f"{len(problems)} cannot be recomputed from the small configuration")
        for problem in problems:
            print(f"reproduce-all --small: {ledger['study']}: not recomputable: {problem}")
    print("reproduce-all --small: every study ran, shipped and was evaluated; the small "
          "configuration's numbers are not the shipped configuration's, so nothing is "
          "compared with the shipped evidence")
    return 0
