"""Replay: rerun the drift pipeline (or named stages) into a fresh run folder and compare
every hashed output byte for byte with the first run.

Stages before the first replayed one are hard-linked from the first run, so
``--stages score bootstrap`` replays the analysis on the very same raw outputs. On a
mismatch the report names the first differing file and, for .npz files, the first
differing array and element with both values, and each differing array's maximum absolute
and relative deviation; for text files the first differing line. The run folders are read
through ``kit.files``: a manifest, ``machine.json`` or an .npz that cannot be read is an
error naming it, not a traceback. Each name a manifest lists must be a plain relative path
(``runfolder.plain_name``), and the difference is read only from a file inside its run
folder reached through no symbolic link: any other entry is refused, naming the manifest
and the entry, so no file outside the run folders reaches the report.

The replay folder (``<run>-replay``) is the kit's: ``prepare`` writes the mark
``.kit-replay`` into it when it makes it, and empties only a folder holding that mark (or
nothing at all); any other folder at that path is refused, naming it, before anything is
made or removed (``check_target``). In its own folder the kit removes only what an earlier
replay wrote (``kits_own``): a file a user put there is refused by name and kept (every
file of a run folder is hashed into its manifest, so a user's file cannot stay beside a
replay without changing its verdict).

The verdict goes to ``FIRST/replay.json`` by ``kit.owned``'s rule (``write_named_file``):
a new file, or the kit's replay report (``replay_report``) replaced keeping its mode; a
user's file of that name is refused by name and left as it is.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from kit.errors import KitError
from kit.files import (
    TEMPORARY,
    canonical_json,
    load_npz,
    read_bytes,
    read_json,
    sha256,
    write_atomic,
)
from kit.owned import check_named_file, json_with, write_named_file
from kit.runfolder import (
    LOCK,
    MACHINE,
    MANIFEST,
    REPLAY,
    REPLAY_MARK,
    UNHASHED,
    UNHASHED_DIRS,
    check_manifest,
    inside,
    plain_name,
)
from kit.tolerance import largest_relative

RERUN = "rerun that run (nox -s reproduce) or restore the folder"


def _npz_difference(a: Path, b: Path) -> dict[str, Any]:
    left, right = load_npz(a), load_npz(b)
    found: dict[str, Any] = {"arrays": []}
    for name in sorted(set(left) | set(right)):
        if name not in left or name not in right:
            found["arrays"].append({"array": name, "only_in": "first" if name in left
                                    else "replay"})
            continue
        x, y = left[name], right[name]
        if x.shape != y.shape or x.dtype != y.dtype:
            found["arrays"].append({"array": name, "first_shape": list(x.shape),
                                    "replay_shape": list(y.shape), "first_dtype": str(x.dtype),
                                    "replay_dtype": str(y.dtype)})
            continue
        unequal = x != y
        if x.dtype.kind == "f":
            unequal &= ~(np.isnan(x) & np.isnan(y))
        if not unequal.any():
            continue
        index = np.unravel_index(int(np.argmax(unequal)), x.shape)
        entry: dict[str, Any] = {"array": name, "element": [int(i) for i in index],
                                 "first": x[index].item(), "replay": y[index].item(),
                                 "elements_differing": int(unequal.sum())}
        if x.dtype.kind in "fiu":
            dx = np.abs(x.astype(np.float64) - y.astype(np.float64))[unequal]
            entry["max_abs"] = float(dx.max())
            entry["max_rel"] = largest_relative(dx, x[unequal])
        found["arrays"].append(entry)
    return found


def _text_difference(a: Path, b: Path) -> dict[str, Any]:
    left = read_bytes(a).decode(errors="replace").splitlines()
    right = read_bytes(b).decode(errors="replace").splitlines()
    for number, (x, y) in enumerate(zip(left, right, strict=False), 1):
        if x != y:
            return {"line": number, "first": x[:200], "replay": y[:200]}
    return {"line": min(len(left), len(right)) + 1, "first_lines": len(left),
            "replay_lines": len(right)}


def compare_runs(first: Path, second: Path) -> dict[str, Any]:
    """Compare the hashed outputs of two run folders (their manifests)."""
    a, b = (_listed(root) for root in (first, second))
    differing = sorted(n for n in set(a) | set(b) if a.get(n) != b.get(n))
    report: dict[str, Any] = {"compared": len(a), "identical": not differing,
                              "differing": differing[:50], "differing_count": len(differing),
                              "first_manifest_sha256": sha256(first / MANIFEST),
                              "first_manifest_ok": check_manifest(first) == [],
                              "replay_manifest_ok": check_manifest(second) == [],
                              "machines": _machines(first, second)}
    if differing:
        name = differing[0]
        detail: dict[str, Any] = {"file": name}
        if name not in a or name not in b:
            detail["only_in"] = "first" if name in a else "replay"
        elif name.endswith(".npz"):
            detail.update(_npz_difference(_plain_file(first, name), _plain_file(second, name)))
        else:
            detail.update(_text_difference(_plain_file(first, name), _plain_file(second, name)))
        report["first_difference"] = detail
    return report


def _listed(root: Path) -> dict[str, str]:
    """The files a run folder's manifest lists (relative path: sha256)."""
    path = root / MANIFEST
    if not path.is_file():
        raise KitError(f"{path}: no run manifest to compare")
    listed = read_json(path, RERUN)
    files = listed.get("files") if isinstance(listed, dict) else None
    if not isinstance(files, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise KitError(f"{path}: not a run manifest (a 'files' mapping of relative path to "
                       f"sha256); {RERUN}")
    return {plain_name(name, path, "a files entry"): sha for name, sha in files.items()}


def _plain_file(root: Path, name: str) -> Path:
    """``root / name`` (a plain name its manifest lists) to read a difference from: inside
    ``root`` (``runfolder.inside``) and reached through no symbolic link; a KitError naming
    the manifest and the entry otherwise."""
    path = inside(root, name, root / MANIFEST, "a files entry")
    if path.resolve() != root.resolve() / name:
        raise KitError(f"{root / MANIFEST}: a files entry {name!r} is reached through a "
                       f"symbolic link (to {path.resolve()}); the kit reads no run file "
                       f"through a link: remove it, or {RERUN}")
    return path


def _machines(first: Path, second: Path) -> dict[str, Any]:
    """Whether both runs ran on the same machine (their unhashed ``machine.json``), kept
    apart from the result comparison: across machines the claim rules decide, not bytes."""
    paths = [root / MACHINE for root in (first, second)]
    if not all(path.is_file() for path in paths):
        return {"same": None, "note": "a run folder has no machine.json"}
    a, b = (_machine(path) for path in paths)
    differing = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    return {"same": not differing, "differing": differing}


def _machine(path: Path) -> dict[str, Any]:
    found = read_json(path, RERUN)
    if not isinstance(found, dict):
        raise KitError(f"{path}: not a machine fingerprint (a JSON object); {RERUN}")
    return found


def check_target(target: Path) -> None:
    """Refuse a replay folder the kit did not make: ``target`` must be missing, empty (but
    for a lock file) or hold the kit's mark ``.kit-replay``."""
    if not (target.exists() or target.is_symlink()):
        return
    if not target.is_dir():
        raise KitError(f"{target}: is not a folder, and the replay writes its run there; "
                       "move it away")
    if (target / REPLAY_MARK).is_file() or {p.name for p in target.iterdir()} <= {LOCK}:
        return
    raise KitError(f"{target}: a folder the kit did not make (no {REPLAY_MARK} mark) stands "
                   "where the replay writes its run, and the replay would replace it; move "
                   "it away or delete it yourself")


def prepare(first: Path, target: Path, stages: tuple[str, ...], order: tuple[str, ...]
            ) -> None:
    """A fresh replay folder holding (hard links to) the stages before the first replayed
    (a symbolic link among them is refused by name): the kit's mark written first, then
    everything but the mark and the lock file of an earlier replay removed
    (``check_target`` refuses any other folder)."""
    from kit.runlock import hold

    check_target(target)
    start = min(order.index(s) for s in stages)
    for stage in order[:start]:
        if not (first / stage).is_dir() or (first / stage).is_symlink():
            raise KitError(f"{first / stage}: the first run lacks stage {stage!r} to replay from")
        linked = next((p for p in (first / stage).rglob("*") if p.is_symlink()), None)
        if linked is not None:  # hard-linked below, a link would bring in what it names
            raise KitError(f"{linked}: a symbolic link in the first run, and the replay "
                           f"links no file through one; remove it, or {RERUN}")
    with hold(target) as folder:  # refused at once while a command runs in the folder
        earlier = kits_own(folder, order)  # a user's file there is refused, never removed
        write_atomic(folder / REPLAY_MARK, f"made by the kit's replay of {first}\n".encode())
        for entry in earlier:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        for stage in order[:start]:
            shutil.copytree(first / stage, folder / stage, copy_function=os.link)


def kits_own(folder: Path, order: tuple[str, ...]) -> list[Path]:
    """The entries an earlier replay left in the kit's replay folder ``folder``, to remove
    before the next: its stage folders, its run metadata (``UNHASHED``) and the kit's
    temporaries; never the mark or the lock. Any other entry, or a file inside a stage
    folder that the earlier replay's finished manifest does not list (nor its report or
    steps), is the user's: a KitError names it before anything is removed. A replay killed
    before its manifest leaves no list: its stage folders are taken whole."""
    listed: set[str] | None = None
    if (folder / MANIFEST).is_file():
        found = read_json(folder / MANIFEST, f"delete {folder} yourself")
        files = found.get("files") if isinstance(found, dict) else None
        listed = set(files) if isinstance(files, dict) else None
    entries = []
    for entry in sorted(folder.iterdir()):
        name = entry.name
        if name in (REPLAY_MARK, LOCK):
            continue
        stage = name in order or name in UNHASHED_DIRS
        if not ((stage and entry.is_dir()) or (name in UNHASHED and entry.is_file())
                or TEMPORARY.fullmatch(name)):
            raise KitError(f"{entry}: not a file the kit's replay wrote, in its replay "
                           "folder; the replay would remove it: move it away")
        if stage and listed is not None and name not in UNHASHED_DIRS and not entry.is_symlink():
            for path in sorted(entry.rglob("*")):
                relative = path.relative_to(folder).as_posix()
                if not (path.is_dir() or relative in listed or TEMPORARY.fullmatch(path.name)):
                    raise KitError(f"{path}: not a file the kit's replay wrote (its manifest "
                                   "does not list it); the replay would remove it: move it "
                                   "away")
        entries.append(entry)
    return entries


# The only file of that name ``verify --compare`` replaces in the first run folder.
replay_report = json_with({"compared", "identical", "differing", "differing_count",
                           "first_manifest_sha256", "machines"})


def write_report(first: Path, report: dict[str, Any]) -> Path:
    """``report`` to ``first/replay.json`` by ``kit.owned``'s rule: a user's file there is
    refused by name and kept."""
    path = first / REPLAY
    write_named_file(path, canonical_json(report), replay_report, "--compare")
    return path


def replay(run: Path | None, substrate: str | None, stages_asked: list[str] | None,
           small: bool, protocol_file: Path | None, backend: str | None,
           models: str = "train") -> int:
    """``verify --replay``: rerun the drift stages (or ``stages_asked``) of the first run
    ``run`` into ``<run>-replay`` and compare every hashed file; with ``small``, the small
    configuration in ``runs/<substrate>-small`` (run first when absent); ``models``: where
    fetch takes the digits models (the first run's source). The exit code."""
    from kit.drift.protocol import PROTOCOL, load_protocol, write_small_protocol
    from kit.drift.stages.pipeline import STAGES, finished, reproduce
    from kit.paths import cache_dir
    from kit.runfolder import Run, default_run
    from kit.runlock import hold

    protocol = protocol_file or PROTOCOL
    substrate = substrate or load_protocol(protocol)["substrate_default"]
    first = run or default_run(substrate).root
    if small:
        first = run or first.with_name(first.name + "-small")
    stages = tuple(stages_asked or STAGES)
    unknown = sorted(set(stages) - set(STAGES))
    if unknown:
        raise KitError(f"unknown stages {unknown}; stages: {STAGES}")
    target = first.with_name(first.name + "-replay")
    check_target(target)  # before anything is made: a folder the kit did not make is refused
    check_named_file(first / REPLAY, replay_report, "--replay")  # the verdict's file, too
    with hold(first, create=small):
        if small:
            # in the kit's cache, never beside the run folder (a user's file may be there)
            protocol = write_small_protocol(cache_dir() / "protocols" / "small.yaml")
        options: dict[str, Any] = {"substrate": substrate, "backend": backend,
                                   "protocol_file": protocol, "models": models}
        if small and not finished(Run(first)):
            print(f"replay: no finished first run in {first}; running the small "
                  "configuration there first (resuming what it holds)")
            reproduce(run_dir=first, **options)
        prepare(first, target, stages, STAGES)  # refused while a command holds the target
        ordered = tuple(s for s in STAGES if s in stages)
        reproduce(ordered, run_dir=target, **options)
        return report_replay(first, target)


def report_replay(first: Path, target: Path) -> int:
    """``verify --compare``: compare two finished run folders, write FIRST/replay.json and
    print the verdict. The exit code (0 when every hashed file is identical)."""
    from kit.runlock import hold

    with hold(first, create=False), hold(target, create=False):
        report = compare_runs(first, target)
        path = write_report(first, report)
    print(json.dumps({k: v for k, v in report.items() if k != "differing"}, indent=1))
    machines = report["machines"]  # no "differing" where a folder has no machine.json
    machine = "machine unknown" if machines["same"] is None else "same machine" \
        if machines["same"] else f"another machine ({', '.join(machines['differing'])} differ)"
    print(f"replay: {report['compared']} hashed files compared, results "
          f"{'identical' if report['identical'] else 'DIFFERENT'}; {machine}; report {path}")
    return 0 if report["identical"] else 1
