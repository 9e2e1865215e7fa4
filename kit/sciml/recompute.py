"""The named functions that recompute each SciML claim from the raw per-case evidence of
``nox -s sciml`` (``runs/sciml``: operator_floor.json, fno.json, pinn.json, ledger.json).

Counts are recounted from per-case metric values against their recorded tolerances (not
read from the ledger's tallies); intervals and tests are recomputed with
``kit.sciml.stats`` from the per-subject values.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from kit.errors import KitError, RecountError
from kit.files import read_json
from kit.sciml import recompute_catalogue, recompute_faults, recompute_mgn, recount
from kit.sciml.operator_floor import loglog_fit
from kit.sciml.pinn import PDES as PINN_PDES
from kit.sciml.stats import bootstrap_mean_ci, cliffs_delta, wilcoxon, wilson
from kit.values import constant, recorded

Value = float | int | bool | list[float] | str


# The records whose summaries are recounted from their per-trial records when first read:
# each check returns every field that disagrees (a summary is never read on trust).
RECOUNTS: dict[str, Callable[[Any], list[str]]] = {
    "mgn_faults.json": recompute_faults.recount, "ledger.json": recount.ledger,
    "pinn.json": recount.pinn, "fno.json": recount.fno, "mgn.json": recount.mgn,
    "operator_floor.json": recount.operator_floor, "fv_balance.json": recount.fv_balance,
    "second_task.json": recount.second_task}


class SciEvidence:
    """One SciML evidence folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._cache: dict[str, Any] = {}

    def json(self, name: str) -> Any:
        """A record, read once; one with summaries (``RECOUNTS``) only when they agree
        with its trials (a KitError naming the file and the first field otherwise)."""
        if name not in self._cache:
            path = self.root / name
            if not path.is_file():
                raise KitError(f"{path}: evidence file missing")
            record = read_json(path)
            found = RECOUNTS[name](record) if name in RECOUNTS else []
            if name == "unified.json":  # its MGN entries copy mgn_faults.json's trials
                found += recompute_catalogue.recount_unified(record, self.json("mgn_faults.json"))
            if name == "mgn_faults.json" and not found and (self.root / "mgn.json").is_file():
                found += recompute_faults.eval_frames(record, self.json("mgn.json"))
            if found:
                raise RecountError(f"{path}: {found[0]}"
                               + (f" (and {len(found) - 1} more)" if len(found) > 1 else ""))
            self._cache[name] = record
        return self._cache[name]


def floor_fit(ev: SciEvidence, stat: str, end: str | None = None) -> Value:
    """The operator-floor fit recomputed from the per-resolution floors."""
    rows = ev.json("operator_floor.json")["resolutions"]
    if stat == "resolutions":
        return len(rows)
    fit = loglog_fit([r["h"] for r in rows], [r["measured"] for r in rows])
    if stat == "slope_ci95":
        return _end((fit[stat][0], fit[stat][1]), end)
    return float(fit[stat])


def floor_bound_dominates(ev: SciEvidence) -> Value:
    rows = ev.json("operator_floor.json")["resolutions"]
    return all(r["bound"] >= r["measured"] for r in rows)


def floor_predictor_error(ev: SciEvidence) -> Value:
    """|leading-order predictor - measured| / measured at the finest mesh."""
    row = ev.json("operator_floor.json")["resolutions"][-1]
    return float(abs(row["predicted"] - row["measured"]) / row["measured"])


def _fno(ev: SciEvidence) -> dict[str, Any]:
    return ev.json("fno.json")  # type: ignore[no-any-return]


def fno_checkpoints(ev: SciEvidence) -> Value:
    return len(_fno(ev)["checkpoints"])


def fno_cases(ev: SciEvidence) -> Value:
    """Held-out cases per checkpoint (all checkpoints must agree)."""
    counts = {len(c["translation_violation"]) for c in _fno(ev)["checkpoints"]}
    if len(counts) != 1:
        raise KitError(f"{ev.root}/fno.json: checkpoints have different case counts {counts}")
    return counts.pop()


def fno_translation_passes(ev: SciEvidence) -> Value:
    tol = _fno(ev)["translation_tolerance"]
    return int(sum(v <= tol for c in _fno(ev)["checkpoints"]
                   for v in c["translation_violation"]))


def fno_translation_max(ev: SciEvidence) -> Value:
    return float(max(max(c["translation_violation"]) for c in _fno(ev)["checkpoints"]))


def fno_conservation_failures(ev: SciEvidence) -> Value:
    """Cases whose violation exceeds the tolerance plus the subject's floor."""
    return int(sum(v > c["conservation_tolerance"] + f for c in _fno(ev)["checkpoints"]
                   for v, f in zip(c["conservation_violation"], c["subject_floor"], strict=True)))


def fno_dirichlet_rejected(ev: SciEvidence) -> Value:
    return int(sum(c["decisions"]["dirichlet_translation"] == "rejected"
                   for c in _fno(ev)["checkpoints"]))


def fno_roster(ev: SciEvidence, pde: str, stat: str) -> Value:
    rows = _fno(ev)["roster"][pde]
    admitted = sum(r["decision"] == "retained-executable" for r in rows)
    if stat == "size":
        return len(rows)
    if stat == "admitted":
        return int(admitted)
    if stat == "wilson":
        return list(wilson(admitted, len(rows)))
    return float(np.mean([r["mean_violation"] for r in rows]))


def _pinn(ev: SciEvidence, pde: str) -> list[dict[str, Any]]:
    return [s for s in ev.json("pinn.json")["subjects"] if s["pde"] == pde]


def pinn_roster(ev: SciEvidence, pde: str) -> Value:
    return len(_pinn(ev, pde))


def pinn_passes(ev: SciEvidence, relation: str, pde: str | None = None) -> Value:
    """MR-B: ratio <= 1; MR-C: |ratio - 1| within the tolerance; pooled when pde is None."""
    return _passes(ev, relation, pde)


def _passes(ev: SciEvidence, relation: str, pde: str | None) -> int:
    record = ev.json("pinn.json")
    pdes = [pde] if pde else sorted({s["pde"] for s in record["subjects"]})
    count = 0
    for name in pdes:
        for s in _pinn(ev, name):
            if relation == "mr_b":
                count += s["mr_b_violation"] <= record["boundary_floor"]
            else:
                count += abs(s["mr_c_ratio"] - 1) <= record["conservation_tolerance"]
    return count


def pinn_failures(ev: SciEvidence, relation: str, pde: str) -> Value:
    return len(_pinn(ev, pde)) - _passes(ev, relation, pde)


def _end(pair: tuple[float, float], end: str | None) -> Value:
    return list(pair) if end is None else pair[0] if end == "low" else pair[1]


def pinn_wilson(ev: SciEvidence, relation: str, pde: str, end: str | None = None) -> Value:
    return _end(wilson(_passes(ev, relation, pde), len(_pinn(ev, pde))), end)


def _ratios(ev: SciEvidence, relation: str, pde: str) -> np.ndarray[Any, Any]:
    key = "mr_b_ratio" if relation == "mr_b" else "mr_c_ratio"
    return np.array([s[key] for s in _pinn(ev, pde)])


def pinn_mean(ev: SciEvidence, relation: str, pde: str) -> Value:
    return float(_ratios(ev, relation, pde).mean())


def pinn_mean_ci(ev: SciEvidence, relation: str, pde: str, end: str | None = None) -> Value:
    """The percentile bootstrap interval with the study's seed (100/200 + PDE index)."""
    index = list(PINN_PDES).index(pde)
    seed = (100 if relation == "mr_b" else 200) + index
    return _end(bootstrap_mean_ci(_ratios(ev, relation, pde), seed), end)


def domain_max(ev: SciEvidence, card: str, pde: str | None = None) -> Value:
    """The largest domain score D among a card's verdicts (of one PDE's cases)."""
    scores = [v["domain"] for v in ev.json("ledger.json")["verdicts"]
              if v["card"] == card and (pde is None or f"-{pde}-" in v["case"])]
    if not scores:
        raise KitError(f"{ev.root}/ledger.json: no verdicts of {card}")
    return float(max(scores))


def pinn_compare(ev: SciEvidence, stat: str) -> Value:
    heat, burgers = _ratios(ev, "mr_b", "heat"), _ratios(ev, "mr_b", "burgers")
    if stat == "n":
        return int(min(len(heat), len(burgers)))
    if stat == "cliffs_delta":
        return cliffs_delta(heat, burgers)
    return wilcoxon(heat, burgers)


def pinn_mr_a_vacuous(ev: SciEvidence) -> Value:
    return all(s["mr_a_violation"] == 0.0 for s in ev.json("pinn.json")["subjects"])


def ledger_verdicts(ev: SciEvidence, card: str, verdict: str, pde: str | None = None) -> Value:
    """How many verdicts of one class the verdict ledger records for a card (one PDE's)."""
    rows = [v for v in ev.json("ledger.json")["verdicts"]
            if v["card"] == card and (pde is None or f"-{pde}-" in v["case"])]
    if not rows:
        raise KitError(f"{ev.root}/ledger.json: no verdicts of {card}")
    return int(sum(v["verdict"] == verdict for v in rows))


RECOMPUTE_SCIML: dict[str, Callable[..., Value]] = {
    "sciml.constant_value": constant, "sciml.recorded": recorded,
    **{f"sciml.{fn.__name__}": fn for fn in (
        floor_fit, floor_bound_dominates, floor_predictor_error, fno_checkpoints, fno_cases,
        fno_translation_passes, fno_translation_max, fno_conservation_failures,
        fno_dirichlet_rejected, fno_roster, pinn_roster, pinn_passes, pinn_failures,
        pinn_wilson, pinn_mean, pinn_mean_ci, pinn_compare, pinn_mr_a_vacuous, domain_max,
        ledger_verdicts)},
    **{f"sciml.{fn.__name__}": fn
       for fn in (*recompute_mgn.FUNCTIONS, *recompute_faults.FUNCTIONS,
                  *recompute_catalogue.FUNCTIONS)}}
