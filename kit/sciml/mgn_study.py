"""The MeshGraphNet part of the SciML study (first slice): a trained roster, node
permutation and mirror-y on the asymmetric cylinder mesh, and one-step accuracy.

- Data: one phiflow trajectory on the cylinder mesh (``kit.sciml.cylinder``); the first
  ``train_frames`` frame pairs train, the remaining pairs are held out (a temporal hold-out
  of the same trajectory).
- Roster: ``roster`` networks (4 seeds at the base size, one wider, one deeper when
  ``roster`` is 6), trained on the one-step velocity update, cached by content hash.
- Node permutation: ``permutation_seeds`` random relabellings per network and held-out
  frame; V = max |f(P x) - P f(x)| / max |f(x)|, exact up to float rounding (tolerance
  ``PERMUTATION_TOLERANCE``, predeclared).
- Mirror-y on the asymmetric mesh: reflected nodes miss the mesh (mismatch m in median
  edge lengths), so the gate retains it only as an OOD stress probe against its
  nearest-neighbour mapping floor, and every case is read with its domain score D.
- P1 continuity: the reference next state's own interior P1 divergence, against a
  tolerance of ``ABSOLUTE_FRACTION`` of its velocity-gradient scale, decides absolute
  conservation (deferred when the reference's divergence dominates); the reference-relative
  guard (prediction over reference divergence, threshold ``mgn_faults.CONSERVATION_THRESHOLD``)
  is executed per subject and held-out frame.
- Seeded faults (``kit.sciml.mgn_faults``): the catalogue, the adversarial mutants and the
  two sweeps over the trained roster.
- The second task (``kit.sciml.second_task``): the gate screens four relations on a
  compressible airfoil case and the admitted one runs on the trained roster.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from kit.sciml import mgn_faults
from kit.sciml.cylinder import Flow, trajectory
from kit.sciml.gate import APPROXIMATE, HOLDS, Evidence, decide
from kit.sciml.ledger import Ledger
from kit.sciml.meshes import HEIGHT, Mesh, placement_mismatch
from kit.sciml.mgn import directed_edges, permute_graph
from kit.sciml.mgn_train import Subject, roster_subjects, tensors, train
from kit.sciml.second_task import Airfoil, run_second_task
from kit.sciml.verdicts import domain_score, judge

Array = np.ndarray[Any, Any]
PERMUTATION_TOLERANCE = 1.0e-5
ABSOLUTE_FRACTION = 0.01  # absolute |div u| tolerance: 1% of the RMS velocity gradient


def _mirror(data: dict[str, Array], velocity: Array) -> tuple[Array, Array]:
    """The mirrored field on the mesh by nearest-neighbour mapping, and the map."""
    from scipy.spatial import cKDTree

    pos = data["mesh_pos"]
    reflected = pos * np.array([1.0, -1.0]) + np.array([0.0, HEIGHT])
    _, source = cKDTree(pos).query(reflected)
    return velocity[source] * np.array([1.0, -1.0]), source


def run_mgn(ledger: Ledger, cards: dict[str, dict[str, Any]], roster: int = 6,
            permutation_seeds: int = 5, flow: Flow | None = None,
            base: Subject | None = None, cache: Path | None = None,
            airfoil: Airfoil | None = None) -> dict[str, dict[str, Any]]:
    """Train the roster, decide and judge the relations, replay the seeded faults and
    screen the second task; returns the records by file name (``mgn.json``,
    ``mgn_faults.json``, ``second_task.json``)."""
    import torch

    flow = flow or Flow()
    data = trajectory(flow, cache)
    frames = len(data["velocity"])
    train_frames = max(1, int(0.8 * (frames - 1)))
    heldout = list(range(train_frames, frames - 1))
    key = json.dumps(asdict(flow), sort_keys=True)
    mesh = Mesh(data["mesh_pos"], data["cells"], data["node_type"][:, 0])
    mismatch = placement_mismatch(mesh)
    perm_card, mirror_card = cards["mgn-node-permutation"], cards["mgn-mirror-y"]
    ledger.decide(decide(perm_card, Evidence(
        {perm_card["preconditions"][0]: HOLDS}, HOLDS, HOLDS, floor=0.0,
        tolerance=PERMUTATION_TOLERANCE)))
    record: dict[str, Any] = {"flow": asdict(flow), "nodes": len(mesh.pos),
                              "train_frames": train_frames, "heldout_frames": heldout,
                              "mirror_mismatch": mismatch,
                              "mirror_domain_score": domain_score(mismatch), "subjects": []}
    divergence = mgn_faults.Divergence(data["mesh_pos"], data["cells"], mesh.node_type)
    record["continuity"] = _continuity(ledger, cards, data, heldout, divergence)
    mirror_decided = False
    nets = []
    for subject in roster_subjects(roster, base or Subject(0)):
        net = train(subject, data, train_frames, key, cache)
        nets.append((asdict(subject), net))
        rows = []
        for frame in heldout:
            pos, vel, types, edges = tensors(data, frame)
            with torch.no_grad():
                base_out = net.step(pos, vel, types, edges).numpy()
                truth = data["velocity"][frame + 1]
                accuracy = float(np.linalg.norm(base_out - truth) / np.linalg.norm(truth))
                violations = []
                for p_seed in range(permutation_seeds):
                    perm = np.random.default_rng(p_seed).permutation(len(mesh.pos))
                    moved = permute_graph(perm, data["mesh_pos"], data["velocity"][frame],
                                          data["node_type"][:, 0].astype(np.int64),
                                          directed_edges(data["cells"]))
                    follow = net.step(*[torch.tensor(a) for a in moved]).numpy()
                    v = float(np.abs(follow - base_out[perm]).max() / np.abs(base_out).max())
                    violations.append(v)
                    ledger.add(judge(perm_card["id"],
                                     f"mgn-seed{subject.seed}-f{frame}-p{p_seed}", v,
                                     PERMUTATION_TOLERANCE))
                mirrored_in, _ = _mirror(data, data["velocity"][frame])
                mirrored_out = net.step(pos, torch.tensor(mirrored_in), types, edges).numpy()
                expected, _ = _mirror(data, base_out)
                scale = float(np.linalg.norm(base_out))
                v_mirror = float(np.linalg.norm(mirrored_out - expected) / scale)
                floor = float(np.linalg.norm(_mirror(data, mirrored_in)[0]
                                             - data["velocity"][frame])
                              / np.linalg.norm(data["velocity"][frame]))
            if not mirror_decided:
                ledger.decide(decide(mirror_card, Evidence(
                    {mirror_card["preconditions"][0]: APPROXIMATE}, APPROXIMATE, APPROXIMATE,
                    floor=floor, tolerance=2 * floor,
                    notes={"placement mismatch m (median edge lengths)": f"{mismatch:.3g}"})))
                mirror_decided = True
            ledger.add(judge(mirror_card["id"], f"mgn-seed{subject.seed}-f{frame}", v_mirror,
                             tolerance=max(2 * floor, 1e-12), domain=domain_score(mismatch)))
            ratio = divergence.rms(base_out) / divergence.rms(truth)
            ledger.add(judge("mgn-continuity-guard", f"mgn-seed{subject.seed}-f{frame}", ratio,
                             mgn_faults.CONSERVATION_THRESHOLD))
            rows.append({"frame": frame, "one_step_relative_l2": accuracy,
                         "permutation_violations": violations, "mirror_violation": v_mirror,
                         "mirror_mapping_floor": floor, "continuity_ratio": ratio})
        record["subjects"].append({**asdict(subject), "cases": rows})
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
    ledger.decide(decide(absolute, Evidence(
        {absolute["preconditions"][0]: HOLDS}, HOLDS, HOLDS, floor=reference,
        tolerance=tolerance, notes={"reference divergence / gradient scale":
                                    f"{reference / scale:.3g}"})))
    ledger.decide(decide(guard, Evidence(
        {guard["preconditions"][0]: HOLDS}, HOLDS, HOLDS, floor=0.0,
        tolerance=mgn_faults.CONSERVATION_THRESHOLD)))
    return {"reference_divergence_rms": reference, "gradient_rms": scale,
            "absolute_tolerance": tolerance, "interior_elements": len(divergence.area),
            "guard_threshold": mgn_faults.CONSERVATION_THRESHOLD}
