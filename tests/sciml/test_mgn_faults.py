"""The seeded-fault pipeline: each mutant does what its name says, the edge mutants stay
permutation-equivariant, index-selected zeroing does not, the adversarial offset leaves the
interior P1 divergence unchanged, and the P1 operator is exact on affine fields. Untrained
network on a coarse cylinder mesh with an analytic velocity field."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kit.sciml import mgn_faults as mf
from kit.sciml.meshes import INFLOW, NORMAL, OBSTACLE, WALL, cylinder_mesh
from kit.sciml.mgn import build, directed_edges


@pytest.fixture(scope="module")
def case() -> tuple[Any, mf.Graph, mf.Divergence, np.ndarray[Any, Any]]:
    import torch

    torch.set_num_threads(1)
    mesh = cylinder_mesh(max_area=2e-3)
    x, y = mesh.pos[:, 0], mesh.pos[:, 1]
    velocity = np.stack([1.0 + 0.2 * np.sin(3 * x) * np.cos(5 * y), 0.1 * np.cos(4 * x)], 1)
    types = mesh.node_type.astype(np.int64)
    graph = mf.Graph(mesh.pos, velocity, types, directed_edges(mesh.cells))
    net = build(latent=8, steps=1, seed=0).double().eval()
    with torch.no_grad():
        tensors = [torch.tensor(a) for a in (graph.pos, velocity, types, graph.edges)]
        net(*tensors, accumulate=True)
        net.target_norm(torch.tensor(0.01 * velocity), accumulate=True)
    return net, graph, mf.Divergence(mesh.pos, mesh.cells, types), velocity


def test_interior_divergence_leaves_out_boundary_triangles(case: Any) -> None:
    _, graph, full, _ = case
    interior = mf.Divergence(graph.pos, full.cells, graph.types, interior=True)
    assert np.all(graph.types[interior.cells] == NORMAL)
    assert len(full.cells) > len(interior.cells) > 0


def test_p1_divergence_is_exact_on_affine_fields(case: Any) -> None:
    _, graph, divergence, _ = case
    x, y = graph.pos[:, 0], graph.pos[:, 1]
    solenoidal = np.stack([2 * x + 3 * y + 1, 5 * x - 2 * y], 1)
    np.testing.assert_allclose(divergence(solenoidal), 0.0, atol=1e-12)
    np.testing.assert_allclose(divergence(np.stack([3 * x, y], 1)), 4.0, rtol=1e-12)
    assert divergence.rms(np.stack([x * x, 0 * y], 1)) > 0.1  # not exact beyond affine


def test_boundary_conditions_and_channel_mutants(case: Any) -> None:
    net, graph, _, velocity = case
    base = mf.predict(net, graph)
    inflow, wall = graph.types == INFLOW, graph.types == WALL
    boundary = inflow | wall | (graph.types == OBSTACLE)
    np.testing.assert_array_equal(base[boundary], velocity[boundary])  # kept from the input
    zero_inflow = mf.predict(net, graph, mf.Mutant("BC_zero_inflow", "boundary-condition"))
    assert np.all(zero_inflow[inflow] == 0.0)
    np.testing.assert_array_equal(zero_inflow[~inflow], base[~inflow])
    wall_moving = mf.predict(net, graph, mf.Mutant("BC_nonzero_wall", "boundary-condition"))
    assert np.all(wall_moving[wall, 0] > 0.5)
    swapped = mf.predict(net, graph, mf.Mutant("PC_swap_xy", "physical-channel"))
    np.testing.assert_array_equal(swapped, base[:, ::-1])
    frozen = mf.predict(net, graph, mf.Mutant("ADV_frozen", "adversarial"))
    np.testing.assert_array_equal(frozen[graph.types == NORMAL], velocity[graph.types == NORMAL])
    flipped = mf.predict(net, graph, mf.Mutant("TR_sign_flip", "temporal"))
    fluid = graph.types == NORMAL
    np.testing.assert_allclose(flipped[fluid] - velocity[fluid], velocity[fluid] - base[fluid],
                               atol=1e-12)
    scaled = mf.predict(net, graph, mf.Mutant("NS_double_scale", "normalisation", 4.0))
    np.testing.assert_allclose(scaled[fluid] - velocity[fluid], 4 * (base - velocity)[fluid],
                               atol=1e-12)


def test_which_mutants_keep_permutation_equivariance(case: Any) -> None:
    net, graph, divergence, velocity = case
    source = mf.nearest_reflection(graph.pos)
    frames = [(graph, velocity)]

    def violation(mutant: mf.Mutant) -> float:
        return mf.run_trial(net, frames, mutant, 3, divergence, source)[0]

    for name in ("none", "MA_drop_edges", "MA_permute_edges", "TR_double_step"):
        assert violation(mf.Mutant(name, "x")) < 1e-10, name
    assert violation(mf.Mutant("PC_zero_vy", "physical-channel", 0.5)) > 1e-3
    assert violation(mf.Mutant("PC_zero_vy", "physical-channel", 1.0)) < 1e-10
    # the edge mutants change the output: they are faults, not no-ops
    base = mf.predict(net, graph)
    update = np.abs(base - velocity)[graph.types == NORMAL].max()
    for name in ("MA_drop_edges", "MA_permute_edges"):
        change = np.abs(mf.predict(net, graph, mf.Mutant(name, "x")) - base).max()
        assert change > 1e-5 * update, name  # far above rounding (1e-16)


def test_the_adversarial_offset_is_invisible_to_continuity(case: Any) -> None:
    net, graph, divergence, velocity = case
    source = mf.nearest_reflection(graph.pos)
    _, base_ratio, _ = mf.run_trial(net, [(graph, velocity)], mf.CONTROL, 0, divergence, source)
    _, ratio, _ = mf.run_trial(net, [(graph, velocity)],
                               mf.Mutant("ADV_uniform_offset", "adversarial", 0.05), 0,
                               divergence, source)
    assert ratio == pytest.approx(base_ratio, rel=1e-9)
    skip = mf.run_trial(net, [(graph, velocity)], mf.Mutant("NS_skip_denorm", "x"), 0,
                        divergence, source)[1]
    assert abs(skip - base_ratio) > 1e-3 * base_ratio
    # a boundary-condition fault shows in the divergence over every triangle
    inflow = mf.run_trial(net, [(graph, velocity)], mf.Mutant("BC_zero_inflow", "x"), 0,
                          divergence, source)[1]
    assert inflow > 1.05 * base_ratio


def test_detection_thresholds_and_precision_recall() -> None:
    trial = mf.Trial(0, 0, permutation=2e-5, conservation=1.4, mirror=0.3)
    assert trial.detected(0.2) == {"permutation": True, "conservation": False, "mirror": False}
    assert trial.detected(0.19)["mirror"]
    rows = [{"detected": {"permutation": p, "conservation": c, "mirror": False}}
            for p, c in ((True, False), (False, True), (False, False))]
    control = [{"detected": {"permutation": False, "conservation": True, "mirror": False}}]
    pr = mf.precision_recall({"a": {"trials": rows[:2]}, "b": {"trials": rows[2:]}}, control)
    assert pr["permutation"]["precision"] == 1.0
    assert pr["permutation"]["recall"] == pytest.approx(1 / 3)
    assert pr["conservation"]["precision"] == 0.5
    assert pr["mirror"]["precision"] is None
    assert pr["conservation"]["mutants_caught"] == 1
