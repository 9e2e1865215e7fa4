"""Recount, never read (``kit.sciml.recount``, and ``recount_unified`` of
``kit.sciml.recompute_catalogue`` for the catalogue's copies of ``mgn_faults.json``): each
summary field of the shipped SciML evidence, edited alone, disagrees with the recount from
the per-case values it summarises; edited and re-hashed in a copy of the repository, verify
fails naming the file and field."""

from __future__ import annotations

import copy
import fnmatch
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kit.claims.coverage import write_manifests
from kit.files import canonical_json, read_json, sha256
from kit.paths import ROOT
from kit.sciml import recompute_faults, recount

SCIML = Path("claims/sciml/evidence/kit")


def _first(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any]:
    return next(r for r in rows if all(r[k] == v for k, v in match.items()))


def _verdict(r: dict[str, Any]) -> None:
    _first(r["verdicts"], verdict="pass")["verdict"] = "fail"


def _count(r: dict[str, Any]) -> None:
    r["counts"]["fno-periodic-translation"]["pass"] -= 1


def _decision(r: dict[str, Any]) -> None:
    _first(r["decisions"], decision="rejected")["decision"] = "retained-executable"


def _rubric(r: dict[str, Any]) -> None:
    r["decisions"][0]["rubric"]["physical basis"] = "holds" \
        if r["decisions"][0]["conditions"]["basis"]["state"] != "holds" else "fails"


def _ratio(r: dict[str, Any]) -> None:
    r["subjects"][0]["mr_b_ratio"] *= 0.5


def _pinn_verdict(r: dict[str, Any]) -> None:
    subject = _first(r["subjects"], pde="heat")
    subject["verdicts"]["mr_b"] = "pass" if subject["verdicts"]["mr_b"] != "pass" else "fail"


def _pinn_summary(r: dict[str, Any]) -> None:
    r["summary"]["heat"]["mr_b"]["passes"] -= 1


def _roster(r: dict[str, Any]) -> None:
    r["roster"]["heat"][0]["decision"] = "deferred"


def _admitted(r: dict[str, Any]) -> None:
    r["roster"]["burgers_admitted"]["count"] -= 1


def _roster_mean(r: dict[str, Any]) -> None:
    r["roster"]["heat"][0]["mean_violation"] = 9.9e-08  # moves B-189's mean


def _roster_floor(r: dict[str, Any]) -> None:
    r["roster"]["burgers"][2]["floor"] *= 1.01  # still far under the tolerance: admitted


def _roster_seed(r: dict[str, Any]) -> None:
    r["roster"]["heat"][3]["seed"] = 4


def _checkpoint_name(r: dict[str, Any]) -> None:
    r["checkpoints"][0]["name"] = "fno-heat-seed99"  # would leave its roster subject unchecked


def _seeds(r: dict[str, Any]) -> None:
    for group in (r["control"], *r["mutants"].values()):
        for trial in group["trials"]:
            trial["seed"] = 3 if trial["seed"] == 4 else trial["seed"]  # B-112's "5 seeds"


def _cell(r: dict[str, Any]) -> None:
    _first(r["mutants"]["TR_sign_flip"]["trials"], subject=0, seed=1)["seed"] = 0


def _subjects(r: dict[str, Any]) -> None:
    r["subjects"].pop()


def _severity(r: dict[str, Any]) -> None:
    r["mutants"]["NS_double_scale"]["severity"] = 3.0  # the code runs 2


def _fault_class(r: dict[str, Any]) -> None:
    r["mutants"]["TR_sign_flip"]["fault_class"] = "normalisation"


def _dropped_mutant(r: dict[str, Any]) -> None:
    del r["mutants"]["ADV_frozen"]


def _sweep_level(r: dict[str, Any]) -> None:
    r["scale_sweep"]["8"] = r["scale_sweep"].pop("4")


def _mirror_change(r: dict[str, Any]) -> None:
    _first(r["mutants"]["PC_zero_vy"]["trials"], subject=1, seed=2)["mirror_change"] += 0.3


def _domain(r: dict[str, Any]) -> None:
    r["mirror_domain_score"] = 0.45  # under the 0.5 limit: mirror-y would be in domain


def _reflection(r: dict[str, Any]) -> None:
    r["symmetric_channel"]["reflection_offset"] = 1e-3  # the channel no longer its mirror


def _type_match(r: dict[str, Any]) -> None:
    r["symmetric_channel"]["type_match"] = 0.98


def _mgn_copy(r: dict[str, Any]) -> None:
    _first(r["entries"], family="mgn")["detections"]["conservation"] -= 1


def _probe_flag(r: dict[str, Any]) -> None:
    entry = _first(r["entries"], family="pinn")
    entry["flagged"]["boundary"] = not entry["flagged"]["boundary"]


def _any(r: dict[str, Any]) -> None:
    r["any_detector"]["count"] += 1


def _flag_rate(r: dict[str, Any]) -> None:
    r["flag_rates"]["conservation"]["value"] = 0.6


def _precision(r: dict[str, Any]) -> None:
    r["labelled"]["boundary"]["false_positives"] = 1


def _unified(record: Any) -> list[str]:
    from kit.sciml.recompute_catalogue import recount_unified

    return recount_unified(record, read_json(ROOT / SCIML / "mgn_faults.json"))


EDITS: list[tuple[str, Callable[[dict[str, Any]], None], Callable[[Any], list[str]], str]] = [
    ("unified.json", _mgn_copy, _unified, "entries/0/detections/conservation"),
    ("unified.json", _probe_flag, _unified, "/flagged/boundary"),
    ("unified.json", _any, _unified, "any_detector/count"),
    ("unified.json", _flag_rate, _unified, "flag_rates/conservation/value"),
    ("unified.json", _precision, _unified, "labelled/boundary/false_positives"),
    ("ledger.json", _verdict, recount.ledger, "verdicts/"),
    ("ledger.json", _count, recount.ledger, "counts/fno-periodic-translation"),
    ("ledger.json", _decision, recount.ledger, "decisions/"),
    ("ledger.json", _rubric, recount.ledger, "rubric/physical basis"),
    ("pinn.json", _ratio, recount.pinn, "subjects/0/mr_b_ratio"),
    ("pinn.json", _pinn_verdict, recount.pinn, "/verdicts/mr_b"),
    ("fno.json", _roster, recount.fno, "roster/heat/0/decision"),
    ("fno.json", _admitted, recount.fno, "roster/burgers_admitted"),
    ("fno.json", _roster_mean, recount.fno, "roster/heat/0/mean_violation"),
    ("fno.json", _roster_floor, recount.fno, "roster/burgers/2/floor"),
    ("fno.json", _roster_seed, recount.fno, "roster/heat/3/seed"),
    ("fno.json", _checkpoint_name, recount.fno, "checkpoints/0/name"),
    ("mgn.json", _domain, recount.mgn, "mirror_domain_score"),
    ("mgn.json", _reflection, recount.mgn, "symmetric_channel/reflection_offset"),
    ("mgn.json", _type_match, recount.mgn, "symmetric_channel/type_match"),
    ("mgn_faults.json", _seeds, recompute_faults.recount, "permutation_seeds"),
    ("mgn_faults.json", _cell, recompute_faults.recount, "mutants/TR_sign_flip/trials"),
    ("mgn_faults.json", _subjects, recompute_faults.recount, "subjects"),
    ("mgn_faults.json", _severity, recompute_faults.recount, "mutants/NS_double_scale"),
    ("mgn_faults.json", _fault_class, recompute_faults.recount, "mutants/TR_sign_flip"),
    ("mgn_faults.json", _dropped_mutant, recompute_faults.recount, "lack ADV_frozen"),
    ("mgn_faults.json", _sweep_level, recompute_faults.recount, "scale_sweep levels"),
    ("mgn_faults.json", _mirror_change, recompute_faults.recount,
     "mutants/PC_zero_vy/trials/7/mirror_change"),
]


@pytest.mark.parametrize(("name", "edit", "check", "field"), EDITS,
                         ids=[f"{e[0]}:{e[1].__name__}" for e in EDITS])
def test_each_summary_edited_alone_disagrees_with_its_recount(
        name: str, edit: Callable[[dict[str, Any]], None], check: Callable[[Any], list[str]],
        field: str) -> None:
    shipped = read_json(ROOT / SCIML / name)
    assert check(shipped) == []
    edited = copy.deepcopy(shipped)
    edit(edited)
    problems = check(edited)  # a verdict edited alone also moves its card's count
    assert problems, "the edit went unseen"
    assert field in problems[0], problems


# Every summary field (a JSON path; '*' stands for every key or index) a record carries
# beside the per-case values it is computed from.
SUMMARIES = {
    "pinn.json": ["summary/*/*/*", "mr_b_comparison/*"],
    "fno.json": ["max_translation_violation", "dirichlet_rejected", "roster/*_admitted/*"],
    "mgn.json": ["mirror_domain_score", "continuity/absolute_tolerance",
                 "symmetric_channel/*"],
    "operator_floor.json": ["slope", "slope_ci95", "r_squared", "bound_dominates",
                            "finest_predictor_relative_error",
                            "gate_per_resolution/*/decision"],
    "fv_balance.json": ["imbalance", "floor"],
    "second_task.json": ["measured/density_variation", "measured/mass_tolerance"],
    "mgn_faults.json": ["permutation_seeds"]}


def _leaves(node: Any, pattern: list[str], path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if not pattern:
        return [path]
    head, rest = pattern[0], pattern[1:]
    keys = range(len(node)) if isinstance(node, list) else \
        [k for k in node if fnmatch.fnmatch(k, head)] if "*" in head else [head]
    return [leaf for k in keys for leaf in _leaves(node[k], rest, (*path, k))]


def _moved(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 1.5 + 1e-3
    if isinstance(value, list):
        return [_moved(value[0]), *value[1:]]
    return "deferred" if value != "deferred" else "retained-executable"


def test_every_summary_field_edited_alone_is_named_by_the_recount() -> None:
    """Each summary leaf of ``SUMMARIES`` (pass counts and intervals, the fits, the gates'
    decisions, derived tolerances), moved alone in the shipped and the null evidence,
    fails the file's recount naming that leaf; the untouched files pass."""
    from kit.sciml.recompute import RECOUNTS

    edited = 0
    for folder in ("kit", "null"):
        for name, patterns in SUMMARIES.items():
            shipped = read_json(ROOT / "claims" / "sciml" / "evidence" / folder / name)
            assert RECOUNTS[name](shipped) == [], (folder, name)
            for pattern in patterns:
                leaves = _leaves(shipped, pattern.split("/"))
                assert leaves, (name, pattern)
                for leaf in leaves:
                    record = copy.deepcopy(shipped)
                    parent = record
                    for key in leaf[:-1]:
                        parent = parent[key]
                    parent[leaf[-1]] = _moved(parent[leaf[-1]])
                    problems = RECOUNTS[name](record)
                    where = "/".join(str(k) for k in leaf)
                    # the problem names the leaf, or the summary that holds it
                    assert any(where.startswith(p.split(" ")[0]) for p in problems), \
                        (folder, where, problems)
                    edited += 1
    assert edited > 100


def test_every_roster_subject_that_is_a_checkpoint_is_recounted_from_its_cases() -> None:
    """The roster's mean violation and floor of every subject that is also a checkpoint
    (the same model, cases and shifts), moved alone in the shipped and the null evidence,
    are named with the checkpoint whose cases give them; the shipped values are those
    cases' mean and largest floor, to the last bit."""
    import numpy as np

    for folder in ("kit", "null"):
        shipped = read_json(ROOT / "claims" / "sciml" / "evidence" / folder / "fno.json")
        assert recount.fno(shipped) == []
        assert len(shipped["checkpoints"]) == 6
        for checkpoint in shipped["checkpoints"]:
            pde, seed = checkpoint["name"].split("-")[1], int(checkpoint["name"][-1])
            subject = shipped["roster"][pde][seed]
            assert subject["mean_violation"] == float(
                np.mean(checkpoint["translation_violation"]))
            assert subject["floor"] == max(checkpoint["translation_floor"])
            for field in ("mean_violation", "floor"):
                record = copy.deepcopy(shipped)
                record["roster"][pde][seed][field] *= 1.01
                problems = recount.fno(record)
                assert problems == [f"roster/{pde}/{seed}/{field} is "
                                    f"{record['roster'][pde][seed][field]!r}, but the cases of "
                                    f"checkpoint {checkpoint['name']} give {subject[field]!r}"]


def test_the_fault_design_is_recounted_from_the_trials() -> None:
    """``permutation_seeds`` is the distinct seeds the control's and mutants' trials hold,
    each of their (subject, seed) cells appears once, each sweep level holds every subject
    once with seed 0; a seed count edited with its trials' seeds still fails their cells."""
    shipped = read_json(ROOT / SCIML / "mgn_faults.json")
    assert shipped["permutation_seeds"] == 5
    assert len(shipped["subjects"]) == 6
    assert {len(m["trials"]) for m in shipped["mutants"].values()} == {30}
    record = copy.deepcopy(shipped)
    _seeds(record)
    record["permutation_seeds"] = 4  # the summary made to follow: the cells do not
    problems = recompute_faults.recount(record)
    assert problems[0].startswith("control/trials hold (subject, seed) cells [(0, 3), ")
    assert {p.split("/trials hold")[0] for p in problems if "/trials hold" in p} == {
        "control", *(f"mutants/{k}" for k in shipped["mutants"])}
    record = copy.deepcopy(shipped)
    record["scale_sweep"]["2"]["trials"][3]["seed"] = 1
    problems = recompute_faults.recount(record)
    assert problems[0] == ("scale_sweep/2/trials hold (subject, seed) cells [(3, 1)] beyond "
                           "and lack [(3, 0)] of the design's 6, each once")


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shipped")
    for name in ("claims", "manifests", "locks"):
        shutil.copytree(ROOT / name, root / name)
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


@pytest.mark.parametrize(("name", "edit", "field"), [
    ("ledger.json", _count, "counts/fno-periodic-translation"),
    ("pinn.json", _ratio, "subjects/0/mr_b_ratio"),
    ("pinn.json", _pinn_summary, "summary/heat/mr_b/passes"),
    ("fno.json", _admitted, "roster/burgers_admitted"),
    ("fno.json", _roster_mean, "roster/heat/0/mean_violation"),
    ("mgn_faults.json", _seeds, "permutation_seeds"),
    ("unified.json", _mgn_copy, "entries/0/detections/conservation")])
def test_verify_fails_naming_the_file_and_field(repository: Path, tmp_path: Path, name: str,
                                                edit: Callable[[dict[str, Any]], None],
                                                field: str) -> None:
    """The edit re-hashed everywhere (run manifest and sha256 manifests), so only the
    recount can see it."""
    from kit.claims.verify import verify

    path = repository / SCIML / name
    original = path.read_bytes()
    manifest = repository / SCIML / "run-manifest.json"
    manifest_bytes = manifest.read_bytes()
    record = json.loads(original)
    edit(record)
    try:
        path.write_bytes(canonical_json(record))
        listing = json.loads(manifest_bytes)
        listing["files"][name] = sha256(path)
        manifest.write_bytes(canonical_json(listing))
        write_manifests(repository)
        out = tmp_path / "out.json"
        assert verify(repository, json_out=out) == 1
        problems = json.loads(out.read_text())["problems"]
        assert any(str(path) in p and field in p for p in problems), problems
        assert not any("sha256" in p for p in problems), problems
    finally:
        path.write_bytes(original)
        manifest.write_bytes(manifest_bytes)
        write_manifests(repository)


def test_the_evaluated_frames_are_the_first_held_out_frames(tmp_path: Path) -> None:
    """``mgn_faults.json``'s frames against ``mgn.json``'s held-out frames: shifted by one
    they are named, and an evidence folder holding them refuses the record."""
    from kit.errors import RecountError
    from kit.sciml.recompute import SciEvidence

    faults, mgn = (read_json(ROOT / SCIML / name) for name in ("mgn_faults.json", "mgn.json"))
    assert recompute_faults.eval_frames(faults, mgn) == []
    faults["eval_frames"] = [f + 1 for f in faults["eval_frames"]]
    [problem] = recompute_faults.eval_frames(faults, mgn)
    assert problem.startswith("eval_frames [40, 41] are not the first held-out frames")
    faults["eval_frames"] = [39, 40, 41]  # one more than the code evaluates
    assert recompute_faults.eval_frames(faults, mgn) != []
    shutil.copy(ROOT / SCIML / "mgn.json", tmp_path)
    (tmp_path / "mgn_faults.json").write_text(json.dumps(faults))
    with pytest.raises(RecountError, match="eval_frames"):
        SciEvidence(tmp_path).json("mgn_faults.json")
