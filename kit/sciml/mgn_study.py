"""The MeshGraphNet case study: a trained roster and a PointMLP baseline on the kit's
cylinder flow, the relations the gate admits, the seeded faults and the second task.

- Data: one phiflow training trajectory on the cylinder mesh (``kit.sciml.cylinder``):
  its first ``train_frames`` frame pairs train, the remaining pairs are a temporal
  hold-out; ``heldout_flows`` are further trajectories at other inflow speeds (other
  Reynolds numbers) on the same mesh, never trained on. With ``source`` the trajectories
  come from DeepMind's cylinder_flow files instead (``kit.sciml.deepmind``), each held-out
  one measured on its own mesh.
- Subjects (``kit.sciml.mgn_train``): the MeshGraphNet roster (4 seeds, one wider, one
  deeper) and ``pointmlp`` seeds of the non-message-passing PointMLP, trained alike; with
  ``physicsnemo`` (the interpreter of its environment) also NVIDIA PhysicsNeMo's
  MeshGraphNet at the roster's base size, trained on the same frames through
  ``kit.sciml.physicsnemo_subject``, a second implementation for the same relations.
- Node permutation: ``permutation_seeds`` random relabellings per subject and held-out
  frame; V = max |f(P x) - P f(x)| / max |f(x)|, tolerance ``PERMUTATION_TOLERANCE``.
- Mirror-y on the asymmetric mesh: reflected nodes miss the mesh (mismatch m in median
  edge lengths), so the gate retains it only as an OOD stress probe against its
  nearest-neighbour mapping floor, and every case is read with its domain score D.
  V = ||f(M x) - M f(x)|| / ||f(x) - x||, relative to the predicted update like the exact
  relation, and the floor is the mapping's own error on that update (reflected twice).
- Exact mirror-y on the symmetric channel (``meshes.symmetric_channel``, reflection a
  verified bijection): admitted; V = ||f(M x) - M f(x)|| / ||f(x) - x|| (relative to the
  predicted update) on constructed inputs (``kit.sciml.mgn_exact``).
- P1 continuity: the reference next state's own P1 divergence, against a tolerance of
  ``ABSOLUTE_FRACTION`` of its velocity-gradient scale, decides absolute conservation
  (deferred when the reference's divergence dominates); the reference-relative guard
  (prediction over reference divergence over every triangle; V = the regression
  max(ratio - 1, 0) against ``mgn_faults.CONSERVATION_THRESHOLD`` - 1, the paper's 50%)
  is executed per subject and held-out frame, and
  the interior-only ratio (no boundary node) is recorded beside it.
- One-step relative L2 against the reference next state: a diagnostic, not a verdict.
- Seeded faults (``kit.sciml.mgn_faults``) over the MeshGraphNet roster, and the second
  task (``kit.sciml.second_task``): the gate screens four relations on a compressible
  airfoil case and the admitted one runs on the roster.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from kit.runfolder import Progress
from kit.sciml import mgn_faults, pinned
from kit.sciml.cards import fixed_tolerance, tolerance_fraction
from kit.sciml.cylinder import Flow, trajectory
from kit.sciml.deepmind import study_trajectory
from kit.sciml.gate import APPROXIMATE, HOLDS, GateFindings, decide
from kit.sciml.ledger import Ledger
from kit.sciml.meshes import (
    Mesh,
    channel_symmetry,
    mirror_map,
    placement_mismatch,
    symmetric_channel,
)
from kit.sciml.mgn import directed_edges
from kit.sciml.mgn_exact import EXACT_MIRROR_TOLERANCE, exact_mirror
from kit.sciml.mgn_train import Subject, pointmlp_subjects, roster_subjects, train
from kit.sciml.physicsnemo_subject import Remote
from kit.sciml.second_task import Airfoil, run_second_task
from kit.sciml.verdicts import domain_score, judge

Array = np.ndarray[Any, Any]
PERMUTATION_TOLERANCE = fixed_tolerance("mgn-node-permutation")
# absolute |div u| tolerance: this fraction (1%) of the RMS velocity gradient
ABSOLUTE_FRACTION = tolerance_fraction("mgn-continuity-absolute")
HELDOUT_FLOWS = (Flow(inflow=0.9, frames=10), Flow(inflow=1.1, frames=10))


@dataclass(frozen=True)
class Study:
    """The cards and the shared measuring pieces of one run."""

    ledger: Ledger
    mesh: Mesh
    divergence: mgn_faults.Divergence
    interior: mgn_faults.Divergence
    mismatch: float
    permutation_seeds: int


def _graph(data: dict[str, Array], frame: int) -> mgn_faults.Graph:
    return mgn_faults.Graph(data["mesh_pos"], data["velocity"][frame],
                            data["node_type"][:, 0].astype(np.int64),
                            directed_edges(data["cells"]))


def _mirror(pos: Array, velocity: Array) -> Array:
    """The mirrored field on the mesh by nearest-neighbour mapping."""
    return mgn_faults.reflect(velocity, mgn_faults.nearest_reflection(pos))


def evaluate(study: Study, net: Any, name: str, data: dict[str, Array], frames: list[int],
             tag: str) -> list[dict[str, Any]]:
    """Permutation, mirror OOD, continuity guard and one-step accuracy on some frames."""
    rows = []
    for frame in frames:
        graph = _graph(data, frame)
        base = mgn_faults.step(net, graph)
        truth = data["velocity"][frame + 1]
        case = f"{name}-{tag}-f{frame}"
        violations = []
        for p_seed in range(study.permutation_seeds):
            v = mgn_faults.permutation_violation(net, graph, p_seed, base)
            violations.append(v)
            study.ledger.add(judge("mgn-node-permutation", f"{case}-p{p_seed}", v,
                                   PERMUTATION_TOLERANCE))
        mirrored_out = mgn_faults.step(net, graph.with_velocity(_mirror(graph.pos, graph.velocity)))
        expected = _mirror(graph.pos, base)
        update = base - graph.velocity
        v_mirror = float(np.linalg.norm(mirrored_out - expected) / np.linalg.norm(update))
        floor = mapping_floor(graph.pos, update)
        study.ledger.add(judge("mgn-mirror-y", case, v_mirror, tolerance=max(2 * floor, 1e-12),
                               domain=domain_score(study.mismatch)))
        ratio = study.divergence.rms(base) / study.divergence.rms(truth)
        interior = study.interior.rms(base) / study.interior.rms(truth)
        study.ledger.add(judge("mgn-continuity-guard", case, max(ratio - 1.0, 0.0),
                               fixed_tolerance("mgn-continuity-guard")))
        rows.append({"trajectory": tag, "frame": frame,
                     "one_step_relative_l2": float(np.linalg.norm(base - truth)
                                                   / np.linalg.norm(truth)),
                     "permutation_violations": violations, "mirror_violation": v_mirror,
                     "mirror_mapping_floor": floor, "continuity_ratio": ratio,
                     "continuity_ratio_interior": interior})
    return rows


def mapping_floor(pos: Array, field: Array) -> float:
    """Relative error of reflecting a field twice by the nearest-neighbour mapping: what
    the mapping alone does to it (applied to the predicted update, the metric's scale)."""
    twice = _mirror(pos, _mirror(pos, field))
    return float(np.linalg.norm(twice - field) / np.linalg.norm(field))


def _decide(ledger: Ledger, cards: dict[str, dict[str, Any]], data: dict[str, Array],
            heldout: list[int], study: Study, channel: Mesh) -> dict[str, Any]:
    perm_card, mirror_card = cards["mgn-node-permutation"], cards["mgn-mirror-y"]
    ledger.decide(decide(perm_card, GateFindings(
        {perm_card["preconditions"][0]: HOLDS}, HOLDS, HOLDS, floor=0.0,
        tolerance=PERMUTATION_TOLERANCE)))
    first = _graph(data, heldout[0])
    floor = mapping_floor(first.pos, data["velocity"][heldout[0] + 1] - first.velocity)
    ledger.decide(decide(mirror_card, GateFindings(
        {mirror_card["preconditions"][0]: APPROXIMATE}, APPROXIMATE, APPROXIMATE,
        floor=floor, tolerance=2 * floor,
        notes={"placement mismatch m (median edge lengths)": f"{study.mismatch:.3g}"})))
    exact = cards["mgn-mirror-y-exact"]
    mirror_map(channel)  # raises unless the reflection is a verified bijection
    ledger.decide(decide(exact, GateFindings(
        {exact["preconditions"][0]: HOLDS}, HOLDS, HOLDS, floor=0.0,
        tolerance=EXACT_MIRROR_TOLERANCE,
        notes={"symmetric channel": f"{len(channel.pos)} nodes, bijection verified, "
                                    f"placement mismatch {placement_mismatch(channel):.3g}"})))
    return _continuity(ledger, cards, data, heldout, study.divergence)


def _study(ledger: Ledger, data: dict[str, Array], permutation_seeds: int) -> Study:
    mesh = Mesh(data["mesh_pos"], data["cells"], data["node_type"][:, 0])
    return Study(ledger, mesh, mgn_faults.Divergence(mesh.pos, mesh.cells, mesh.node_type),
                 mgn_faults.Divergence(mesh.pos, mesh.cells, mesh.node_type, interior=True),
                 placement_mismatch(mesh), permutation_seeds)


def _data_key(data: dict[str, Array]) -> str:
    digest = hashlib.sha256()
    for name in sorted(data):
        digest.update(name.encode() + np.ascontiguousarray(data[name]).tobytes())
    return digest.hexdigest()


def _sources(flow: Flow, heldout_flows: tuple[Flow, ...], source: Path | None,
             cache: Path | None, resimulate: bool, pinned_folder: Path
             ) -> tuple[dict[str, Array], dict[str, dict[str, Array]], str, str,
                        dict[str, Any]]:
    """(training trajectory, held-out trajectories by tag, training cache key, source,
    provenance of each trajectory by tag)."""
    if source is not None:
        data = study_trajectory(source, "train", 0, flow.frames)
        others = {f"valid{i}": study_trajectory(source, "valid", i, other.frames)
                  for i, other in enumerate(heldout_flows)}
        return (data, others, json.dumps({"deepmind": _data_key(data)}),
                f"DeepMind cylinder_flow at {source}: train record 0 ({flow.frames} frames), "
                f"valid records 0-{len(heldout_flows) - 1}, each on its own mesh",
                {tag: {"data_sha256": _data_key(d)}
                 for tag, d in {"train": data, **others}.items()})
    flows = {"train": flow}
    for other in heldout_flows:
        flows[f"inflow{other.inflow:g}"] = replace(other, nx=flow.nx, ny=flow.ny,
                                                   centre=flow.centre, radius=flow.radius)
    found: dict[str, dict[str, Array]] = {}
    provenance: dict[str, dict[str, Any]] = {}
    for tag, each in flows.items():
        kept = pinned.pinned_trajectory(each, pinned_folder)
        if kept is not None and not resimulate:
            found[tag] = kept[0]
            provenance[tag] = {"pinned": pinned.file_name(each), "sha256": kept[1]}
            continue
        found[tag] = trajectory(each, cache)
        provenance[tag] = {"simulated": True, "data_sha256": _data_key(found[tag]),
                           "against_pinned": None if kept is None
                           else pinned.compare(found[tag], kept[0])}
    data = found.pop("train")
    for tag, held in found.items():
        if not np.array_equal(held["mesh_pos"], data["mesh_pos"]):
            raise ValueError(f"held-out trajectory {flows[tag]} is not on the training mesh")
    if "pinned" in provenance["train"]:
        # the pinned file fixes the trajectory of this configuration
        key = json.dumps(asdict(flow), sort_keys=True)
        shown = "claims/sciml/trajectories" if pinned_folder == pinned.PINNED \
            else pinned_folder.name
        origin = f"the kit's phiflow simulation, pinned in {shown}"
    else:
        key = json.dumps({"flow": asdict(flow), "data": provenance["train"]["data_sha256"]},
                         sort_keys=True)
        origin = "the kit's phiflow simulation, simulated in this run"
    return data, found, key, origin, provenance


def _training_split(frames: int) -> tuple[int, list[int]]:
    """The first 80% of the transitions train; the rest are the held-out frames."""
    train_frames = max(1, int(0.8 * (frames - 1)))
    return train_frames, list(range(train_frames, frames - 1))


@dataclass(frozen=True)
class Trained:
    """What evaluating a trained subject needs: the training trajectory and the held-out
    ones with their studies, the training key, and the symmetric channel's mirror map."""

    data: dict[str, Array]
    others: dict[str, dict[str, Array]]
    heldout: list[int]
    train_frames: int
    key: str
    cache: Path | None
    study: Study
    studies: dict[str, Study]
    channel: Mesh
    target: Array

    def cases(self, net: Any, name: str) -> list[dict[str, Any]]:
        """The subject's per-case rows on the training trajectory's held-out frames and on
        every frame of each held-out trajectory."""
        rows = evaluate(self.study, net, name, self.data, self.heldout, "train")
        for tag, held in self.others.items():
            rows += evaluate(self.studies[tag], net, name, held,
                             list(range(len(held["velocity"]) - 1)), tag)
        return rows


def _physicsnemo_subject(ledger: Ledger, t: Trained, base: Subject, physicsnemo: Path,
                         backend: str) -> dict[str, Any]:
    """Train and evaluate the PhysicsNeMo MeshGraphNet through its worker."""
    subject = replace(base, seed=0, arch="physicsnemo")
    with Remote(physicsnemo, backend) as remote:
        remote.train(subject, t.data, t.train_frames, t.key, t.cache)
        rows = t.cases(remote, subject.name)
        return {**asdict(subject), "name": subject.name, "cases": rows, **remote.info,
                "exact_mirror": exact_mirror(ledger, remote, subject.name, t.channel,
                                             t.target)}


def run_mgn(ledger: Ledger, cards: dict[str, dict[str, Any]], roster: int = 6,
            permutation_seeds: int = 5, flow: Flow | None = None,
            base: Subject | None = None, cache: Path | None = None,
            airfoil: Airfoil | None = None, heldout_flows: tuple[Flow, ...] = HELDOUT_FLOWS,
            pointmlp: int = 3, physicsnemo: Path | None = None,
            physicsnemo_backend: str = "physicsnemo", source: Path | None = None,
            resimulate: bool = False, pinned_folder: Path = pinned.PINNED
            ) -> dict[str, dict[str, Any]]:
    """Train the subjects, decide and judge the relations, replay the seeded faults and
    screen the second task; returns the records by file name (``mgn.json``,
    ``mgn_faults.json``, ``second_task.json``). With ``source`` (a DeepMind cylinder_flow
    folder) the trajectories are read from it: the first ``flow.frames`` frames of its
    first training record, and per held-out flow one validation record (that flow's
    ``frames``), each evaluated on its own mesh. Otherwise the phiflow trajectories pinned
    in ``pinned_folder`` are read where it holds them (``kit.sciml.pinned`` says why), and
    simulated (cached) where it does not or with ``resimulate``; ``mgn.json`` records
    which, with hashes, and how a simulated one compares with the pinned one."""
    flow = flow or Flow()
    data, others, key, origin, provenance = _sources(flow, heldout_flows, source, cache,
                                                     resimulate, pinned_folder)
    train_frames, heldout = _training_split(len(data["velocity"]))
    study = _study(ledger, data, permutation_seeds)
    studies = {tag: study if np.array_equal(held["mesh_pos"], data["mesh_pos"])
               else _study(ledger, held, permutation_seeds) for tag, held in others.items()}
    channel = symmetric_channel()
    target = mirror_map(channel)
    trained = Trained(data, others, heldout, train_frames, key, cache, study, studies,
                      channel, target)
    record: dict[str, Any] = {
        "source": origin, "trajectories": provenance, "flow": asdict(flow),
        "heldout_flows": [asdict(f) for f in heldout_flows],
        "nodes": len(study.mesh.pos), "train_frames": train_frames, "heldout_frames": heldout,
        "mirror_mismatch": study.mismatch, "mirror_domain_score": domain_score(study.mismatch),
        "heldout_meshes": {tag: {"nodes": len(s.mesh.pos), "mirror_mismatch": s.mismatch}
                           for tag, s in studies.items()},
        "symmetric_channel": channel_symmetry(channel, target),
        "continuity": _decide(ledger, cards, data, heldout, study, channel), "subjects": []}
    subjects = roster_subjects(roster, base or Subject(0)) + pointmlp_subjects(
        pointmlp, base or Subject(0))
    nets = []
    progress = Progress("sciml: MeshGraphNet subjects", len(subjects) + bool(physicsnemo))
    for subject in subjects:
        net = train(subject, data, train_frames, key, cache)
        if subject.arch == "mgn":
            nets.append((asdict(subject), net))
        record["subjects"].append({
            **asdict(subject), "name": subject.name, "cases": trained.cases(net, subject.name),
            "exact_mirror": exact_mirror(ledger, net, subject.name, channel, target,
                                         control=subject.arch == "mgn")})
        progress.step(subject.name)
    record["physicsnemo"] = "not run: no PhysicsNeMo environment given"
    if physicsnemo is not None:
        record["subjects"].append(_physicsnemo_subject(ledger, trained, base or Subject(0),
                                                       physicsnemo, physicsnemo_backend))
        record["physicsnemo"] = f"run: {physicsnemo_backend} backend of physicsnemo_worker.py"
        progress.step("physicsnemo")
    faults = mgn_faults.run_catalogue(nets, data, heldout, permutation_seeds)
    second = run_second_task(ledger, cards, [net for _, net in nets], airfoil,
                             permutation_seeds)
    return {"mgn.json": record, "mgn_faults.json": faults, "second_task.json": second}


def _continuity(ledger: Ledger, cards: dict[str, dict[str, Any]], data: dict[str, Array],
                heldout: list[int], divergence: mgn_faults.Divergence) -> dict[str, Any]:
    """Gate decisions of absolute continuity (measured on the reference next states) and
    of the reference-relative guard."""
    absolute, guard = cards["mgn-continuity-absolute"], cards["mgn-continuity-guard"]
    truth = [data["velocity"][f + 1] for f in heldout]
    reference = max(divergence.rms(v) for v in truth)
    scale = min(divergence.gradient_rms(v) for v in truth)
    tolerance = ABSOLUTE_FRACTION * scale
    ledger.decide(decide(absolute, GateFindings(
        {absolute["preconditions"][0]: HOLDS}, HOLDS, HOLDS, floor=reference,
        tolerance=tolerance, notes={"reference divergence / gradient scale":
                                    f"{reference / scale:.3g}"})))
    ledger.decide(decide(guard, GateFindings(
        {guard["preconditions"][0]: HOLDS}, HOLDS, HOLDS, floor=0.0,
        tolerance=fixed_tolerance("mgn-continuity-guard"))))
    return {"reference_divergence_rms": reference, "gradient_rms": scale,
            "absolute_tolerance": tolerance, "interior_elements": len(divergence.area),
            "guard_threshold": mgn_faults.CONSERVATION_THRESHOLD}
