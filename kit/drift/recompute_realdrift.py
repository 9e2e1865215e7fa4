"""Recompute functions of the real-drift ledger (``claims/realdrift.yaml``): each reads the
sweep's per-case evidence (``sweep/cells.json``: one row per cell, model and export) of a
run folder or of the shipped copy under ``claims/realdrift/evidence/digits``, and decides
one hypothesis of ``kit/protocols/realdrift.yaml`` by its frozen rule, or describes the
drift map. H8 reads Polygraphy's per-fault counts on the drift study's fault matrix
(``sweep/polygraphy/fault-matrix.json``, written by ``kit sweep --drift-run``).

Imports nothing of the runtime layer: verify runs these offline.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from itertools import pairwise
from pathlib import Path
from typing import Any

from kit.drift import analysis
from kit.drift.detectors import DETECTORS
from kit.drift.shipped import Evidence
from kit.errors import KitError, RecountError
from kit.values import Value, contradictions

FAULT_MATRIX = "sweep/polygraphy/fault-matrix.json"
REFERENCE = "1.20.1"
BN_CHANGE = "1.29.0"


def drift_beside(root: Path) -> Path:
    """The drift evidence shipped beside a sweep evidence folder (``claims/realdrift/
    evidence/<substrate>`` -> ``claims/drift/evidence/<substrate>``)."""
    return root.parents[2] / "drift" / "evidence" / root.name


def release_key(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


class SweepEvidence(Evidence):
    """Checked access to one sweep evidence folder (``json`` as a drift folder's)."""

    @cached_property
    def cells(self) -> dict[str, Any]:
        """The sweep's rows, read only when every summary agrees with what it summarises
        (``recount``) and the rows the drift evidence shipped beside can give agree with it
        (``recount_pair``); a KitError naming the file and the first field otherwise."""
        found = self.json("sweep/cells.json")
        if not isinstance(found, dict) or not isinstance(found.get("rows"), list):
            raise KitError(f"{self.root / 'sweep/cells.json'}: no 'rows' list")
        problems = recount(found["rows"])
        drift = drift_beside(self.root)
        if not problems and (drift / "score" / "score.json").is_file():
            try:
                problems = recount_pair(found, Evidence(drift))
            except (KeyError, TypeError, ValueError, IndexError) as exc:
                problems = [f"its drift-cell rows cannot be recounted against {drift} "
                            f"({type(exc).__name__}: {exc})"]
        if problems:
            raise RecountError(f"{self.root / 'sweep/cells.json'}: {problems[0]}"
                           + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
        return found

    @cached_property
    def fault_matrix(self) -> dict[str, Any]:
        """Polygraphy's fault-matrix record, read only when its summaries agree with its
        per-fault rows and its inputs with the drift evidence it was computed from
        (``recount_fault_matrix``; a RecountError naming the file and field otherwise)."""
        path = self.root / FAULT_MATRIX
        found = self.json(FAULT_MATRIX)
        drift = drift_beside(self.root)
        if not (drift / "score" / "score.json").is_file():
            raise KitError(f"{path}: the drift evidence it was computed from ({drift}) is "
                           "missing; ship the drift run beside the sweep")
        problems = recount_fault_matrix(found, Evidence(drift))
        if problems:
            raise RecountError(f"{path}: {problems[0]}"
                               + (f" (and {len(problems) - 1} more)" if len(problems) > 1
                                  else ""))
        return dict(found)

    def rows(self, **match: Any) -> list[dict[str, Any]]:
        """The rows whose fields equal every ``match`` value."""
        return [row for row in self.cells["rows"]
                if all(row[key] == value for key, value in match.items())]


def recount(rows: list[dict[str, Any]]) -> list[str]:
    """Every row field that disagrees with what it summarises: each alarm rate against its
    alarms over n; the logit-difference quantiles (non-decreasing, all zero exactly when
    the largest difference is) and the flips (none where nothing moved) against the
    largest difference. The raw outputs they come from are not shipped, so these are the
    checks the row admits."""
    problems = []
    for i, row in enumerate(rows):
        counted = {**{f"alarms/{d}": a for d, a in row["alarms"].items()},
                   "polygraphy": row["polygraphy"]}
        for name, entry in counted.items():
            if entry["rate"] != entry["alarms"] / entry["n"]:
                problems.append(f"rows/{i}/{name}/rate is {entry['rate']!r}, not "
                                f"{entry['alarms']} / {entry['n']}")
        quantiles = [row["norm_quantiles"][q] for q in sorted(row["norm_quantiles"], key=float)]
        if any(b < a for a, b in pairwise(quantiles)):
            problems.append(f"rows/{i}/norm_quantiles decrease: {quantiles}")
        if (row["max_abs_logit"] == 0.0) != all(q == 0.0 for q in quantiles):
            problems.append(f"rows/{i}/norm_quantiles {quantiles} disagree with max_abs_logit "
                            f"{row['max_abs_logit']!r}")
        if row["max_abs_logit"] == 0.0 and any(row["flips"].values()):
            problems.append(f"rows/{i}/flips {row['flips']} where no logit moved")
    return problems


# The drift study's four clean cells, as the sweep names them (kit.drift.stages.infer).
DRIFT_CELLS = {("ref", "disable_all"): "ref", ("cand", "enable_all"): "cand",
               ("ref", "enable_all"): "ref-on", ("cand", "disable_all"): "cand-off"}


def recount_pair(record: dict[str, Any], drift: Evidence, deep: bool = False) -> list[str]:
    """The sweep's rows of the drift study's four clean cells (the reference and candidate
    releases at both levels, one thread, the folded export every model ships) and the
    pair's folded thresholds, against the same measures taken on the drift evidence's
    clean logits of those cells, on the same models and held-out images (H1, H3 and H4
    read these rows): logit measures, Polygraphy's alarms, each detector's alarms and
    interval under thresholds calibrated again on the calibration images; with ``deep``,
    Polygraphy's alarms run again too (about 15 s on 2 cores, so ``verify --deep``)."""
    from kit.drift.drift_measures import Logits, alarm_rates, calibrate, logit_measures, scores
    from kit.drift.polygraphy_check import polygraphy_fails
    from kit.files import read_yaml
    from kit.paths import ROOT
    from kit.runtime.runtimes import load_runtimes

    protocol = read_yaml(ROOT / "kit" / "protocols" / "realdrift.yaml")
    runtimes, dp = load_runtimes(), drift.protocol
    roles = [row["role"] for row in drift.json("split/split.json")["rows"]]
    held = [i for i, role in enumerate(roles) if role == "heldout"]
    cal = [i for i, role in enumerate(roles) if role == "calibration"]
    source, rotated = record["conditions"]
    tolerance, boot = dp["detectors"]["mixed_tolerance"], dp["bootstrap"]
    problems = []
    for model in sorted({r["model"] for r in record["rows"] if r["export"] == "folded"}):
        def logits(cell: str, rows: list[int], model: str = model) -> Logits:
            return Logits({c: drift.clean[f"{cell}/{model}/{c}"][rows]
                           for c in (source, rotated)}, {})
        pair = calibrate(scores(logits("cand", cal), logits("ref", cal), source, rotated,
                                tolerance), dp["calibration"]["quantile"],
                         boot["nested_replicates"], protocol["seeds"]["alarm_bootstrap"],
                         len(held))
        problems += contradictions(record["thresholds"][f"{model}.folded"], pair.thresholds,
                                   f"thresholds/{model}.folded", "the drift evidence")
        reference = logits("ref", held)
        for i, row in enumerate(record["rows"]):
            name = DRIFT_CELLS.get(next(((k, row["level"]) for k, r in runtimes.items()
                                         if r.onnxruntime == row["release"]
                                         and k in ("ref", "cand")), ("", "")))
            if row["model"] != model or row["export"] != "folded" or row["threads"] != 1 \
                    or name is None:
                continue
            cell = logits(name, held)
            expected = {**logit_measures(cell.logits, reference.logits, source),
                        "alarms": alarm_rates(scores(cell, reference, source, rotated,
                                                     tolerance), pair, boot["interval"])}
            if deep:  # Polygraphy, one comparison per held-out image: about 1.3 s a row
                fails = polygraphy_fails(reference.logits[source], cell.logits[source])
                expected["polygraphy"] = {"alarms": int(fails.sum()), "n": len(fails),
                                          "rate": float(fails.mean())}
            problems += contradictions(row, expected, f"rows/{i}", "the drift evidence")
    return problems


def _cells(rows: list[dict[str, Any]]) -> list[str]:
    return sorted({f"{r['release']}/{r['level']}-t{r['threads']} {r['model']}.{r['export']}"
                   for r in rows})


def h1_folded_release_alone(ev: SweepEvidence) -> bool:
    """H1: folded BN, disable_all, 1 thread: every release's logits equal 1.20.1's."""
    rows = ev.rows(export="folded", level="disable_all", threads=1)
    if not rows:
        raise KitError(f"{ev.root}: no folded disable_all 1-thread cell in the sweep")
    return all(row["max_abs_logit"] == 0.0 for row in rows)


def h2_unfolded_step_at_1_29(ev: SweepEvidence) -> bool:
    """H2: BN kept, disable_all, 1 thread: zero from 1.20.1 to 1.28.0, nonzero from 1.29.0."""
    rows = ev.rows(export="unfolded", level="disable_all", threads=1)
    later = [r for r in rows if release_key(r["release"]) >= release_key(BN_CHANGE)]
    between = [r for r in rows if release_key(REFERENCE) <= release_key(r["release"])
               < release_key(BN_CHANGE)]
    if not later or not between:
        raise KitError(f"{ev.root}: the sweep lacks releases on one side of {BN_CHANGE}")
    return all(r["max_abs_logit"] > 0 for r in later) and \
        all(r["max_abs_logit"] == 0.0 for r in between)


def drifting_outside(ev: SweepEvidence, low: float, high: float) -> list[str]:
    """Cells that drift and whose p99 ||e_o|| lies outside [low, high]."""
    return _cells([r for r in ev.rows() if r["max_abs_logit"] > 0
                   and not low <= r["norm_quantiles"]["0.99"] <= high])


def h3_order_of_drift(ev: SweepEvidence, low: float = 1e-7, high: float = 1e-4) -> bool:
    """H3: every drifting cell's p99 ||e_o|| lies in [low, high]."""
    return not drifting_outside(ev, low, high)


def h4_no_flips(ev: SweepEvidence) -> bool:
    """H4: no cell flips a held-out prediction on any condition."""
    return all(all(n == 0 for n in r["flips"].values()) for r in ev.rows())


def h5_threads_move_bits(ev: SweepEvidence) -> bool:
    """H5: in every release, 2 threads at disable_all differ from 1 thread somewhere."""
    rows = ev.rows(level="disable_all", threads=2)
    releases = {r["release"] for r in ev.rows()}
    if not rows or {r["release"] for r in rows} != releases:
        raise KitError(f"{ev.root}: not every release has a disable_all 2-thread cell")
    return all(any(r["vs_one_thread"] > 0 for r in rows if r["release"] == release)
               for release in releases)


def h6_calibration_does_not_transfer(ev: SweepEvidence, rate: float = 0.01) -> bool:
    """H6: some cell and detector alarms with its interval's lower end above ``rate``."""
    return any(alarm["interval"][0] > rate for r in ev.rows() for alarm in r["alarms"].values())


def h7_polygraphy_silent(ev: SweepEvidence) -> bool:
    """H7: Polygraphy's default check alarms on no clean held-out image of any cell."""
    return all(r["polygraphy"]["alarms"] == 0 for r in ev.rows())


def has_fault_matrix(ev: SweepEvidence) -> bool:
    """Whether Polygraphy's fault-matrix table was shipped beside the sweep."""
    return (ev.root / FAULT_MATRIX).is_file()


def fault_matrix(ev: SweepEvidence) -> dict[str, Any]:
    return ev.fault_matrix


def recount_fault_matrix(found: Any, drift: Evidence) -> list[str]:
    """Every field of the fault-matrix record its own rows or the drift evidence contradict:
    the fault count and the pooled TPR against the per-fault rows, the FPR against the
    clean alarms per model, every row's n against the held-out images, the faults and
    models against the drift run's fault record, and every calibrated detector's counts
    against the ones the drift evidence's primary table gives."""
    if not isinstance(found, dict) or not isinstance(found.get("per_fault"), list):
        return ["no 'per_fault' list"]
    rows, clean = found["per_fault"], found.get("clean_alarms_per_model", {})
    held = len(drift.images("heldout"))
    faults = drift.json("fault/fault.json")["faults"]
    alarms = sum(r["alarms"] for r in rows)
    table = drift.table()
    expected: dict[str, Any] = {
        "faults": len(faults), "heldout_images": held,
        "tpr": {"alarms": alarms, "n": len(rows) * held, "rate": alarms / (len(rows) * held)},
        "fpr": {"alarms": sum(clean.values()), "n": len(drift.models) * held,
                "rate": sum(clean.values()) / (len(drift.models) * held)},
        "calibrated_detectors": {name: analysis.detection(table, name, analysis.thresholds(
            table, name, drift.quantile)) for name in DETECTORS}}
    problems = contradictions(found, expected, "", "its inputs")
    if sorted((r["fault"], r["model"]) for r in rows) != \
            sorted((f["id"], f["model"]) for f in faults):
        problems.append("per_fault: its faults are not the drift run's (fault/fault.json)")
    if sorted(clean) != sorted(drift.models):
        problems.append("clean_alarms_per_model: its models are not the drift run's")
    problems += [f"per_fault/{i}/n says {r['n']}, the drift run holds out {held} images"
                 for i, r in enumerate(rows) if r["n"] != held]
    return problems



def polygraphy_tpr(ev: SweepEvidence) -> float:
    """Polygraphy's pooled TPR over the fault matrix, from its per-fault counts."""
    faults = fault_matrix(ev)["per_fault"]
    return float(sum(f["alarms"] for f in faults) / sum(f["n"] for f in faults))


def direct_tpr(ev: SweepEvidence) -> float:
    """The calibrated direct detector's pooled held-out TPR in the same drift run."""
    return float(fault_matrix(ev)["calibrated_detectors"]["direct"]["tpr"]["rate"])


def h8_polygraphy_misses_faults(ev: SweepEvidence) -> bool:
    """H8: Polygraphy's pooled TPR on the 54 faults is below the direct detector's."""
    return polygraphy_tpr(ev) < direct_tpr(ev)


def cells_swept(ev: SweepEvidence) -> int:
    """How many (release, level, threads) cells the sweep ran."""
    return len({(r["release"], r["level"], r["threads"]) for r in ev.rows()})


def drifting_share(ev: SweepEvidence, export: str) -> float:
    """Share of one export's rows whose logits differ from the reference cell's."""
    rows = ev.rows(export=export)
    return float(sum(r["max_abs_logit"] > 0 for r in rows) / len(rows))


def largest_drift(ev: SweepEvidence, export: str) -> float:
    """The largest max |d logit| of one export over every cell and model."""
    return float(max(r["max_abs_logit"] for r in ev.rows(export=export)))


def largest_alarm_rate(ev: SweepEvidence, detector: str) -> float:
    """The largest clean held-out alarm rate of one calibrated detector over every cell."""
    return float(max(r["alarms"][detector]["rate"] for r in ev.rows()))


RECOMPUTE_REALDRIFT: dict[str, Callable[..., Value]] = {
    "realdrift.h1_folded_release_alone": h1_folded_release_alone,
    "realdrift.h2_unfolded_step_at_1_29": h2_unfolded_step_at_1_29,
    "realdrift.h3_order_of_drift": h3_order_of_drift,
    "realdrift.h4_no_flips": h4_no_flips,
    "realdrift.h5_threads_move_bits": h5_threads_move_bits,
    "realdrift.h6_calibration_does_not_transfer": h6_calibration_does_not_transfer,
    "realdrift.h7_polygraphy_silent": h7_polygraphy_silent,
    "realdrift.h8_polygraphy_misses_faults": h8_polygraphy_misses_faults,
    "realdrift.has_fault_matrix": has_fault_matrix,
    "realdrift.polygraphy_tpr": polygraphy_tpr,
    "realdrift.direct_tpr": direct_tpr,
    "realdrift.cells_swept": cells_swept,
    "realdrift.drifting_share": drifting_share,
    "realdrift.largest_drift": largest_drift,
    "realdrift.largest_alarm_rate": largest_alarm_rate,
}
