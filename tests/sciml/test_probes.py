"""The closed-form PINN/FNO probes of the unified catalogue: the references, the measured
labels, the detection rules and the recounted precision/recall.

Also covers ``kit.sciml.pinn`` (no test file of its own)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from kit.errors import KitError
from kit.paths import ROOT
from kit.sciml import pinn, probes

torch = pytest.importorskip("torch")


def test_cole_hopf_series_solves_the_dirichlet_burgers_problem() -> None:
    nu = pinn.PDES["burgers"]["nu"]
    series = probes.BurgersColeHopf(nu)
    rng = np.random.default_rng(0)
    x = torch.tensor(rng.uniform(0.05, 0.95, 200), requires_grad=True)
    t = torch.tensor(rng.uniform(0.0, pinn.HORIZON, 200), requires_grad=True)
    u = series(torch.stack([x, t], 1))[:, 0]
    u_x, u_t = torch.autograd.grad(u.sum(), (x, t), create_graph=True)
    u_xx = torch.autograd.grad(u_x.sum(), x)[0]
    residual = (u_t + u * u_x - nu * u_xx).detach().abs().max()
    assert float(residual) < 1e-8 * float(u_t.detach().abs().max())
    edges = torch.tensor([[0.0, 0.3], [1.0, 0.3]], dtype=torch.float64)
    assert float(series(edges).abs().max()) < 1e-12
    check = probes.reference_check()
    assert check["burgers_series_initial_max_error"] < 1e-6
    # the kit's first-order finite-volume reference is close to, not at, the series
    assert 1e-4 < check["burgers_series_vs_finite_volume_rel_l2"] < 0.02


def test_heat_reference_is_the_exact_solution() -> None:
    heat = probes.HeatExact(pinn.PDES["heat"]["nu"])
    x = np.linspace(0, 1, 11)
    grid = torch.tensor(np.stack([x, np.full_like(x, pinn.HORIZON)], 1))
    assert np.allclose(heat(grid)[:, 0].numpy(), pinn.reference("heat", x, pinn.HORIZON),
                       rtol=0, atol=1e-14)


@pytest.mark.parametrize(("pde", "kind", "severity", "expected"), [
    ("heat", "mode_cos2", 0.05, set()),                 # mass and Neumann flux kept
    ("heat", "mode_sin2", 0.05, {"boundary"}),          # u_x(0) moves, mass kept
    ("burgers", "mode_sin2", 0.05, set()),              # zero at both walls, mass kept
    ("burgers", "offset", 0.01, {"conservation", "boundary"}),
    ("heat", "rows_zero", 1.0, {"permutation", "conservation"}),
    ("burgers", "mirror_x", 1.0, set()),
])
def test_pinn_labels_are_measured_on_the_closed_form_references(
        pde: str, kind: str, severity: float, expected: set[str]) -> None:
    reference = probes.pinn_reference(pde)
    on_reference = probes._pinn_metrics(
        probes.ProbedPinn(reference, probes.Probe(kind, severity), probes._field_scale(pde)), pde)
    labels = probes.label(on_reference, probes._pinn_metrics(reference, pde))
    assert {d for d, broken in labels.items() if broken} == expected


@pytest.mark.parametrize(("kind", "severity", "expected"), [
    ("fixed_roll", 3.0, set()), ("circular_blur", 1.0, set()), ("frozen", 1.0, set()),
    ("transpose", 1.0, {"permutation"}), ("fixed_mode", 0.05, {"permutation"}),
    ("scale", 1.02, {"conservation"}), ("fixed_bump", 0.1, {"permutation", "conservation"}),
])
def test_fno_labels_are_measured_on_the_reference_solver(kind: str, severity: float,
                                                         expected: set[str]) -> None:
    from kit.sciml import fno

    u0, target = fno.heldout("heat", cases=2)
    shifts = [[1, 0], [0, 3], [5, 7]]
    solver = probes.Solver("heat")
    reference = probes._fno_metrics(solver, u0, target, shifts)
    on_reference = probes._fno_metrics(probes.ProbedFno(solver, probes.Probe(kind, severity)),
                                       u0, target, shifts)
    labels = probes.label(on_reference, reference)
    assert {d for d, broken in labels.items() if broken} == expected


def test_detection_rules() -> None:
    assert probes.fires("permutation", 2e-5, 0.0)
    assert not probes.fires("permutation", 5e-6, 0.0)
    assert probes.fires("conservation", 1.6e-3, 1e-3)
    assert not probes.fires("conservation", 1.4e-3, 1e-3)
    assert not probes.fires("boundary", 0.5e-3, 1e-3)     # a smaller violation never fires
    assert probes.fires("boundary", 1e-9, 0.0)
    assert not probes.fires("boundary", 0.0, 0.0)
    assert probes.flagged(6, 12)
    assert not probes.flagged(5, 12)


def _trial(metric: float, control: float) -> dict[str, object]:
    return {"metrics": {"permutation": 0.0, "conservation": metric},
            "control": {"permutation": 0.0, "conservation": control}}


def test_labelled_precision_recall_recount(tmp_path: Path) -> None:
    from kit.sciml.recompute import RECOMPUTE_SCIML, SciEvidence

    def entry(name: str, broken: bool, metric: float) -> dict[str, object]:
        moved = 1.0 if broken else 0.0
        return {"family": "fno", "name": name, "kind": name,
                "label_metrics": {"probe": {"permutation": 0.0, "conservation": moved},
                                  "reference": {"permutation": 0.0, "conservation": 0.0}},
                "trials": [_trial(metric, 1.0), _trial(metric, 1.0)]}

    # targeted and caught, targeted and missed, untargeted but flagged (off-target)
    entries = [entry("a", True, 2.0), entry("b", True, 1.0), entry("c", False, 3.0)]
    limits = {"label_tolerance": probes.LABEL_TOLERANCE,
              "permutation": probes.PERMUTATION_THRESHOLD, "ratio": probes.RATIO_THRESHOLD}
    def stored(thresholds: dict[str, float]) -> None:  # as a run writes it: consistent
        from kit.sciml.recompute_catalogue import unified_again

        faults = json.loads((tmp_path / "mgn_faults.json").read_text())
        record = unified_again({"entries": entries, "thresholds": thresholds}, faults)
        (tmp_path / "unified.json").write_text(json.dumps(record))

    shutil.copy(ROOT / "claims/sciml/evidence/kit/mgn_faults.json", tmp_path)
    stored(limits)
    ev = SciEvidence(tmp_path)
    pr = RECOMPUTE_SCIML["sciml.unified_pr"]
    assert pr(ev, detector="conservation", field="precision") == 0.5
    assert pr(ev, detector="conservation", field="recall") == 0.5
    assert pr(ev, detector="conservation", field="targeted") == 2
    with pytest.raises(KitError, match="undefined"):
        pr(ev, detector="permutation", field="precision")
    assert RECOMPUTE_SCIML["sciml.unified_flagged"](ev, detector="conservation",
                                                    family="fno") == 2
    assert RECOMPUTE_SCIML["sciml.unified_size"](ev, family="fno") == 3
    # the recount reads the thresholds the run recorded, not the code's: at ratio 2.5 only
    # the off-target entry (3.0) still fires
    stored({**limits, "ratio": 2.5})
    ev = SciEvidence(tmp_path)
    assert pr(ev, detector="conservation", field="precision") == 0.0
    assert RECOMPUTE_SCIML["sciml.unified_flagged"](ev, detector="conservation",
                                                    family="fno") == 1


def test_mgn_entries_follow_the_catalogue_order_not_the_sorted_record() -> None:
    # mgn_faults.json is canonical JSON (keys sorted); the unified catalogue lists the
    # mutants in the catalogue's own order whether the record comes from memory or a file.
    trial = {"detected": {"permutation": False, "conservation": True, "mirror": False}}
    names = ["ADV_frozen", "BC_zero_inflow", "TR_sign_flip"]  # sorted, as read back
    faults = {"mutants": {n: {"trials": [trial], "fault_class": "x", "severity": 1.0}
                          for n in names}}
    assert [e["kind"] for e in probes._mgn_entries(faults)] == [
        "BC_zero_inflow", "TR_sign_flip", "ADV_frozen"]
    faults["mutants"]["XX_unknown"] = faults["mutants"]["ADV_frozen"]
    with pytest.raises(KitError, match=r"mutants \['XX_unknown'\] are not in the catalogue"):
        probes._mgn_entries(faults)
