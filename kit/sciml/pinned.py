"""The MeshGraphNet study's cylinder trajectories, pinned in ``claims/sciml/trajectories``.

Why pinned: the phiflow simulation (``kit.sciml.cylinder``) does not give the same bytes
in every process. Measured here: the semi-Lagrangian advection of the same field gives one
of two results depending on the process (from the first step with a non-uniform field),
not on the machine, thread count or load; it is reproducible only with both
``PYTHONHASHSEED`` fixed and address randomisation off. phiml 1.16.1 orders a tensor's
dimensions by iterating sets (of names, whose order follows the hash seed, and of objects,
whose order follows their addresses): the arrays inside its interpolation came out as
(x, y) in one process and (y, x) in another. After 450 steps the two trajectories differ
by up to 0.06 in velocity (a shift in the shedding phase). So the study reads the
trajectories that one simulation run produced, checked by sha256 against the index here
and listed in ``manifests/evidence.json``; ``nox -s sciml -- --resimulate`` simulates them
again, runs the whole study on its own trajectories and records how they compare with the
pinned ones (``compare``).

The index ``trajectories.json`` names, for each file, the ``Flow`` that produced it, its
sha256 and the solver versions. ``pin`` writes files and index (maintainers, after a
change to the simulation). ``pinned_problems`` hashes every file the index lists (verify
runs it): the index is what the shipped MeshGraphNet evidence names, so its files must be
the ones it lists whatever the manifests say."""

from __future__ import annotations

import json
from dataclasses import asdict
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

from kit.errors import KitError
from kit.files import canonical_json, load_npz, read_json, sha256, write_atomic, write_npz
from kit.paths import ROOT
from kit.sciml.checkpoints import content_key
from kit.sciml.cylinder import Flow, trajectory

Array = np.ndarray[Any, Any]

PINNED = ROOT / "claims" / "sciml" / "trajectories"
INDEX = "trajectories.json"
RESTORE = "restore it from git"


def file_name(flow: Flow) -> str:
    """The pinned file of ``flow``: a hash of its configuration alone."""
    return f"cylinder-{content_key(flow, ())}.npz"


def read_index(folder: Path = PINNED) -> dict[str, Any]:
    """The index (empty when the folder has none)."""
    path = folder / INDEX
    if not path.is_file():
        return {"trajectories": {}}
    index = read_json(path, RESTORE)
    entries = index.get("trajectories") if isinstance(index, dict) else None
    if not isinstance(entries, dict) or not all(
            isinstance(e, dict) and isinstance(e.get("sha256"), str) for e in entries.values()):
        raise KitError(f"{path}: not a trajectory index (a 'trajectories' mapping of file "
                       f"name to its flow and sha256); {RESTORE}")
    return index  # type: ignore[no-any-return]


def pinned_problems(folder: Path = PINNED) -> list[str]:
    """Problems with the pinned files (empty when each file the index lists is there with
    the sha256 it lists, and no other trajectory file is)."""
    try:
        entries: dict[str, Any] = read_index(folder)["trajectories"]
    except KitError as exc:
        return [str(exc)]
    problems = []
    for name, entry in sorted(entries.items()):
        path = folder / name
        if Path(name).name != name or not name.endswith(".npz"):
            problems.append(f"{folder / INDEX}: entry {name!r} is not a trajectory file name; "
                            f"{RESTORE}")
        elif not path.is_file():
            problems.append(f"{path}: listed in {folder / INDEX} but missing; {RESTORE}")
        else:
            try:
                digest = sha256(path, RESTORE)
            except KitError as exc:
                problems.append(str(exc))
                continue
            if digest != entry["sha256"]:
                problems.append(f"{path}: sha256 {digest} differs from {folder / INDEX} "
                                f"({entry['sha256']}); {RESTORE}")
    unlisted = sorted(p.name for p in folder.glob("*.npz") if p.name not in entries)
    problems += [f"{folder / name}: a trajectory file {folder / INDEX} does not list; remove "
                 "it, or pin it with kit.sciml.pinned.pin" for name in unlisted]
    return problems


def pinned_trajectory(flow: Flow, folder: Path = PINNED) -> tuple[dict[str, Array], str] | None:
    """(trajectory, sha256) of ``flow`` from the pinned folder, or None when it holds none.
    A file whose bytes or configuration differ from the index is an error naming it."""
    name = file_name(flow)
    entry = read_index(folder)["trajectories"].get(name)
    if entry is None:
        return None
    path = folder / name
    if entry.get("flow") != json.loads(json.dumps(asdict(flow))):
        raise KitError(f"{folder / INDEX}: entry {name} is for flow {entry.get('flow')}, "
                       f"not {asdict(flow)}; re-pin with kit.sciml.pinned.pin")
    if not path.is_file():
        raise KitError(f"{path}: listed in {folder / INDEX} but missing; {RESTORE}")
    digest = sha256(path, RESTORE)
    if digest != entry.get("sha256"):
        raise KitError(f"{path}: sha256 {digest} differs from {folder / INDEX} "
                       f"({entry.get('sha256')}); {RESTORE}")
    return load_npz(path, RESTORE), digest


def pin(flows: tuple[Flow, ...], folder: Path = PINNED, cache: Path | None = None) -> Path:
    """Write each flow's trajectory (from the cache, else simulated) and the index."""
    folder.mkdir(parents=True, exist_ok=True)
    index = read_index(folder)
    index["solver"] = {"phiflow": version("phiflow"), "phiml": version("phiml")}
    for flow in flows:
        name = file_name(flow)
        write_npz(folder / name, trajectory(flow, cache))
        index["trajectories"][name] = {"flow": asdict(flow),
                                       "sha256": sha256(folder / name)}
    index["trajectories"] = dict(sorted(index["trajectories"].items()))
    write_atomic(folder / INDEX, canonical_json(index))
    return folder / INDEX


def compare(found: dict[str, Array], pinned: dict[str, Array]) -> dict[str, Any]:
    """How a simulated trajectory compares with the pinned one: identical bytes, and the
    largest absolute difference of each array."""
    if set(found) != set(pinned):
        raise KitError(f"arrays {sorted(found)} differ from the pinned {sorted(pinned)}")
    diffs = {name: float(np.max(np.abs(np.asarray(found[name], np.float64)
                                       - np.asarray(pinned[name], np.float64))))
             if found[name].shape == pinned[name].shape else None for name in sorted(found)}
    return {"identical": all(np.array_equal(found[n], pinned[n]) for n in found),
            "max_abs_difference": diffs}
