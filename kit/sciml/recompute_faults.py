"""The ``sciml.`` recompute functions of the MeshGraphNet seeded-fault catalogue: each
reads the raw per-mutant, per-trial records of ``mgn_faults.json`` in a SciML evidence
folder and recomputes one number (detections, metrics, the severity sweeps, precision and
recall)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from kit.errors import KitError, Undefined
from kit.sciml.recompute_mgn import _stat
from kit.sciml.stats import wilson
from kit.values import Value


def _faults(ev: Any) -> dict[str, Any]:
    return ev.json("mgn_faults.json")  # type: ignore[no-any-return]


SWEEPS = ("scale_sweep", "fraction_sweep")


def _groups(faults: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every group of trials by where it sits: the control, each mutant, each sweep level."""
    return {"control": faults["control"],
            **{f"mutants/{k}": m for k, m in faults["mutants"].items()},
            **{f"{sweep}/{k}": level for sweep in SWEEPS for k, level in faults[sweep].items()}}


def _design(faults: dict[str, Any], groups: dict[str, dict[str, Any]]) -> list[str]:
    """The study's design against the trials (``mgn_faults.run_catalogue``):
    ``permutation_seeds`` is the number of distinct seeds the control's and the mutants'
    trials hold and ``subjects`` lists as many subjects as they hold; the control and
    every mutant hold each (subject, seed) cell once, and every sweep level each subject
    once with seed 0."""
    seeds, subjects = faults["permutation_seeds"], len(faults["subjects"])
    full = {where: g["trials"] for where, g in groups.items()
            if where.split("/")[0] not in SWEEPS}
    held = {part: sorted({t[part] for rows in full.values() for t in rows})
            for part in ("seed", "subject")}
    problems = []
    if seeds != len(held["seed"]) or isinstance(seeds, bool):
        problems.append(f"permutation_seeds is {seeds!r}, but the trials hold "
                        f"{len(held['seed'])} distinct seeds {held['seed']}")
    if subjects != len(held["subject"]):
        problems.append(f"subjects lists {subjects} subjects, but the trials hold "
                        f"{len(held['subject'])} distinct subjects {held['subject']}")
    cells = Counter((i, s) for i in range(subjects) for s in range(len(held["seed"])))
    for where, group in groups.items():
        design = cells if where in full else Counter((i, 0) for i in range(subjects))
        found = Counter((t["subject"], t["seed"]) for t in group["trials"])
        if found != design:
            problems.append(f"{where}/trials hold (subject, seed) cells "
                            f"{sorted((found - design).elements())} beyond and lack "
                            f"{sorted((design - found).elements())} of the design's "
                            f"{len(design)}, each once")
    return problems


def _catalogue(faults: dict[str, Any]) -> list[str]:
    """The executed design against the code that ran it (``kit.sciml.mgn_faults``): every
    mutant of the catalogue and the adversarial set, each with its fault class and severity;
    the sweeps' levels (the evaluated frames: ``eval_frames``, against ``mgn.json``)."""
    from kit.sciml import mgn_faults as mf

    code = {m.name: {"name": m.name, "fault_class": m.fault_class, "severity": m.severity}
            for m in mf.CATALOGUE + mf.ADVERSARIAL}
    problems = [f"mutants/{name} is not a mutant of the catalogue the code runs"
                for name in sorted(set(faults["mutants"]) - set(code))]
    problems += [f"mutants lack {name}, which the code runs"
                 for name in sorted(set(code) - set(faults["mutants"]))]
    for name in sorted(set(code) & set(faults["mutants"])):
        held = {k: faults["mutants"][name].get(k) for k in code[name]}
        if held != code[name]:
            problems.append(f"mutants/{name} is {held}, but the code runs {code[name]}")
    for sweep, levels in (("scale_sweep", mf.SCALES), ("fraction_sweep", mf.FRACTIONS)):
        if list(faults[sweep]) != [f"{level:g}" for level in levels]:
            problems.append(f"{sweep} levels {list(faults[sweep])} are not the code's "
                            f"{[f'{level:g}' for level in levels]}")
    return problems


def eval_frames(faults: dict[str, Any], mgn: dict[str, Any]) -> list[str]:
    """The evaluated frames must be the first ``EVAL_FRAMES`` of the held-out frames
    ``mgn.json`` names (``mgn_faults.run_catalogue`` reads ``heldout[:EVAL_FRAMES]``; a
    tiny configuration holds fewer)."""
    from kit.sciml.mgn_faults import EVAL_FRAMES

    want = mgn["heldout_frames"][:EVAL_FRAMES]
    return [] if faults["eval_frames"] == want else [
        f"eval_frames {faults['eval_frames']} are not the first held-out frames of "
        f"mgn.json, {want}"]


def _mirror_changes(faults: dict[str, Any], groups: dict[str, Any]) -> list[str]:
    """Each mutant's and sweep level's trial's mirror change against its mirror and the
    control trial's on the same (subject, seed) cell: (mirror - control) / control, within
    1e-12 relative (no absolute floor: a sixth of them are rounding residues near 1e-16)."""
    baseline = {(t["subject"], t["seed"]): t["mirror"] for t in faults["control"]["trials"]}
    problems = []
    for where, group in groups.items():
        if where == "control":
            continue  # its own baseline: ``recount`` holds its mirror changes to 0
        for i, trial in enumerate(group["trials"]):
            base = baseline.get((trial["subject"], trial["seed"]))
            if base is None:
                continue  # no control trial on its cell: ``_design`` names it
            if base == 0:
                problems.append(f"{where}/trials/{i}/mirror_change has a zero control mirror "
                                "on its cell to move from")
                continue
            found, want = trial["mirror_change"], (trial["mirror"] - base) / base
            if isinstance(found, bool) or not isinstance(found, (int, float)) or \
                    not math.isclose(found, want, rel_tol=1e-12):  # relative only: most are ~1e-16
                problems.append(f"{where}/trials/{i}/mirror_change is {found!r}, but its mirror "
                                f"and the control trial's on its cell give {want!r}")
    return problems


def recount(faults: dict[str, Any]) -> list[str]:
    """Every field of the fault record that disagrees with the per-trial records it
    summarises: the thresholds against the MR cards, the catalogue and the sweeps' levels
    against the code, the design (seeds, subjects, each cell once) and each
    trial's mirror change against the trials, each trial's ``detected`` flags against its
    measures and those thresholds (a control trial's mirror change is 0 by construction: it
    is its own baseline), every summary (control, mutants, their configurations, both
    sweeps' levels) and the precision/recall against a recount."""
    from kit.sciml import mgn_faults as mf

    problems = []
    expected = {"permutation": mf.PERMUTATION_THRESHOLD,
                "conservation": mf.CONSERVATION_THRESHOLD, "mirror": mf.MIRROR_THRESHOLD}
    if faults["thresholds"] != expected:
        problems.append(f"thresholds {faults['thresholds']} are not the MR cards' {expected}")
    groups = _groups(faults)
    problems += _catalogue(faults) + _design(faults, groups) + _mirror_changes(faults, groups)

    def flags(trial: dict[str, Any]) -> dict[str, bool]:
        return {"permutation": trial["permutation"] > expected["permutation"],
                "conservation": trial["conservation"] > expected["conservation"],
                "mirror": trial["mirror_change"] > expected["mirror"]}

    for where, group in groups.items():
        for i, trial in enumerate(group["trials"]):
            if trial["detected"] != flags(trial):
                problems.append(f"{where}/trials/{i}/detected {trial['detected']} is not what "
                                f"its measures give against the thresholds, {flags(trial)}")
        summary = {k: v for k, v in group.items() if k in mf.DETECTORS or k == "any"} \
            if "summary" not in group else group["summary"]
        if summary != mf.summarise(group["trials"]):
            problems.append(f"{where}/summary disagrees with its trials, which give "
                            f"{mf.summarise(group['trials'])}")
        for name, part in group.get("by_configuration", {}).items():
            rows = [t for t in group["trials"] if (t["subject"] < 4) == (name == "seeds")]
            if part != mf.summarise(rows):
                problems.append(f"{where}/by_configuration/{name} disagrees with its trials")
    control = faults["control"]["trials"]
    problems += [f"control/trials/{i}/mirror_change {t['mirror_change']} is not 0 (a control "
                 "is its own baseline)" for i, t in enumerate(control) if t["mirror_change"]]
    recounted = mf.precision_recall(faults["mutants"], control)
    if faults["precision_recall"] != recounted:
        problems.append(f"precision_recall disagrees with the trials, which give {recounted}")
    return problems


def _canonical(ev: Any) -> dict[str, Any]:
    return {k: m for k, m in _faults(ev)["mutants"].items() if m["fault_class"] != "adversarial"}


def _trials(mutant: dict[str, Any], subjects: list[int] | None, seeds: list[int] | None
            ) -> list[dict[str, Any]]:
    return [t for t in mutant["trials"] if (subjects is None or t["subject"] in subjects)
            and (seeds is None or t["seed"] in seeds)]


def _hit(trial: dict[str, Any], detector: str) -> bool:
    return any(trial["detected"].values()) if detector == "any" else trial["detected"][detector]


def fault_catalogue(ev: Any, kind: str) -> Value:
    """Counts of the executed catalogue: ``canonical``, ``adversarial``, ``classes``
    (of the canonical mutants), ``trials`` (per mutant, all equal), ``seeds``."""
    faults, canonical = _faults(ev), _canonical(ev)
    if kind == "canonical":
        return len(canonical)
    if kind == "adversarial":
        return len(faults["mutants"]) - len(canonical)
    if kind == "classes":
        return len({m["fault_class"] for m in canonical.values()})
    if kind == "trials":
        counts = {len(m["trials"]) for m in faults["mutants"].values()}
        if len(counts) != 1:
            raise KitError(f"{ev.root}/mgn_faults.json: unequal trials per mutant {counts}")
        return counts.pop()
    if kind == "seeds":
        return int(faults["permutation_seeds"])
    raise KitError(f"unknown catalogue count {kind!r}")


def fault_detected(ev: Any, mutant: str, detector: str = "any",
                   subjects: list[int] | None = None, seeds: list[int] | None = None) -> Value:
    """Trials of one mutant on which a detector fired."""
    return sum(_hit(t, detector) for t in _trials(_faults(ev)["mutants"][mutant], subjects,
                                                  seeds))


def fault_metric(ev: Any, mutant: str, metric: str, stat: str = "max",
                 subjects: list[int] | None = None, seeds: list[int] | None = None) -> Value:
    """A trial metric (``conservation``, ``mirror_change``, ``permutation``) of a mutant."""
    values = np.array([t[metric] for t in _trials(_faults(ev)["mutants"][mutant], subjects,
                                                  seeds)])
    return _stat(values, stat)


def fault_mutants(ev: Any, mode: str, detector: str = "any",
                  subjects: list[int] | None = None, seeds: list[int] | None = None,
                  adversarial: bool = False) -> Value:
    """How many mutants a detector catches on ``every`` trial, on ``none``, on ``some``
    (but not all), or on ``any`` trial, over the chosen subjects and seeds."""
    pool = _faults(ev)["mutants"] if adversarial else _canonical(ev)
    count = 0
    for m in pool.values():
        hits = [_hit(t, detector) for t in _trials(m, subjects, seeds)]
        count += {"every": all(hits), "none": not any(hits), "any": any(hits),
                  "some": any(hits) and not all(hits)}[mode]
    return count


def fault_mode_wilson(ev: Any, mode: str, detector: str = "any") -> Value:
    """The Wilson 95% interval of a mutant caught on every (or no) trial: the detection
    rate of the first such mutant over its trials; NaNs when no mutant is caught that way
    (the claim then differs)."""
    for m in _canonical(ev).values():
        hits = [_hit(t, detector) for t in m["trials"]]
        if (mode == "every" and all(hits)) or (mode == "none" and not any(hits)):
            return list(wilson(sum(hits), len(hits)))
    return [float("nan"), float("nan")]


def fault_classes_caught(ev: Any, detector: str, allowed: list[str], subject: int = 0,
                         seed: int = 0) -> Value:
    """Every mutant the detector catches on one (subject, seed) cell is of an allowed
    class, and it catches at least one (the by-class localisation)."""
    caught = [m["fault_class"] for m in _canonical(ev).values()
              if any(_hit(t, detector) for t in _trials(m, [subject], [seed]))]
    return bool(caught) and all(c in allowed for c in caught)


def _selected(ev: Any, mutants: list[str] | None, classes: list[str] | None
              ) -> dict[str, Any]:
    """Canonical mutants named in ``mutants`` or of a class in ``classes`` (all if neither);
    a named mutant the catalogue lacks is an error."""
    canonical = _canonical(ev)
    missing = sorted(set(mutants or ()) - set(canonical))
    if missing:
        raise KitError(f"{ev.root}/mgn_faults.json: no canonical mutants {missing}")
    found = {k: m for k, m in canonical.items()
             if (mutants is None or k in mutants)
             and (classes is None or m["fault_class"] in classes)}
    if not found:
        raise KitError(f"{ev.root}/mgn_faults.json: no canonical mutants {mutants} {classes}")
    return found


def fault_cell_caught(ev: Any, detector: str, mutants: list[str] | None = None,
                      classes: list[str] | None = None, subject: int = 0, seed: int = 0
                      ) -> Value:
    """How many of the chosen canonical mutants (by name or class, whether or not they are
    detected) the detector catches on one (subject, seed) cell."""
    return int(sum(any(_hit(t, detector) for t in _trials(m, [subject], [seed]))
                   for m in _selected(ev, mutants, classes).values()))


def fault_cell_metric(ev: Any, mutants: list[str], metric: str, stat: str = "min",
                      subject: int = 0, seed: int = 0) -> Value:
    """A trial metric over the named canonical mutants on one cell, detected or not, so the
    value can fall below the detector's threshold (a minimum over the mutants a detector
    caught would lie above its threshold by selection)."""
    values = [t[metric] for m in _selected(ev, mutants, None).values()
              for t in _trials(m, [subject], [seed])]
    if not values:
        raise KitError(f"{ev.root}/mgn_faults.json: no trials of {mutants} on "
                       f"subject {subject}, seed {seed}")
    return _stat(np.array(values), stat)


def fault_mode_count(ev: Any, mode: str, field: str, detector: str = "any") -> Value:
    """k (trials that caught it) or n (its trials) of the first canonical mutant caught on
    every (or no) trial, the mutant ``fault_mode_wilson`` takes; -1 when there is none."""
    for m in _canonical(ev).values():
        hits = [_hit(t, detector) for t in m["trials"]]
        if (mode == "every" and all(hits)) or (mode == "none" and not any(hits)):
            return sum(hits) if field == "k" else len(hits)
    return -1


def fault_union_by_subject(ev: Any, subjects: list[int], stat: str) -> Value:
    """Per subject, the canonical mutants caught by any detector on any of its trials;
    ``same`` (true when equal across the subjects), ``min`` or ``max``."""
    counts = [fault_mutants(ev, "any", "any", [s]) for s in subjects]
    if stat == "same":
        return len(set(counts)) == 1
    return min(counts) if stat == "min" else max(counts)


def _levels(ev: Any, sweep: str, levels: str) -> dict[str, Any]:
    """A sweep's levels: "all", "below1" (fractions under 1) or one level."""
    table = _faults(ev)[sweep]
    chosen = {k: v for k, v in table.items() if levels == "all" or k == levels
              or (levels == "below1" and float(k) < 1)}
    if not chosen:
        raise KitError(f"{ev.root}/mgn_faults.json: no levels {levels!r} in {sweep}")
    return chosen


def _level_rows(ev: Any, sweep: str, level: str, row: dict[str, Any]) -> list[dict[str, Any]]:
    rows = row.get("trials")
    if not rows:
        raise KitError(f"{ev.root}/mgn_faults.json: {sweep} level {level} has no trial rows")
    return rows  # type: ignore[no-any-return]


def fault_sweep(ev: Any, sweep: str, levels: str, detector: str = "any",
                stat: str = "max") -> Value:
    """Detection share over the roster at the sweep's levels, as the run recorded it;
    ``stat`` min or max over the levels."""
    shares = [row[detector]["detected"] / row[detector]["n"]
              for row in _levels(ev, sweep, levels).values()]
    return float(min(shares) if stat == "min" else max(shares))


def fault_sweep_trials(ev: Any, sweep: str, levels: str, detector: str = "any",
                       stat: str = "max") -> Value:
    """``fault_sweep`` recomputed from the levels' per-trial rows."""
    shares = []
    for k, row in _levels(ev, sweep, levels).items():
        rows = _level_rows(ev, sweep, k, row)
        shares.append(sum(_hit(t, detector) for t in rows) / len(rows))
    return float(min(shares) if stat == "min" else max(shares))


def fault_sweep_count(ev: Any, sweep: str, levels: str, field: str, detector: str = "any",
                      stat: str = "max") -> Value:
    """Per-trial rows of a sweep's levels: the min or max over the levels of the trials
    that caught the fault (``field`` k), or the trials per level (``n``, equal at every
    level)."""
    counts = []
    for k, row in _levels(ev, sweep, levels).items():
        rows = _level_rows(ev, sweep, k, row)
        counts.append(sum(_hit(t, detector) for t in rows) if field == "k" else len(rows))
    if field == "n":
        if len(set(counts)) != 1:
            raise KitError(f"{ev.root}/mgn_faults.json: {sweep} levels have unequal trials")
        return counts[0]
    return min(counts) if stat == "min" else max(counts)


def fault_sweep_trials_wilson(ev: Any, sweep: str, level: str, detector: str = "any"
                              ) -> Value:
    rows = _level_rows(ev, sweep, level, _levels(ev, sweep, level)[level])
    return list(wilson(sum(_hit(t, detector) for t in rows), len(rows)))


def fault_sweep_wilson(ev: Any, sweep: str, level: str, detector: str = "any") -> Value:
    return list(_faults(ev)[sweep][level][detector]["wilson95"])


def fault_sweep_levels(ev: Any, sweep: str) -> Value:
    return [float(k) for k in _faults(ev)[sweep]]


def fault_eval_frames(ev: Any) -> Value:
    return len(_faults(ev)["eval_frames"])


def fault_some_recorded(ev: Any) -> Value:
    """``fault_mutants(mode="some")`` read from the per-mutant summaries the run recorded."""
    return int(sum(0 < m["summary"]["any"]["detected"] < m["summary"]["any"]["n"]
               for m in _canonical(ev).values()))


def fault_pr(ev: Any, detector: str, field: str) -> Value:
    value = _faults(ev)["precision_recall"][detector][field]
    if value is None:
        raise Undefined(f"{ev.root}/mgn_faults.json: {detector} {field} undefined "
                        "(no detection)")
    return float(value) if isinstance(value, float) else int(value)


FUNCTIONS: tuple[Callable[..., Value], ...] = (
    fault_catalogue, fault_detected, fault_metric, fault_mutants, fault_mode_wilson,
    fault_classes_caught, fault_union_by_subject, fault_sweep, fault_sweep_wilson,
    fault_sweep_levels, fault_eval_frames, fault_some_recorded, fault_sweep_trials,
    fault_sweep_trials_wilson, fault_pr, fault_cell_caught, fault_cell_metric,
    fault_mode_count, fault_sweep_count)
