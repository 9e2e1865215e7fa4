"""Seeded faults of the MeshGraphNet pipeline, detected by the study's own relations.

The pipeline under test is one network step followed by the boundary conditions a
DeepMind rollout imposes: inflow, wall and obstacle nodes keep the boundary values of the
input frame (the prescribed inflow, no-slip as the simulated reference carries it). A
mutant changes one part of it:

    boundary condition   BC_zero_inflow (inflow imposed as 0), BC_nonzero_wall (walls
                         imposed at the mean inflow speed, tangential)
    mesh adjacency       MA_drop_edges (a seeded 10% of the edge list dropped),
                         MA_permute_edges (a seeded 10% of edges get another edge's receiver)
    normalisation        NS_double_scale (the denormalised update times s, canonical 2),
                         NS_skip_denorm (the normalised update added as if it were physical)
    temporal             TR_sign_flip (the update subtracted), TR_double_step (two steps)
    physical channel     PC_swap_xy (output channels swapped), PC_zero_vy (v_y zeroed on the
                         first p of the nodes in index order, canonical p = 1)
    adversarial          ADV_frozen (the update skipped: the next state is the current one),
                         ADV_uniform_offset (5% of the mean inflow added to every node's
                         x-velocity after the boundary conditions: it breaks no-slip, but an
                         affine change is P1-divergence-free, mirror-symmetric and
                         label-free), built to share every detector's invariance

Edge mutants act on edge positions, which a node relabelling keeps, so they stay
permutation-equivariant; PC_zero_vy with p < 1 selects nodes by index and does not.

Detectors, thresholds predeclared (the paper's Sec. 5.3-5.4, before any run here):

- node permutation: V = max |g(P x) - P g(x)| / max |g(x)| > ``PERMUTATION_THRESHOLD``;
- conservation (reference-relative P1 continuity): the area-weighted RMS of the P1
  divergence over every triangle of the predicted next state over that of the reference
  next state > ``CONSERVATION_THRESHOLD``;
- mirror-y: the mirror violation ||g(M x) - M g(x)|| / ||g(x) - x|| (nearest-neighbour M,
  relative to the predicted update, as in the OOD stress probe) rising by more than
  ``MIRROR_THRESHOLD`` relative to the unmutated pipeline's on the same trial.

A trial is one (subject, permutation seed) cell; its metrics are the maxima over the first
``EVAL_FRAMES`` held-out frames; the conservation and mirror detectors read the pipeline on
the permuted graph mapped back (g_k(x) = P^-1 g(P x)), so each seed is its own trial.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from kit.runfolder import Progress
from kit.sciml.cards import fixed_tolerance
from kit.sciml.meshes import HEIGHT, INFLOW, NORMAL, OBSTACLE, WALL
from kit.sciml.mgn import directed_edges, permute_graph
from kit.sciml.operator_floor import barycentric_gradients
from kit.sciml.stats import rate, stat_scores

Array = np.ndarray[Any, Any]
PERMUTATION_THRESHOLD = fixed_tolerance("mgn-node-permutation")
CONSERVATION_THRESHOLD = 1.0 + fixed_tolerance("mgn-continuity-guard")
MIRROR_THRESHOLD = 0.5
EVAL_FRAMES = 2
EDGE_FRACTION = 0.1
EDGE_SEED = 7
SCALES = (1.1, 1.25, 1.5, 2.0, 4.0)
FRACTIONS = (0.25, 0.5, 0.75, 0.85, 0.9, 0.95, 0.99, 1.0)
DETECTORS = ("permutation", "conservation", "mirror")


@dataclass(frozen=True)
class Mutant:
    name: str
    fault_class: str
    severity: float = 1.0


CATALOGUE = (
    Mutant("BC_zero_inflow", "boundary-condition"),
    Mutant("BC_nonzero_wall", "boundary-condition"),
    Mutant("MA_drop_edges", "mesh-adjacency"),
    Mutant("MA_permute_edges", "mesh-adjacency"),
    Mutant("NS_double_scale", "normalisation", 2.0),
    Mutant("NS_skip_denorm", "normalisation"),
    Mutant("TR_sign_flip", "temporal"),
    Mutant("TR_double_step", "temporal"),
    Mutant("PC_swap_xy", "physical-channel"),
    Mutant("PC_zero_vy", "physical-channel", 1.0),
)
ADVERSARIAL = (Mutant("ADV_frozen", "adversarial"),
               Mutant("ADV_uniform_offset", "adversarial", 0.05))
CONTROL = Mutant("none", "control")


@dataclass(frozen=True)
class Graph:
    """One frame's inputs as numpy arrays (positions, velocity, node types, edges)."""

    pos: Array
    velocity: Array
    types: Array
    edges: Array

    def permuted(self, perm: Array) -> Graph:
        return Graph(*permute_graph(perm, self.pos, self.velocity, self.types, self.edges))

    def with_velocity(self, velocity: Array) -> Graph:
        return replace(self, velocity=velocity)


def _edge_subset(count: int) -> Array:
    rng = np.random.default_rng(EDGE_SEED)
    return np.sort(rng.choice(count, size=max(1, int(EDGE_FRACTION * count)), replace=False))


def _edges(mutant: Mutant, edges: Array) -> Array:
    if mutant.name == "MA_drop_edges":
        keep = np.ones(edges.shape[1], bool)
        keep[_edge_subset(edges.shape[1])] = False
        return edges[:, keep]
    if mutant.name == "MA_permute_edges":
        chosen = _edge_subset(edges.shape[1])
        moved = edges.copy()
        moved[1, chosen] = edges[1, np.roll(chosen, 1)]
        return moved
    return edges


def _update(net: Any, graph: Graph, mutant: Mutant) -> tuple[Array, Array]:
    """(denormalised update, normalised update) of the network on this graph."""
    import torch

    with torch.no_grad():
        raw = net(torch.tensor(graph.pos), torch.tensor(graph.velocity),
                  torch.tensor(graph.types), torch.tensor(_edges(mutant, graph.edges)))
        return net.target_norm.inverse(raw).numpy(), raw.numpy()


def predict(net: Any, graph: Graph, mutant: Mutant = CONTROL) -> Array:
    """The (mutated) pipeline's next velocity on one graph."""
    update, raw = _update(net, graph, mutant)
    if mutant.name == "NS_double_scale":
        update = mutant.severity * update
    elif mutant.name == "NS_skip_denorm":
        update = raw
    elif mutant.name == "TR_sign_flip":
        update = -update
    out = graph.velocity + update
    if mutant.name == "TR_double_step":
        out = graph.velocity + _update(net, graph, mutant)[0]
        out = out + _update(net, graph.with_velocity(_impose(graph, out, CONTROL)), mutant)[0]
    elif mutant.name == "ADV_frozen":
        out = graph.velocity.copy()
    out = _impose(graph, out, mutant)
    if mutant.name == "PC_swap_xy":
        out = out[:, ::-1].copy()
    elif mutant.name == "PC_zero_vy":
        out[: round(mutant.severity * len(out)), 1] = 0.0
    elif mutant.name == "ADV_uniform_offset":
        out[:, 0] += mutant.severity * _inflow_speed(graph)
    return np.asarray(out)


def _inflow_speed(graph: Graph) -> float:
    return float(np.abs(graph.velocity[graph.types == INFLOW, 0]).mean())


def _impose(graph: Graph, out: Array, mutant: Mutant) -> Array:
    """Boundary nodes keep the boundary values the input frame carries (inflow, walls and
    obstacle: the reference's own, which interpolation leaves close to, not exactly at,
    no-slip), unless the mutant imposes other values."""
    out = out.copy()
    boundary = np.isin(graph.types, (INFLOW, WALL, OBSTACLE))
    out[boundary] = graph.velocity[boundary]
    if mutant.name == "BC_zero_inflow":
        out[graph.types == INFLOW] = 0.0
    elif mutant.name == "BC_nonzero_wall":
        out[graph.types == WALL] = [_inflow_speed(graph), 0.0]
    return out


class Divergence:
    """The P1 divergence per triangle of a nodal velocity: over every triangle, or with
    ``interior`` only over those without a boundary node."""

    def __init__(self, pos: Array, cells: Array, types: Array, interior: bool = False) -> None:
        self.cells = cells[np.all(types[cells] == NORMAL, axis=1)] if interior else cells
        p = pos[self.cells].transpose(2, 1, 0)  # (2, 3, K)
        self.area = 0.5 * np.abs((p[0, 1] - p[0, 0]) * (p[1, 2] - p[1, 0])
                                 - (p[0, 2] - p[0, 0]) * (p[1, 1] - p[1, 0]))
        self.grad = barycentric_gradients(p, self.area)  # (K, 3, 2)

    def __call__(self, velocity: Array) -> Array:
        return np.asarray(np.einsum("kad,kad->k", self.grad, velocity[self.cells]))

    def rms(self, velocity: Array) -> float:
        d = self(velocity)
        return float(np.sqrt((self.area * d * d).sum() / self.area.sum()))

    def gradient_rms(self, velocity: Array) -> float:
        """Area-weighted RMS of the Frobenius norm of the P1 velocity gradient."""
        g = np.einsum("kad,kae->kde", self.grad, velocity[self.cells])
        return float(np.sqrt((self.area * (g * g).sum((1, 2))).sum() / self.area.sum()))


def nearest_reflection(pos: Array, height: float = HEIGHT) -> Array:
    """Nearest-neighbour source node of every reflected node (y -> height - y): the
    mapping of the approximate mirror relations (``meshes.mirror_map`` is the exact one)."""
    from scipy.spatial import cKDTree

    reflected = pos * np.array([1.0, -1.0]) + np.array([0.0, height])
    return np.asarray(cKDTree(pos).query(reflected)[1])


def reflect(field: Array, source: Array) -> Array:
    """A velocity field reflected through a node mapping (v_y negated)."""
    return np.asarray(field[source] * np.array([1.0, -1.0]))


def step(net: Any, graph: Graph) -> Array:
    """One network step on a graph, as arrays."""
    import torch

    with torch.no_grad():
        return np.asarray(net.step(*[torch.tensor(a) for a in (
            graph.pos, graph.velocity, graph.types, graph.edges)]).numpy())


def permutation_violation(net: Any, graph: Graph, seed: int, base: Array) -> float:
    """max |f(P x) - P f(x)| / max |f(x)| for the seeded relabelling P (base = f(x))."""
    perm = np.random.default_rng(seed).permutation(len(graph.pos))
    follow = step(net, graph.permuted(perm))
    return float(np.abs(follow - base[perm]).max() / np.abs(base).max())


@dataclass
class Trial:
    """One (subject, permutation seed) cell of one mutant."""

    subject: int
    seed: int
    permutation: float
    conservation: float
    mirror: float

    def detected(self, baseline_mirror: float) -> dict[str, bool]:
        change = (self.mirror - baseline_mirror) / baseline_mirror
        return {"permutation": self.permutation > PERMUTATION_THRESHOLD,
                "conservation": self.conservation > CONSERVATION_THRESHOLD,
                "mirror": change > MIRROR_THRESHOLD}


def run_trial(net: Any, frames: list[tuple[Graph, Array]], mutant: Mutant, seed: int,
              divergence: Divergence, source: Array) -> tuple[float, float, float]:
    """(permutation V, conservation ratio, mirror violation), maxima over the frames."""
    perm_v, ratio, mirror = 0.0, 0.0, 0.0
    for graph, truth in frames:
        n = len(graph.pos)
        perm = np.random.default_rng(seed).permutation(n)
        inverse = np.empty_like(perm)
        inverse[perm] = np.arange(n)
        base = predict(net, graph, mutant)
        moved = predict(net, graph.permuted(perm), mutant)
        perm_v = max(perm_v, float(np.abs(moved - base[perm]).max() / np.abs(base).max()))
        g = moved[inverse]
        ratio = max(ratio, divergence.rms(g) / divergence.rms(truth))
        mirrored = graph.with_velocity(reflect(graph.velocity, source))
        g_mirror = predict(net, mirrored.permuted(perm), mutant)[inverse]
        mirror = max(mirror, _relative(float(np.linalg.norm(g_mirror - reflect(g, source))),
                                       float(np.linalg.norm(g - graph.velocity))))
    return perm_v, ratio, mirror


def _relative(violation: float, scale: float) -> float:
    """violation / scale; a zero violation of a zero update is 0 (nothing to compare)."""
    if scale > 0:
        return float(violation / scale)
    return 0.0 if violation == 0 else float(np.finfo(np.float64).max)


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per detector (and ``any``) the trials detected, with Wilson intervals."""
    def detected(hits: int) -> dict[str, Any]:
        return rate(hits, len(rows), count="detected", value=False)

    out = {d: detected(sum(r["detected"][d] for r in rows)) for d in DETECTORS}
    out["any"] = detected(sum(any(r["detected"].values()) for r in rows))
    return out


def _evaluation_frames(data: dict[str, Array], heldout: list[int]
                       ) -> tuple[list[tuple[Graph, Array]], Divergence, Array]:
    """The evaluated (graph, next state) pairs, the divergence operator and the mirror map."""
    edges = directed_edges(data["cells"])
    types = data["node_type"][:, 0].astype(np.int64)
    divergence = Divergence(data["mesh_pos"], data["cells"], types)
    frames = [(Graph(data["mesh_pos"], data["velocity"][f], types, edges),
               data["velocity"][f + 1]) for f in heldout[:EVAL_FRAMES]]
    return frames, divergence, nearest_reflection(data["mesh_pos"])


def run_catalogue(nets: list[tuple[dict[str, Any], Any]], data: dict[str, Array],
                  heldout: list[int], permutation_seeds: int = 5) -> dict[str, Any]:
    """Replay the catalogue, the adversarial mutants and both sweeps over the roster."""
    frames, divergence, source = _evaluation_frames(data, heldout)
    seeds = list(range(permutation_seeds))
    baseline: dict[tuple[int, int], float] = {}
    control_trials = []
    for index, (_, net) in enumerate(nets):
        for seed in seeds:
            trial = Trial(index, seed, *run_trial(net, frames, CONTROL, seed, divergence, source))
            baseline[(index, seed)] = trial.mirror
            control_trials.append(trial)
    progress = Progress("sciml: fault catalogue",
                        len(CATALOGUE + ADVERSARIAL) + len(SCALES) + len(FRACTIONS))

    def replay(mutant: Mutant, cell_seeds: list[int]) -> list[dict[str, Any]]:
        rows = []
        for index, (_, net) in enumerate(nets):
            for seed in cell_seeds:
                trial = Trial(index, seed, *run_trial(net, frames, mutant, seed, divergence,
                                                      source))
                flags = trial.detected(baseline[(index, seed)])
                rows.append({**asdict(trial), "detected": flags,
                             "mirror_change": (trial.mirror - baseline[(index, seed)])
                             / baseline[(index, seed)]})
        progress.step(f"{mutant.name} s={mutant.severity:g}")
        return rows

    mutants = {}
    for mutant in CATALOGUE + ADVERSARIAL:
        rows = replay(mutant, seeds)
        by_config = {name: summarise([r for r in rows if (r["subject"] < 4) == (name == "seeds")])
                     for name in ("seeds", "variants")} if len(nets) > 4 else {}
        mutants[mutant.name] = {**asdict(mutant), "trials": rows, "summary": summarise(rows),
                                "by_configuration": by_config}
    control = [{**asdict(t), "detected": t.detected(t.mirror), "mirror_change": 0.0}
               for t in control_trials]

    def level(mutant: Mutant) -> dict[str, Any]:
        rows = replay(mutant, seeds[:1])
        return {**summarise(rows), "trials": rows}

    scale_sweep = {f"{s:g}": level(Mutant("NS_double_scale", "normalisation", s))
                   for s in SCALES}
    fraction_sweep = {f"{p:g}": level(Mutant("PC_zero_vy", "physical-channel", p))
                      for p in FRACTIONS}
    return {"thresholds": {"permutation": PERMUTATION_THRESHOLD,
                           "conservation": CONSERVATION_THRESHOLD, "mirror": MIRROR_THRESHOLD},
            "eval_frames": heldout[:EVAL_FRAMES], "permutation_seeds": permutation_seeds,
            "subjects": [s for s, _ in nets], "control": {"trials": control,
                                                          "summary": summarise(control)},
            "mutants": mutants, "scale_sweep": scale_sweep, "fraction_sweep": fraction_sweep,
            "precision_recall": precision_recall(mutants, control)}


def precision_recall(mutants: dict[str, Any], control: list[dict[str, Any]]
                     ) -> dict[str, dict[str, Any]]:
    """Per detector over the executed mutants' trials (positives) and the unmutated
    pipeline's trials (negatives): precision TP/(TP+FP), recall TP/positives, and the
    mutant-level recall (mutants detected on at least one trial)."""
    out = {}
    for d in DETECTORS:
        c = stat_scores([*((r["detected"][d], True) for m in mutants.values()
                            for r in m["trials"]),
                         *((r["detected"][d], False) for r in control)])
        tp, fp, positives = c["true_positives"], c["false_positives"], c["targeted"]
        caught = sum(any(r["detected"][d] for r in m["trials"]) for m in mutants.values())
        out[d] = {"true_positives": tp, "false_positives": fp, "positives": positives,
                  "negatives": len(control),
                  "precision": tp / (tp + fp) if tp + fp else None,
                  "recall": tp / positives, "mutants_caught": caught,
                  "mutants": len(mutants)}
    return out
