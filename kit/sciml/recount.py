"""Recount, never read: every summary a SciML evidence record carries beside the per-case
values it summarises, recomputed from them when verify reads the file (``RECOUNTS`` in
``kit.sciml.recompute``). A field that disagrees with its recount is a failed check naming
the file and the field, so a summary edited alone (and re-hashed) cannot move a claim.

- ``ledger.json``: every verdict is the verdict its own violation, tolerance, floor and
  domain score give (``kit.sciml.verdicts.judge``), its ratio is violation / tolerance,
  the per-card counts are the count of those verdicts, and every gate decision is the one
  its recorded condition states give (``kit.sciml.gate.decision_of``), with the rubric
  matching those states;
- ``pinn.json``: every subject's ratio is its boundary violation over the boundary floor,
  and its three verdicts are re-judged from its violations against the recorded
  tolerances and reference floors (the exact relation's tolerance from its MR card); each
  PDE's summary (pass counts, Wilson intervals, mean ratios and their bootstrap
  intervals, MR-A's largest violation) and the MR-B comparison of the two PDEs are
  recomputed from the subjects;
- ``fno.json``: every roster subject is admitted exactly when the translation tolerance
  dominates its floor by the card's margin, and each admitted count is the count of them,
  with its Wilson interval; a roster subject that is also a checkpoint (``fno-<pde>-seed<i>``:
  the same model on the same held-out cases and shifts) has that checkpoint's mean
  translation violation and largest floor, and every subject's seed is its place in the
  roster; the largest translation violation and the count of rejected Dirichlet decisions
  are the checkpoints';
- ``mgn.json``: the mirror domain score is m / (m + 1) of the recorded mismatch m, and the
  continuity tolerance is its card's fraction of the recorded gradient scale;
- ``operator_floor.json``: the log-log fit (slope, its interval, R^2), the bound check, the
  finest mesh's predictor error and the gate's decision at every resolution are
  recomputed from the resolutions;
- ``fv_balance.json``: the imbalance and the floor from the sums and the flux scale;
- ``second_task.json``: the density variation and the mass tolerance from the measured
  densities and gradient scale.

``mgn_faults.json`` has its own recount (``kit.sciml.recompute_faults.recount``).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from kit.errors import KitError
from kit.sciml.cards import fixed_tolerance, load_cards
from kit.sciml.gate import decision_of
from kit.sciml.verdicts import domain_score, judge
from kit.stats import wilson

RUBRIC = {"physical basis": "basis", "transformation preconditions": "preconditions",
          "metric and tolerance": "numerically_decidable"}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and \
            len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) or isinstance(b, dict):
        return isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys() and \
            all(_same(a[k], b[k]) for k in a)
    if a is None or b is None or isinstance(a, bool) or isinstance(b, bool):
        return bool(a == b)
    if isinstance(a, float) or isinstance(b, float):
        return bool(a == b or (math.isfinite(a) and math.isfinite(b)
                               and abs(a - b) <= 1e-12 * max(abs(a), abs(b))))
    return bool(a == b)


def ledger(record: dict[str, Any]) -> list[str]:
    """The verdicts, their counts and the gate decisions against their own inputs."""
    problems = []
    counts: dict[str, Counter[str]] = {}
    for i, row in enumerate(record["verdicts"]):
        found = judge(row["card"], row["case"], row["violation"], row["tolerance"], row["floor"],
                      row["domain"])
        if found.verdict != row["verdict"]:
            problems.append(f"verdicts/{i}/verdict is {row['verdict']!r}, but its violation, "
                            f"tolerance, floor and domain give {found.verdict!r}")
        if not _same(row["ratio"], found.ratio):
            problems.append(f"verdicts/{i}/ratio is {row['ratio']!r}, not violation / tolerance "
                            f"({found.ratio!r})")
        counts.setdefault(row["card"], Counter())[row["verdict"]] += 1
    recounted = {card: dict(sorted(c.items())) for card, c in sorted(counts.items())}
    stored = {card: dict(sorted(c.items())) for card, c in sorted(record["counts"].items())}
    if stored != recounted:
        first = next(card for card in sorted(set(stored) | set(recounted))
                     if stored.get(card) != recounted.get(card))
        problems.append(f"counts/{first} is {stored.get(first)}, but its verdicts count "
                        f"{recounted.get(first)}")
    for i, row in enumerate(record["decisions"]):
        states = {k: v["state"] for k, v in row["conditions"].items()}
        decision = decision_of(states["basis"], states["preconditions"],
                               states["boundary_and_mapping"], states["numerically_decidable"])
        if decision != row["decision"]:
            problems.append(f"decisions/{i}/decision ({row['card']}) is {row['decision']!r}, "
                            f"but its conditions give {decision!r}")
        for criterion, condition in RUBRIC.items():
            if row["rubric"].get(criterion) != states[condition]:
                problems.append(f"decisions/{i}/rubric/{criterion} ({row['card']}) is "
                                f"{row['rubric'].get(criterion)!r}, but its condition "
                                f"{condition} is {states[condition]!r}")
    return problems


def _from_cards(read: Any) -> Any:
    """A value the MR cards hold, or None when the cards do not load: verify already fails
    naming the card (its schema check), and the rest of the recount still runs."""
    try:
        return read()
    except KitError:
        return None


def pinn(record: dict[str, Any]) -> list[str]:
    """Every subject's ratio and verdicts against its own violations."""
    problems = []
    exact = _from_cards(lambda: fixed_tolerance("pinn-collocation-permutation"))
    boundary, conservation = record["boundary_floor"], record["conservation_tolerance"]
    for i, s in enumerate(record["subjects"]):
        if not _same(s["mr_b_ratio"], s["mr_b_violation"] / boundary):
            problems.append(f"subjects/{i}/mr_b_ratio is {s['mr_b_ratio']!r}, not its boundary "
                            f"violation over the boundary floor "
                            f"({s['mr_b_violation'] / boundary!r})")
        verdicts = {
            **({} if exact is None else
               {"mr_a": judge("a", "", s["mr_a_violation"], exact).verdict}),
            "mr_b": judge("b", "", s["mr_b_violation"], boundary).verdict,
            "mr_c": judge("c", "", abs(s["mr_c_ratio"] - 1.0), conservation,
                          floor=record["reference_floor"][s["pde"]]).verdict}
        for relation, verdict in verdicts.items():
            if s["verdicts"][relation] != verdict:
                problems.append(f"subjects/{i}/verdicts/{relation} is "
                                f"{s['verdicts'][relation]!r}, but its measures give "
                                f"{verdict!r}")
    return problems + pinn_summaries(record)


def fields(recorded: dict[str, Any], recounted: dict[str, Any], where: str,
           source: str = "its per-case values") -> list[str]:
    """Every field of ``recounted`` that ``recorded`` (a record's summary at ``where``)
    lacks or holds otherwise, leaf by leaf; ``source`` names what the recount read."""
    problems = []
    for key, want in recounted.items():
        path = f"{where}/{key}" if where else key
        if isinstance(want, dict) and isinstance(recorded.get(key), dict):
            problems += fields(recorded[key], want, path, source)
        elif key not in recorded:
            problems.append(f"{path} is missing; {source} give {want!r}")
        elif not _same(recorded[key], want):
            problems.append(f"{path} is {recorded[key]!r}, but {source} give {want!r}")
    return problems


def pinn_summaries(record: dict[str, Any]) -> list[str]:
    """Each PDE's summary and the MR-B comparison against the subjects."""
    from kit.sciml.pinn import PDES
    from kit.sciml.pinn_study import comparison, summaries

    rows = {pde: [s for s in record["subjects"] if s["pde"] == pde] for pde in PDES}
    problems = []
    for p_index, pde in enumerate(PDES):
        if rows[pde]:
            problems += fields(record["summary"].get(pde, {}), summaries(rows[pde], p_index),
                               f"summary/{pde}")
    if rows.get("heat") and rows.get("burgers"):
        problems += fields(record["mr_b_comparison"],
                           comparison([r["mr_b_ratio"] for r in rows["heat"]],
                                      [r["mr_b_ratio"] for r in rows["burgers"]]),
                           "mr_b_comparison")
    return problems


def fno(record: dict[str, Any]) -> list[str]:
    """The roster's admissions against the translation tolerance and each floor."""
    problems: list[str] = []
    card = _from_cards(lambda: load_cards()["fno-periodic-translation"])
    if card is None:
        return problems
    margin = float(card["tolerance"].get("floor_margin", 1.0))
    tolerance = record["translation_tolerance"]
    roster = record["roster"]
    for pde in sorted(k for k in roster if not k.endswith("_admitted")):
        admitted = 0
        for i, subject in enumerate(roster[pde]):
            decision = "retained-executable" if tolerance > margin * subject["floor"] \
                else "deferred"
            admitted += decision == "retained-executable"
            if subject["decision"] != decision:
                problems.append(f"roster/{pde}/{i}/decision is {subject['decision']!r}, but "
                                f"its floor gives {decision!r}")
        summary = roster[f"{pde}_admitted"]
        if (summary["count"], summary["n"]) != (admitted, len(roster[pde])):
            problems.append(f"roster/{pde}_admitted is {summary['count']}/{summary['n']}, but "
                            f"its subjects count {admitted}/{len(roster[pde])}")
        problems += fields(summary, {"wilson95": list(wilson(admitted, len(roster[pde])))},
                           f"roster/{pde}_admitted")
    checkpoints = record["checkpoints"]
    problems += fields(record, {
        "max_translation_violation": max(max(c["translation_violation"]) for c in checkpoints),
        "dirichlet_rejected": sum(c["decisions"]["dirichlet_translation"] == "rejected"
                                  for c in checkpoints)}, "")
    return problems + fno_roster_cases(record)


def fno_roster_cases(record: dict[str, Any]) -> list[str]:
    """Each roster subject's seed against its place (the roster trains seeds 0, 1, ... in
    order), and each roster subject that is also a checkpoint against that checkpoint's
    per-case values: the study measures both on the same model, held-out cases and shifts
    (``kit.sciml.fno_study``), so its mean violation is the mean of the checkpoint's
    translation violations and its floor their largest floor. The other roster subjects'
    measures have no per-case values in the file."""
    import numpy as np

    roster = record["roster"]
    problems = [f"roster/{pde}/{i}/seed is {subject['seed']!r}, but its place in the roster "
                f"gives {i}"
                for pde in sorted(k for k in roster if not k.endswith("_admitted"))
                for i, subject in enumerate(roster[pde]) if subject["seed"] != i]
    for j, checkpoint in enumerate(record["checkpoints"]):
        pde, _, seed = str(checkpoint["name"]).removeprefix("fno-").rpartition("-seed")
        subjects = roster.get(pde)  # a list; an admitted count's summary is not
        if not (seed.isdecimal() and isinstance(subjects, list) and int(seed) < len(subjects)):
            problems.append(f"checkpoints/{j}/name is {checkpoint['name']!r}, which names no "
                            "roster subject (fno-<pde>-seed<i>)")
            continue
        problems += fields(subjects[int(seed)], {
            "mean_violation": float(np.mean(checkpoint["translation_violation"])),
            "floor": float(max(checkpoint["translation_floor"]))},
            f"roster/{pde}/{int(seed)}", f"the cases of checkpoint {checkpoint['name']}")
    return problems


def mgn(record: dict[str, Any]) -> list[str]:
    """The mirror domain score against the recorded mismatch; the symmetric channel's
    reflection (what the exact mirror relation's admission rests on) measured again on the
    mesh the code builds; the continuity tolerance against its card's fraction of the
    gradient scale."""
    from kit.sciml.cards import tolerance_fraction
    from kit.sciml.meshes import channel_symmetry, mirror_map, symmetric_channel

    problems = fields(record, {"mirror_domain_score": domain_score(record["mirror_mismatch"])},
                      "")
    if "symmetric_channel" in record:
        channel = symmetric_channel()
        problems += fields(record["symmetric_channel"],
                           channel_symmetry(channel, mirror_map(channel)), "symmetric_channel",
                           "the channel mesh the code builds")
    fraction = _from_cards(lambda: tolerance_fraction("mgn-continuity-absolute"))
    continuity = record.get("continuity")
    if fraction is not None and continuity is not None:
        problems += fields(continuity, {"absolute_tolerance":
                                        fraction * continuity["gradient_rms"]}, "continuity")
    return problems


def operator_floor(record: dict[str, Any]) -> list[str]:
    """The fit, the bound check, the finest predictor error and the gate's decision at each
    resolution, from the resolutions."""
    from kit.sciml.gate import GateFindings, decide
    from kit.sciml.operator_floor import loglog_fit

    rows = record["resolutions"]
    problems = fields(record, {
        **loglog_fit([r["h"] for r in rows], [r["measured"] for r in rows]),
        "bound_dominates": all(r["bound"] >= r["measured"] for r in rows),
        "finest_predictor_relative_error":
            abs(rows[-1]["predicted"] - rows[-1]["measured"]) / rows[-1]["measured"]}, "")
    card = _from_cards(lambda: load_cards()["p1-divergence-absolute"])
    if card is None:
        return problems
    gates = record["gate_per_resolution"]
    if len(gates) != len(rows):
        return [*problems, f"gate_per_resolution has {len(gates)} rows for {len(rows)} "
                           "resolutions"]
    for i, (gate, row) in enumerate(zip(gates, rows, strict=True)):
        decision = decide(card, GateFindings(
            preconditions={p: "holds" for p in card["preconditions"]},
            boundary_compatibility="holds", output_mapping="holds", floor=row["measured"],
            tolerance=record["absolute_tolerance"])).decision
        problems += fields(gate, {"refinements": row["refinements"], "h": row["h"],
                                  "decision": decision}, f"gate_per_resolution/{i}")
    return problems


def fv_balance(record: dict[str, Any]) -> list[str]:
    """The imbalance and the floor from the sums and the flux scale."""
    import numpy as np

    return fields(record, {
        "imbalance": abs(record["sum_divergence"] - record["boundary_flux"]),
        "floor": float(np.finfo(np.float64).eps * record["flux_scale"])}, "")


def second_task(record: dict[str, Any]) -> list[str]:
    """The density variation and the mass tolerance from the measured values."""
    from kit.sciml.cards import tolerance_fraction

    measured = record["measured"]
    want = {"density_variation": measured["density_max"] - measured["density_min"]}
    fraction = _from_cards(lambda: tolerance_fraction("cmp-mass-conservation"))
    if fraction is not None:
        want["mass_tolerance"] = fraction * measured["mass_gradient_rms"]
    return fields(measured, want, "measured")
