"""Ranks judged at their ties (``kit.drift.ties``): on the shipped digits evidence, layer
scores moved within the layer bound move ranks, every moved rank lies within the range the
scores allow, a rank moved past it differs, and a summary computed from the tables is
judged by recomputing it from each side's own evidence."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from kit.drift.analysis import ranks_from_layers
from kit.drift.localise import KINDS
from kit.drift.shipped import Evidence
from kit.drift.ties import judge_derived, judge_table, rank_range, revise, table_ranges
from kit.files import canonical_json, load_npz, sha256, write_npz
from kit.paths import ROOT
from kit.tolerance import Bound, Verdict, bound_for, compare_file, load_bounds

SHIPPED = ROOT / "claims/drift/evidence/digits"
LAYER_BOUND = Bound("drift", "score/*layers.npz", atol=5e-7, rtol=1e-5, reason="a test bound")


def test_a_near_tie_allows_both_ranks_and_a_clear_lead_one() -> None:
    clean = np.full((50, 3), 1e-6) + np.linspace(0, 1e-8, 50)[:, None]
    scores = np.array([[1.0e-6, 1.05e-6, 1e-3],    # layer 0 and 1 tie at the noise level
                       [1e-3, 1e-6, 1e-6]])        # layer 0 leads clearly
    low, high = rank_range(scores, clean, np.array([0, 0]), LAYER_BOUND, 0.99)
    assert (low[0], high[0]) == (2, 3)  # the fault layer 2 is ahead; layer 1 may be
    assert (low[1], high[1]) == (1, 1)
    tight = Bound("drift", "x", atol=1e-9, rtol=0.0, reason="tight")
    low, high = rank_range(scores, clean, np.array([0, 0]), tight, 0.99)
    assert (low[0], high[0]) == (3, 3)  # 1.05e-6 is then certainly ahead of 1.0e-6


@pytest.fixture(scope="module")
def moved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A fresh evidence folder: the shipped score and split records with every layer score
    moved by up to 1e-7 (seeded) and the primary table's ranks recomputed from them."""
    fresh = tmp_path_factory.mktemp("fresh")
    for part in ("score", "split"):
        shutil.copytree(SHIPPED / part, fresh / part)
    ev = Evidence(SHIPPED)
    rng = np.random.default_rng(7)
    layers = {k: (v + rng.uniform(-1e-7, 1e-7, v.shape)).astype(np.float32)
              if v.dtype.kind == "f" else v for k, v in ev.layers.items()}
    primary = ev.record["tables"]["cand-" + ev.record["primary_condition"]]["path"]
    table = dict(load_npz(SHIPPED / primary))
    ranks = ranks_from_layers(table, layers, ev.models, ev.quantile)
    for kind in KINDS:
        table[f"rank_{kind}"] = ranks[kind]
    write_npz(fresh / "score/layers.npz", layers)
    write_npz(fresh / primary, table)
    record = json.loads((fresh / "score/score.json").read_bytes())
    record["layers"]["sha256"] = sha256(fresh / "score/layers.npz")
    record["tables"]["cand-" + record["primary_condition"]]["sha256"] = sha256(fresh / primary)
    (fresh / "score/score.json").write_bytes(canonical_json(record))
    return fresh, Path(primary)


def test_ranks_moved_by_layer_scores_within_their_bound_lie_within_their_ranges(
        moved: tuple[Path, Path]) -> None:
    fresh, primary = moved
    shipped, found = load_npz(SHIPPED / primary), load_npz(fresh / primary)
    changed = sum(int(np.count_nonzero(shipped[f"rank_{k}"] != found[f"rank_{k}"]))
                  for k in KINDS)
    assert changed > 100  # the noise-level layers do move ranks
    ev = Evidence(SHIPPED)
    ranges = table_ranges(shipped, ev.layers, ev.models, LAYER_BOUND, ev.quantile)
    fault = shipped["fault"] != -1
    for kind in KINDS:
        low, high = ranges[kind]
        assert np.all((found[f"rank_{kind}"] >= low) & (found[f"rank_{kind}"] <= high))
        assert np.mean((low == high)[fault]) > 0.3  # at this bound 32% to 48% stay decided


def test_a_case_table_is_judged_at_its_ties_and_a_rank_past_them_differs(
        moved: tuple[Path, Path]) -> None:
    fresh, primary = moved
    bounds = load_bounds()
    name = primary.as_posix()
    plain = compare_file(fresh / name, SHIPPED / name, name, bound_for(bounds, "drift", name))
    assert plain.verdict == "differs"
    assert "rank_" in plain.where
    judged = judge_table(fresh, SHIPPED, name, bounds, plain)
    assert judged.verdict == "within tolerance", judged.where
    assert judged.detail["ranks_moved"] > 100
    assert judged.detail["ranks_judged_by"] == ["fresh", "shipped"]
    table = dict(load_npz(fresh / name))
    ev = Evidence(SHIPPED)
    low, high = table_ranges(table, load_npz(fresh / "score/layers.npz"), ev.models,
                             bound_for(bounds, "drift", "score/layers.npz"), ev.quantile
                             )["direct"]
    row = int(np.flatnonzero((low == high) & (high >= 1) & (high < 5))[0])
    table["rank_direct"] = table["rank_direct"].copy()
    table["rank_direct"][row] += 3  # past what the scores allow
    broken = fresh.parent / "broken"
    shutil.copytree(fresh, broken)
    write_npz(broken / name, table)
    plain = compare_file(broken / name, SHIPPED / name, name, bound_for(bounds, "drift", name))
    judged = judge_table(broken, SHIPPED, name, bounds, plain)
    assert judged.verdict == "differs"
    assert "rank_" in judged.where
    assert "outside" in judged.where


def test_a_grid_table_without_the_fresh_layer_scores_stays_differing(
        moved: tuple[Path, Path]) -> None:
    fresh, _ = moved
    name = "score/cases/cand-rot5-bilinear.npz"
    table = dict(load_npz(SHIPPED / name))
    table["rank_direct"] = table["rank_direct"].copy()
    table["rank_direct"][np.flatnonzero(table["rank_direct"])[0]] += 1
    grid = fresh.parent / "grid"
    shutil.copytree(fresh, grid)
    write_npz(grid / name, table)
    bounds = load_bounds()
    plain = compare_file(grid / name, SHIPPED / name, name, bound_for(bounds, "drift", name))
    assert (grid / "score" / "grid-layers.npz").is_file()  # the evidence ships them since 7 Dec
    assert judge_table(grid, SHIPPED, name, bounds, plain).verdict == "within tolerance"
    (grid / "score" / "grid-layers.npz").unlink()  # a fresh run made before the file existed
    judged = judge_table(grid, SHIPPED, name, bounds, plain)
    assert judged.verdict == "differs"
    assert "ships no layer scores" in judged.where


def test_a_summary_moves_only_through_its_inputs_or_differs(moved: tuple[Path, Path]) -> None:
    fresh, _ = moved
    name = "sensitivity/summary.json"
    (fresh / "sensitivity").mkdir(exist_ok=True)
    (fresh / name).write_bytes(canonical_json(Evidence(fresh).sensitivity))
    bounds = load_bounds()
    plain = compare_file(fresh / name, SHIPPED / name, name, bound_for(bounds, "drift", name))
    assert plain.verdict == "differs"  # the primary row's top-1 moved with the ranks
    judged = judge_derived(fresh, SHIPPED, name, bounds, plain, inputs_within=True)
    assert judged.verdict == "within tolerance"
    assert "through its inputs" in judged.bound
    assert judge_derived(fresh, SHIPPED, name, bounds, plain, False).verdict == "differs"
    edited = json.loads((fresh / name).read_bytes())
    edited["primary"]["top1"]["direct"] += 0.01  # a value its own tables do not give
    (fresh / name).write_bytes(canonical_json(edited))
    plain = compare_file(fresh / name, SHIPPED / name, name, bound_for(bounds, "drift", name))
    judged = judge_derived(fresh, SHIPPED, name, bounds, plain, inputs_within=True)
    assert judged.verdict == "differs"
    assert "recomputed from the fresh evidence" in judged.where


def test_revise_leaves_other_verdicts_alone() -> None:
    kept = [Verdict("fault/fault.json", "differs", where="x"),
            Verdict("score/score.json", "identical")]
    assert revise(kept, SHIPPED, SHIPPED, load_bounds()) == kept
