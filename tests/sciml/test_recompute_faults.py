"""The #27 audit's recompute functions of the seeded-fault catalogue and the architecture and
task counts (``kit.sciml.recompute_mgn``), on small hand-built records whose answers are
known: a metric over named mutants falls below the detector's threshold when one of them
is missed, the class counts see a mutant outside the chosen classes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kit.errors import KitError
from kit.sciml.recompute import RECOMPUTE_SCIML
from kit.sciml.recompute_faults import (
    fault_cell_caught,
    fault_cell_metric,
    fault_mode_count,
    fault_sweep_count,
)
from kit.sciml.recompute_mgn import cfd_tasks, mgn_architectures


class Records:
    """A stand-in evidence folder: named JSON records held in memory."""

    def __init__(self, **records: Any) -> None:
        self.root = Path("records")
        self.records = {f"{k}.json": v for k, v in records.items()}

    def json(self, name: str) -> Any:
        return self.records[name]


def trial(subject: int, seed: int, ratio: float, change: float, **detected: bool
          ) -> dict[str, Any]:
    flags = {"conservation": False, "mirror": False, "permutation": False, **detected}
    return {"subject": subject, "seed": seed, "conservation": ratio,
            "mirror_change": change, "detected": flags}


def faults() -> Records:
    mutants = {
        "BC_a": {"fault_class": "boundary-condition",
                 "trials": [trial(0, 0, 4.0, 0.1, conservation=True),
                            trial(1, 0, 4.2, 0.1, conservation=True)]},
        "NS_b": {"fault_class": "normalisation",
                 "trials": [trial(0, 0, 1.2, 0.0), trial(1, 0, 1.3, 0.0)]},
        "PC_c": {"fault_class": "physical-channel",
                 "trials": [trial(0, 0, 9.0, 0.9, conservation=True, mirror=True),
                            trial(1, 0, 9.1, 0.8, conservation=True, mirror=True)]},
        "ADV": {"fault_class": "adversarial", "trials": [trial(0, 0, 1.0, 0.0)] * 2}}
    sweep = {"0.5": {"trials": [{"detected": {"conservation": True}},
                                {"detected": {"conservation": False}}]},
             "1.0": {"trials": [{"detected": {"conservation": False}}] * 2}}
    return Records(mgn_faults={"mutants": mutants, "fraction_sweep": sweep})


def test_the_functions_are_registered() -> None:
    for fn in (cfd_tasks, fault_cell_caught, fault_cell_metric, fault_mode_count,
               fault_sweep_count, mgn_architectures):
        assert RECOMPUTE_SCIML[f"sciml.{fn.__name__}"] is fn


def test_a_metric_over_named_mutants_includes_the_missed_one() -> None:
    ev = faults()
    # NS_b is named but not detected: its ratio 1.2 is the minimum, below a 1.5 threshold
    assert fault_cell_metric(ev, ["BC_a", "NS_b"], "conservation", "min") == 1.2
    assert fault_cell_metric(ev, ["BC_a", "NS_b"], "conservation", "max") == 4.0
    assert fault_cell_metric(ev, ["BC_a"], "conservation", "min", subject=1) == 4.2
    with pytest.raises(KitError, match="no canonical mutants"):
        fault_cell_metric(ev, ["ADV"], "conservation")
    with pytest.raises(KitError, match="no canonical mutants"):
        fault_cell_metric(ev, ["BC_a", "missing"], "conservation")


def test_caught_counts_by_name_and_by_class() -> None:
    ev = faults()
    assert fault_cell_caught(ev, "conservation", mutants=["BC_a", "NS_b"]) == 1
    assert fault_cell_caught(ev, "conservation", classes=["physical-channel"]) == 1
    assert fault_cell_caught(ev, "mirror", classes=["boundary-condition", "normalisation"]) == 0
    assert fault_cell_caught(ev, "any") == 2


def test_the_first_always_or_never_caught_mutant() -> None:
    ev = faults()
    assert (fault_mode_count(ev, "every", "k", "conservation"),
            fault_mode_count(ev, "every", "n", "conservation")) == (2, 2)
    assert fault_mode_count(ev, "none", "k", "conservation") == 0
    assert fault_mode_count(ev, "every", "k", "permutation") == -1


def test_sweep_counts_per_level() -> None:
    ev = faults()
    assert fault_sweep_count(ev, "fraction_sweep", "all", "k", "conservation", "max") == 1
    assert fault_sweep_count(ev, "fraction_sweep", "all", "k", "conservation", "min") == 0
    assert fault_sweep_count(ev, "fraction_sweep", "below1", "n", "conservation") == 2
    ev.records["mgn_faults.json"]["fraction_sweep"]["1.0"]["trials"] = [
        {"detected": {"conservation": False}}]
    with pytest.raises(KitError, match="unequal trials"):
        fault_sweep_count(ev, "fraction_sweep", "all", "n", "conservation")


def test_architectures_with_and_without_the_roster() -> None:
    subjects = [{"arch": "mgn", "seed": s} for s in range(6)] + [
        {"arch": "pointmlp", "seed": 0}, {"arch": "physicsnemo", "seed": 0}]
    ev = Records(mgn={"subjects": subjects})
    assert mgn_architectures(ev) == 3
    assert mgn_architectures(ev, include_roster=True) == 4
    ev = Records(mgn={"subjects": subjects[:4] + subjects[6:7]})
    assert mgn_architectures(ev, include_roster=True) == 2


def test_cfd_tasks_count_the_tasks_with_verdicts() -> None:
    verdicts = [{"card": "mgn-node-permutation"}, {"card": "mgn-mirror-y"},
                {"card": "fno-periodic-translation"}]
    assert cfd_tasks(Records(ledger={"verdicts": verdicts})) == 1
    verdicts.append({"card": "cmp-node-permutation"})
    assert cfd_tasks(Records(ledger={"verdicts": verdicts})) == 2


SHIPPED_FAULTS = Path(__file__).resolve().parents[2] / "claims/sciml/evidence/kit/mgn_faults.json"


def _shipped() -> dict[str, Any]:
    import json

    return json.loads(SHIPPED_FAULTS.read_text())  # type: ignore[no-any-return]


def _edit_pr(f: dict[str, Any]) -> None:
    f["precision_recall"]["conservation"]["precision"] = 0.5


def _every_control_detected(f: dict[str, Any]) -> None:
    for t in f["control"]["trials"]:
        t["detected"]["conservation"] = True


def _ratio_without_its_flag(f: dict[str, Any]) -> None:
    detected = next(t for m in f["mutants"].values() for t in m["trials"]
                    if t["detected"]["conservation"])
    detected["conservation"] = 1.2  # under the 1.5 threshold, the flag says detected


def _mutant_summary(f: dict[str, Any]) -> None:
    next(iter(f["mutants"].values()))["summary"]["any"]["detected"] += 1


def _sweep_level(f: dict[str, Any]) -> None:
    next(iter(f["scale_sweep"].values()))["conservation"]["detected"] += 1


def _threshold(f: dict[str, Any]) -> None:
    f["thresholds"]["conservation"] = 1.1


@pytest.mark.parametrize(("edit", "says"), [
    (_edit_pr, "precision_recall disagrees with the trials"),
    (_every_control_detected, "control/trials/0/detected"),
    (_ratio_without_its_flag, "is not what its measures give against the thresholds"),
    (_mutant_summary, "/summary disagrees with its trials"),
    (_sweep_level, "scale_sweep/"),
    (_threshold, "are not the MR cards'"),
])
def test_a_summary_edited_alone_is_recounted_and_fails(edit: Any, says: str,
                                                       tmp_path: Path) -> None:
    """Every summary of the fault record is recounted from its trials when verify reads it:
    the shipped record recounts clean, and each edit alone is named (issue: a summary
    moved rows while its trials said otherwise)."""
    import json

    from kit.sciml.recompute import SciEvidence
    from kit.sciml.recompute_faults import recount

    assert recount(_shipped()) == []
    edited = _shipped()
    edit(edited)
    found = recount(edited)
    assert found
    assert says in found[0]
    (tmp_path / "mgn_faults.json").write_text(json.dumps(edited))
    with pytest.raises(KitError, match=r"mgn_faults\.json: "):
        SciEvidence(tmp_path).json("mgn_faults.json")
