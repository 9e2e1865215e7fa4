"""Closed-form output-level probes of the PINN and FNO subjects, and the unified catalogue.

A probe is a fault written as a formula on a trained subject's output (or, for
``mirror_x``, on its input coordinates); the subject is not retrained. Twelve kinds per
family, each on both PDEs of that family (heat and Burgers), give 24 PINN and 24 FNO
entries; with the 12 executed MeshGraphNet mutants (``mgn_faults``) they form the
60-entry unified catalogue.

Which invariant a probe breaks is measured, not declared: the probe is applied to a
reference that keeps every relation exactly, and the relation's violation is compared
with the reference's own (``LABEL_TOLERANCE``). The PINN references are closed-form:
the heat solution 1 + exp(-k pi^2 t) cos(pi x) and the Cole-Hopf series of the Dirichlet
Burgers problem (``BurgersColeHopf``). The FNO reference is the kit's periodic
finite-volume solver, exactly shift-equivariant and conservative to rounding.

Detectors per trial (one trained subject, and for the FNO one held-out case), with the
MeshGraphNet catalogue's predeclared thresholds:

    permutation class   PINN collocation permutation (MR-A) max |f(P x) - P f(x)|, FNO
                        periodic translation relative L2: fires above 1e-5 (exact
                        relations; the unmutated subjects score 0 and < 1e-6)
    conservation        PINN |mass ratio - 1| (MR-C), FNO channel-sum drift: fires when
                        the probe's violation exceeds 1.5 x the unmutated subject's on the
                        same trial (reference-relative, as the continuity guard)
    boundary            PINN boundary residual (MR-B): fires at 1.5 x the unmutated one

An entry is flagged by a detector when it fires on at least half of the entry's trials.
Per detector, precision and recall against the measured labels count entries: a flagged
entry whose label says the probe keeps that invariant is a false positive. The
MeshGraphNet mutants have no closed-form reference, so their labels are not measured:
they enter the fault-level rates (every entry is a fault) and the counts, not the
labelled precision and recall.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from kit.errors import KitError
from kit.runfolder import Progress
from kit.sciml import fno, mgn_faults, pinn
from kit.sciml.solvers import simulate
from kit.sciml.stats import rate, stat_scores

Array = np.ndarray[Any, Any]
PERMUTATION_THRESHOLD = mgn_faults.PERMUTATION_THRESHOLD
RATIO_THRESHOLD = mgn_faults.CONSERVATION_THRESHOLD
LABEL_TOLERANCE = 1.0e-9
ROWS = 0.1  # share of the batch rows the index-dependent probes touch
COLE_HOPF_TERMS = 60


@dataclass(frozen=True)
class Probe:
    kind: str
    severity: float


PINN_PROBES = (
    Probe("scale", 1.02), Probe("scale", 1.5), Probe("offset", 0.01), Probe("offset", 0.2),
    Probe("boundary_layer", 0.1), Probe("mode_cos2", 0.05), Probe("mode_sin2", 0.05),
    Probe("time_drift", 0.1), Probe("rows_zero", 1.0), Probe("rows_ramp", 0.01),
    Probe("sign_flip", 1.0), Probe("mirror_x", 1.0))
FNO_PROBES = (
    Probe("scale", 1.02), Probe("scale", 1.5), Probe("offset", 0.01), Probe("offset", 0.2),
    Probe("fixed_mode", 0.05), Probe("fixed_bump", 0.1), Probe("rows_zero", 1.0),
    Probe("sign_flip", 1.0), Probe("transpose", 1.0), Probe("fixed_roll", 3.0),
    Probe("frozen", 1.0), Probe("circular_blur", 1.0))
DETECTORS = {"pinn": ("permutation", "conservation", "boundary"),
             "fno": ("permutation", "conservation"),
             "mgn": ("permutation", "conservation", "mirror")}


def _torch() -> Any:
    import torch

    return torch


class BurgersColeHopf:
    """u(x, t) of u_t + u u_x = nu u_xx on [0, 1], u0 = sin(pi x), u(0) = u(1) = 0, by the
    Cole-Hopf transform: u = 2 pi nu sum a_n e_n n sin(n pi x) / (1 + sum a_n e_n
    cos(n pi x)), a_n = 2 I_n(1 / (2 pi nu)) / I_0(1 / (2 pi nu)), e_n = exp(-n^2 pi^2 nu t)."""

    def __init__(self, nu: float, terms: int = COLE_HOPF_TERMS) -> None:
        from scipy.special import ive

        torch = _torch()
        self.nu = nu
        k = 1.0 / (2 * np.pi * nu)
        self.n = torch.arange(1, terms + 1, dtype=torch.float64)
        self.a = torch.tensor(2 * ive(np.arange(1, terms + 1), k) / ive(0, k))

    def __call__(self, points: Any) -> Any:
        torch = _torch()
        x, t = points[:, :1], points[:, 1:2]
        decay = self.a * torch.exp(-(self.n * np.pi) ** 2 * self.nu * t)
        top = (decay * self.n * torch.sin(self.n * np.pi * x)).sum(1, keepdim=True)
        bottom = 1.0 + (decay * torch.cos(self.n * np.pi * x)).sum(1, keepdim=True)
        return 2 * np.pi * self.nu * top / bottom


class HeatExact:
    """1 + exp(-k pi^2 t) cos(pi x), the Neumann heat problem's solution."""

    def __init__(self, nu: float) -> None:
        self.nu = nu

    def __call__(self, points: Any) -> Any:
        torch = _torch()
        x, t = points[:, :1], points[:, 1:2]
        return 1.0 + torch.exp(-self.nu * np.pi ** 2 * t) * torch.cos(np.pi * x)


def pinn_reference(pde: str) -> Any:
    nu = pinn.PDES[pde]["nu"]
    return HeatExact(nu) if pde == "heat" else BurgersColeHopf(nu)


def _rows(count: int) -> int:
    return max(1, round(ROWS * count))


class ProbedPinn:
    """A PINN (or reference) u(x, t) with one probe applied to what it returns."""

    def __init__(self, net: Any, probe: Probe, scale: float) -> None:
        self.net, self.probe, self.scale = net, probe, scale

    def __call__(self, points: Any) -> Any:
        torch = _torch()
        kind, s = self.probe.kind, self.probe.severity
        x, t = points[:, :1], points[:, 1:2]
        if kind == "mirror_x":
            return self.net(torch.cat([1.0 - x, t], 1))
        u = self.net(points)
        if kind == "scale":
            return s * u
        if kind == "offset":
            return u + s * self.scale
        if kind == "boundary_layer":
            return u + s * self.scale * torch.exp(-x / 0.05)
        if kind == "mode_cos2":
            return u + s * self.scale * torch.cos(2 * np.pi * x)
        if kind == "mode_sin2":
            return u + s * self.scale * torch.sin(2 * np.pi * x)
        if kind == "time_drift":
            return u + s * self.scale * t
        if kind == "sign_flip":
            return -u
        rows = torch.arange(len(u), dtype=u.dtype)[:, None]
        if kind == "rows_zero":
            return u * (rows >= _rows(len(u))).to(u.dtype)
        if kind == "rows_ramp":
            return u + s * self.scale * rows / len(u)
        raise ValueError(f"unknown PINN probe kind {kind!r}")


class ProbedFno:
    """An FNO (or the reference solver) u0 -> u(T) with one probe applied to its output."""

    def __init__(self, model: Any, probe: Probe) -> None:
        self.model, self.probe = model, probe

    def __call__(self, u0: Any) -> Any:
        torch = _torch()
        kind, s = self.probe.kind, self.probe.severity
        y = self.model(u0)
        n = y.shape[-1]
        grid = torch.arange(n, dtype=y.dtype) / n
        if kind == "scale":
            return s * y
        if kind == "offset":
            return y + s
        if kind == "fixed_mode":
            return y + s * torch.cos(2 * np.pi * grid)[:, None]
        if kind == "fixed_bump":
            r2 = (grid[:, None] - 0.3) ** 2 + (grid[None, :] - 0.3) ** 2
            return y + s * torch.exp(-r2 / (2 * 0.05 ** 2))
        if kind == "rows_zero":
            out = y.clone()
            out[..., : _rows(n), :] = 0.0
            return out
        if kind == "sign_flip":
            return -y
        if kind == "transpose":
            return y.transpose(-1, -2)
        if kind == "fixed_roll":
            return torch.roll(y, int(s), dims=-2)
        if kind == "frozen":
            return u0.to(y.dtype)
        if kind == "circular_blur":
            return (y + sum(torch.roll(y, d, dims=a) for a in (-1, -2) for d in (1, -1))) / 5
        raise ValueError(f"unknown FNO probe kind {kind!r}")


class Solver:
    """The periodic finite-volume reference as an FNO-shaped callable."""

    def __init__(self, pde: str) -> None:
        self.pde = pde

    def __call__(self, u0: Any) -> Any:
        torch = _torch()
        return torch.tensor(simulate(u0[:, 0].double().numpy(), self.pde))[:, None]


def _field_scale(pde: str) -> float:
    return float(np.abs(pinn.initial(pde, np.linspace(0, 1, 1001))).max())


def _pinn_metrics(net: Any, pde: str) -> dict[str, float]:
    found = pinn.evaluate(net, pde)
    return {"permutation": found["mr_a_violation"],
            "conservation": abs(found["mr_c_ratio"] - 1.0),
            "boundary": found["mr_b_violation"]}


def _fno_metrics(model: Any, u0: Array, target: Array, shifts: list[list[int]]
                 ) -> dict[str, Array]:
    return {"permutation": fno.translation(model, u0, shifts)["violation"],
            "conservation": fno.conservation(model, u0, target)["violation"]}


def label(probe: dict[str, Any], reference: dict[str, Any],
          tolerance: float = LABEL_TOLERANCE) -> dict[str, bool]:
    """Which relations a probe breaks: its violation on the reference moves from the
    reference's own by more than ``tolerance`` (``LABEL_TOLERANCE``; largest over held-out
    cases)."""
    return {d: bool(np.max(np.abs(np.asarray(probe[d]) - np.asarray(reference[d])))
                    > tolerance) for d in probe}


def fires(detector: str, probe: float, control: float,
          permutation: float = PERMUTATION_THRESHOLD, ratio: float = RATIO_THRESHOLD) -> bool:
    """One detector on one trial: the exact permutation-class relations against
    ``permutation`` (``PERMUTATION_THRESHOLD``), the others against ``ratio``
    (``RATIO_THRESHOLD``) x the unmutated subject's violation on the same trial."""
    if detector == "permutation":
        return bool(probe > permutation)
    if control > 0:
        return bool(probe / control > ratio)
    return bool(probe > 0)


def flagged(hits: int, trials: int) -> bool:
    """An entry is flagged by a detector firing on at least half of its trials."""
    return 2 * hits >= trials


def _listed(metrics: dict[str, Any]) -> dict[str, Any]:
    return {d: np.asarray(v).tolist() for d, v in metrics.items()}


def _entry(family: str, pde: str, probe: Probe, on_reference: dict[str, Any],
           reference: dict[str, Any], trials: list[dict[str, Any]]) -> dict[str, Any]:
    flags = {d: sum(t["detected"][d] for t in trials) for d in DETECTORS[family]}
    return {"family": family, "name": f"{family}-{pde}-{probe.kind}-{probe.severity:g}",
            "pde": pde, "kind": probe.kind, "severity": probe.severity,
            "labels": label(on_reference, reference),
            "label_metrics": {"probe": _listed(on_reference), "reference": _listed(reference)},
            "trials": trials, "detections": flags,
            "flagged": {d: flagged(k, len(trials)) for d, k in flags.items()}}


def run_pinn_probes(roster: int = 15, recipe: pinn.Recipe | None = None,
                    cache: Path | None = None) -> list[dict[str, Any]]:
    """The 24 PINN entries over the trained roster (loaded from the cache or trained)."""
    base = recipe or pinn.Recipe("heat", 0)
    entries = []
    progress = Progress("sciml: PINN probes", len(pinn.PDES) * len(PINN_PROBES))
    for pde in pinn.PDES:
        scale = _field_scale(pde)
        reference = pinn_reference(pde)
        ref_metrics = _pinn_metrics(reference, pde)
        nets = [pinn.train(replace(base, pde=pde, seed=seed), cache)[0]
                for seed in range(roster)]
        controls = [_pinn_metrics(net, pde) for net in nets]
        for probe in PINN_PROBES:
            on_reference = _pinn_metrics(ProbedPinn(reference, probe, scale), pde)
            trials = []
            for seed, (net, control) in enumerate(zip(nets, controls, strict=True)):
                found = _pinn_metrics(ProbedPinn(net, probe, scale), pde)
                trials.append({"seed": seed, "metrics": found, "control": control,
                               "detected": {d: fires(d, found[d], control[d])
                                            for d in DETECTORS["pinn"]}})
            entries.append(_entry("pinn", pde, probe, on_reference, ref_metrics, trials))
            progress.step(entries[-1]["name"])
    return entries


def run_fno_probes(seeds_per_pde: int = 3, recipe: fno.Recipe | None = None,
                   cache: Path | None = None, shifts: list[list[int]] | None = None
                   ) -> list[dict[str, Any]]:
    """The 24 FNO entries over the checkpoints x held-out cases of the FNO study (the
    translation card's shifts unless ``shifts`` is given)."""
    base = recipe or fno.Recipe("heat", 0)
    if shifts is None:
        from kit.sciml.cards import load_cards

        card = load_cards()["fno-periodic-translation"]
        shifts = card["transformation"]["parameters"]["shifts"]
    entries = []
    progress = Progress("sciml: FNO probes", 2 * len(FNO_PROBES))
    for pde in ("heat", "burgers"):
        u0, target = fno.heldout(pde)
        reference = _fno_metrics(Solver(pde), u0, target, shifts)
        models = [fno.train(replace(base, pde=pde, seed=seed), cache)[0]
                  for seed in range(seeds_per_pde)]
        controls = [_fno_metrics(m, u0, target, shifts) for m in models]
        for probe in FNO_PROBES:
            on_reference = _fno_metrics(ProbedFno(Solver(pde), probe), u0, target, shifts)
            trials = []
            for seed, (model, control) in enumerate(zip(models, controls, strict=True)):
                found = _fno_metrics(ProbedFno(model, probe), u0, target, shifts)
                for case in range(len(u0)):
                    metrics = {d: float(found[d][case]) for d in found}
                    base_case = {d: float(control[d][case]) for d in control}
                    trials.append({"seed": seed, "case": case, "metrics": metrics,
                                   "control": base_case,
                                   "detected": {d: fires(d, metrics[d], base_case[d])
                                                for d in DETECTORS["fno"]}})
            entries.append(_entry("fno", pde, probe, on_reference, reference, trials))
            progress.step(entries[-1]["name"])
    return entries


def _mgn_entries(faults: dict[str, Any]) -> list[dict[str, Any]]:
    """The MeshGraphNet mutants in the catalogue's order (the record read back from
    ``mgn_faults.json`` has its keys sorted, so the dict's own order is not it)."""
    order = [m.name for m in mgn_faults.CATALOGUE + mgn_faults.ADVERSARIAL]
    unknown = sorted(set(faults["mutants"]) - set(order))
    if unknown:
        raise KitError(f"mgn_faults.json: mutants {unknown} are not in the catalogue")
    entries = []
    for name in (n for n in order if n in faults["mutants"]):
        mutant = faults["mutants"][name]
        trials = mutant["trials"]
        flags = {d: sum(t["detected"][d] for t in trials) for d in DETECTORS["mgn"]}
        entries.append({"family": "mgn", "name": f"mgn-{name}", "kind": name,
                        "fault_class": mutant["fault_class"], "severity": mutant["severity"],
                        "labels": None, "detections": flags, "n_trials": len(trials),
                        "flagged": {d: flagged(k, len(trials)) for d, k in flags.items()}})
    return entries


def labelled_precision_recall(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Per detector over the entries with measured labels: precision and recall of the
    entry-level flags against the labels, with Wilson intervals."""
    out = {}
    for detector in ("permutation", "conservation", "boundary"):
        c = stat_scores((e["flagged"][detector], e["labels"][detector]) for e in entries
                        if e["labels"] is not None and detector in e["labels"])
        tp = c["true_positives"]
        out[detector] = {**c, "precision": rate(tp, tp + c["false_positives"]),
                         "recall": rate(tp, c["targeted"])}
    return out


def unified_catalogue(faults: dict[str, Any], pinn_entries: list[dict[str, Any]],
                      fno_entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The unified catalogue: MGN mutants, PINN probes and FNO probes, with per-detector
    entry-level flag rates (every entry a fault) and the labelled precision and recall."""
    entries = _mgn_entries(faults) + pinn_entries + fno_entries
    families = {f: sum(e["family"] == f for e in entries) for f in DETECTORS}
    flag_rates = {}
    for detector in ("permutation", "conservation", "mirror", "boundary"):
        rows = [e for e in entries if detector in e["flagged"]]
        flag_rates[detector] = rate(sum(e["flagged"][detector] for e in rows), len(rows))
    caught = sum(any(e["flagged"].values()) for e in entries)
    return {"entries": entries, "size": len(entries), "families": families,
            "thresholds": {"permutation": PERMUTATION_THRESHOLD, "ratio": RATIO_THRESHOLD,
                           "label_tolerance": LABEL_TOLERANCE},
            "flag_rates": flag_rates, "any_detector": rate(caught, len(entries)),
            "labelled": labelled_precision_recall(entries)}


def reference_check(points: int = 201) -> dict[str, float]:
    """The closed-form Burgers reference against the PINN study's finite-volume one at the
    horizon (relative L2), and its initial state against sin(pi x) (max error)."""
    torch = _torch()
    x = np.linspace(0, 1, points)
    series = BurgersColeHopf(pinn.PDES["burgers"]["nu"])

    def at(t: float) -> Array:
        with torch.no_grad():
            grid = torch.tensor(np.stack([x, np.full_like(x, t)], 1))
            return np.asarray(series(grid)[:, 0].numpy())

    finite_volume = pinn.reference("burgers", x, pinn.HORIZON)
    return {"burgers_series_vs_finite_volume_rel_l2": float(
                np.linalg.norm(at(pinn.HORIZON) - finite_volume) / np.linalg.norm(finite_volume)),
            "burgers_series_initial_max_error": float(
                np.abs(at(0.0) - pinn.initial("burgers", x)).max())}
