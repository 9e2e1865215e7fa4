"""Recount, never read, for the drift evidence's records besides the bootstrap summaries
(``kit.drift.recount_records``): the score summary and the rotation grid's summary are
recounted leaf for leaf, the split's derived fields against its rows, the labels, the
fault count and the replay's verdict against its own lists and the files it compared
against the shipped run manifest; each edited alone is named,
and verify fails on one re-hashed into a copy of the evidence."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from kit.drift import recount_records
from kit.drift.shipped import Evidence
from kit.paths import ROOT
from kit.values import contradictions
from tests.conftest import verify_edited_json

DIGITS = ROOT / "claims" / "drift" / "evidence" / "digits"


class _Edited(Evidence):
    """The shipped evidence with one record edited in memory."""

    def __init__(self) -> None:
        super().__init__(DIGITS)
        self.edits: dict[str, Any] = {}

    def json(self, relative: str) -> Any:
        if relative in self.edits:
            return self.edits[relative]
        return super().json(relative)


@pytest.fixture(scope="module")
def ev() -> _Edited:
    return _Edited()


def _leaves(node: Any, path: str = "") -> list[str]:
    if isinstance(node, dict):
        return [leaf for k in node for leaf in _leaves(node[k], f"{path}/{k}")]
    if isinstance(node, list):
        return [leaf for i, x in enumerate(node) for leaf in _leaves(x, f"{path}/{i}")]
    return [path]


def test_the_shipped_records_agree_with_their_recounts(ev: _Edited) -> None:
    ev.edits = {}
    assert recount_records.problems(ev) == []


@pytest.mark.parametrize("name", ["score/summary.json", "sensitivity/summary.json"])
def test_every_leaf_of_a_summary_has_its_recount(ev: _Edited, name: str) -> None:
    """The recount gives every field the stored summary holds, so no field is read on
    trust (an edit of any leaf is a contradiction, as the next tests show for some)."""
    ev.edits = {}
    recount = {"score/summary.json": "score_summary_of"}.get(name)
    if recount:
        from kit.drift import ties
        expected = getattr(ties, recount)(ev)
    else:
        expected = ev.sensitivity
    stored = ev.json(name)
    assert sorted(_leaves(stored)) == sorted(_leaves(expected))
    assert len(_leaves(stored)) > 20


def _set(record: Any, path: str, value: Any) -> Any:
    edited = copy.deepcopy(record)
    keys = path.split("/")
    here = edited
    for key in keys[:-1]:
        here = here[int(key) if isinstance(here, list) else key]
    here[int(keys[-1]) if isinstance(here, list) else keys[-1]] = value
    return edited


@pytest.mark.parametrize(("name", "path", "value"), [
    ("score/summary.json", "primary/mixed/auroc", 0.5),
    ("score/summary.json", "accuracy/resnet20/accuracy/count", 590),
    ("sensitivity/summary.json", "primary/difference_pts", 99.0),
    ("split/split.json", "reduced_positions/0", 7),
    ("split/split.json", "counts/heldout", 299),
    ("split/split.json", "overlap", 1),
    ("score/score.json", "labels/0", 9),
    ("fault/fault.json", "count", 53),
    ("replay.json", "identical", False),
    ("replay.json", "differing_count", 3),
    ("replay.json", "machines/same", False),
    ("replay.json", "compared", 2979),
])
def test_each_record_field_edited_alone_is_named(ev: _Edited, name: str, path: str,
                                                 value: Any) -> None:
    stored = Evidence(DIGITS).json(name)
    ev.edits = {name: _set(stored, path, value)}
    found = recount_records.problems(ev)
    ev.edits = {}
    assert found, "the edit went unseen"
    assert all(p.startswith(f"{DIGITS / name}: {path}") for p in found), found


def test_a_condition_on_the_reduced_rows_must_hold_the_reduced_positions(ev: _Edited) -> None:
    split = Evidence(DIGITS).json("split/split.json")
    reduced = next(n for n, c in split["conditions"].items() if c["rows"] != "all")
    positions = split["conditions"][reduced]["positions"]
    ev.edits = {"split/split.json": _set(split, f"conditions/{reduced}/positions",
                                         [positions[0] + 1, *positions[1:]])}
    [problem] = recount_records.problems(ev)
    ev.edits = {}
    assert problem.startswith(f"{DIGITS / 'split/split.json'}: conditions/{reduced}/positions/0")


def test_contradictions_take_an_infinity_only_as_itself() -> None:
    """A stored finite value against an infinite recount (and the reverse) contradicts; the
    same infinity on both sides, and NaN on both, agree."""
    inf = float("inf")
    assert contradictions(1.0, inf, "x", "s") != []
    assert contradictions(inf, 1.0, "x", "s") != []
    assert contradictions(-inf, inf, "x", "s") != []
    assert contradictions(inf, inf, "x", "s") == []
    assert contradictions(float("nan"), float("nan"), "x", "s") == []


def test_verify_fails_on_a_summary_field_edited_and_rehashed(tmp_path: Path) -> None:
    """A-124 reads score/summary.json's AUROC: edited there and re-hashed everywhere (run
    manifest and sha256 manifests), only the recount can see it, and verify names it."""
    def edit(record: Any) -> None:
        record["primary"]["mixed"]["auroc"] = 0.5

    code, problems = verify_edited_json(tmp_path, "claims/drift/evidence/digits",
                                        "score/summary.json", edit)
    assert code == 1
    assert not any("sha256" in p for p in problems), problems
    assert any("score/summary.json" in p and "primary/mixed/auroc" in p for p in problems), \
        problems
