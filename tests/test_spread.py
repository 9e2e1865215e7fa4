"""A retrained value against the study's own seed spread (``kit.spread``): inside the
spread of its sibling seeds it is within, outside it (or with no seeds, or with another
structure) it is named."""

from __future__ import annotations

from kit.spread import MIN_SEEDS, judge, siblings

SHIPPED = {"checkpoints": [{"seed": s, "final_loss": loss, "detected": flag}
                           for s, (loss, flag) in enumerate([(0.0013, True), (0.0019, False),
                                                             (0.0016, True), (0.0021, True)])],
           "summary": {"mean_loss": 0.0017}}


def _with(**changes: object) -> dict[str, object]:
    fresh = {"checkpoints": [dict(c) for c in SHIPPED["checkpoints"]],
             "summary": dict(SHIPPED["summary"])}
    for where, value in changes.items():
        index, key = where.split("__")
        fresh["checkpoints"][int(index[1:])][key] = value  # type: ignore[index]
    return fresh


def test_a_value_inside_the_seed_spread_is_within() -> None:
    assert siblings(SHIPPED, ("checkpoints", 0, "final_loss")) == [0.0013, 0.0019, 0.0016,
                                                                   0.0021]
    judged = judge(SHIPPED, _with(c0__final_loss=0.0020))  # moved 7e-4, spread 8e-4
    assert judged.within
    assert judged.moved == 1


def test_a_value_outside_the_seed_spread_is_named() -> None:
    judged = judge(SHIPPED, _with(c2__final_loss=0.0030))  # moved 1.4e-3 > 8e-4
    assert not judged.within
    assert judged.outside.startswith("/checkpoints/2/final_loss moved by 0.0014, outside "
                                     "its seed spread 0.0008 (4 seeds)")


def test_a_flag_is_within_only_where_the_seeds_themselves_vary() -> None:
    assert judge(SHIPPED, _with(c0__detected=False)).within  # seed 1 is False too
    constant = {"trials": [{"detected": True}] * MIN_SEEDS}
    flipped = {"trials": [{"detected": True}] * (MIN_SEEDS - 1) + [{"detected": False}]}
    judged = judge(constant, flipped)
    assert "became False, a value none of its 3 seeds takes" in judged.outside


def test_a_value_with_no_seeds_or_a_changed_structure_is_named() -> None:
    moved = _with()
    moved["summary"] = {"mean_loss": 0.0018}
    assert "has no seed spread" in judge(SHIPPED, moved).outside
    short = {"checkpoints": SHIPPED["checkpoints"][:3], "summary": SHIPPED["summary"]}
    assert "length of /checkpoints changed" in judge(SHIPPED, short).outside
    assert judge(SHIPPED, SHIPPED).within
    assert judge(SHIPPED, SHIPPED).moved == 0


def test_every_value_outside_its_spread_is_counted() -> None:
    fresh = _with(c0__final_loss=0.0030, c1__final_loss=0.0040, c2__final_loss=0.0017)
    judged = judge(SHIPPED, fresh)
    assert (judged.moved, judged.beyond) == (3, 2)
    assert judged.outside.startswith("/checkpoints/0/final_loss")


def test_a_move_within_the_files_replay_bound_is_within() -> None:
    """A rounding-level move of a value all seeds agree on (spread 0) is no finding when
    the file's replay bound admits it; past the bound it is named."""
    zeros = {"trials": [{"v": 0.0}] * 4}
    rounding = {"trials": [{"v": 1.3e-16}] + [{"v": 0.0}] * 3}
    assert judge(zeros, rounding, lambda a, b: abs(a - b) <= 1e-9).within
    assert "outside its seed spread 0" in judge(zeros, rounding).outside
