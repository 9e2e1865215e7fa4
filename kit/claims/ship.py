"""Shipping: a finished run's evidence copied into ``claims/<study>/evidence/<substrate>``,
then the manifests rewritten (``python -m kit ship``). The copy is staged beside its target
and renamed over it, so a failed ship leaves the previous evidence in place.

Ship writes only under that target. Every name it takes from the run's records (the
substrate in ``fetch.json``, the table paths in ``score.json``, the evidence files in
``hosts.json``, the entries of a corpus run manifest) must be a plain relative name
(``runfolder.plain_name``) and resolve inside the run folder (``runfolder.inside``), and
the target must resolve inside ``claims/``, before anything is read or written: a record
that names ``../../victim`` is a ``kit: error`` naming the file and the field. The copy is
built in a fresh hidden sibling (the kit's temporary name), the old target moved to
another and removed only once the new one is in place; a failed copy removes its own
staging folder and nothing else. A journal (``kit.claims.journal``) makes a ship killed at
any moment finish or roll back on the next call.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from kit.claims import journal
from kit.claims.coverage import refuse_leftovers, unshipped, write_manifests
from kit.errors import FileFormatError, KitError
from kit.files import read_json
from kit.paths import ROOT
from kit.runfolder import (
    MACHINE,
    MANIFEST,
    REPLAY,
    SHIPPED_MANIFEST,
    WEIGHTS_DIR,
    inside,
    plain_name,
)

# The drift study's records and tables (and on digits its trained models, _model_files).
SHIPPED = ("score/protocol.yaml", "fetch/fetch.json", "split/split.json", "fault/fault.json",
           "fault/severity.json",
           "score/score.json", "score/summary.json", "score/layers.npz",
           "score/clean-logits.npz", "bootstrap/bootstrap.json", "bootstrap/summary.json",
           "sensitivity/sensitivity.json", "sensitivity/summary.json")
# Shipped when the run has them: the grid tables' layer scores (kit.drift.ties) and the
# controls' (kit.drift.shipped.ControlNull).
DRIFT_OPTIONAL = ("score/grid-layers.npz", "score/control-layers.npz")

# The sweep's per-case evidence: one row per cell, model and export, with what each release
# offered; its raw outputs stay in the run folder, listed by the shipped run manifest.
REALDRIFT_SHIPPED = ("sweep/sweep.json", "sweep/cells.json", "sweep/levels.json",
                     "fetch/fetch.json", "split/split.json")
REALDRIFT_OPTIONAL = ("sweep/polygraphy/fault-matrix.json",)
# The detector study: its records and each host's evidence arrays (hosts.json lists them);
# models, images and raw job outputs stay in the run folder, listed by its run manifest.
DETECTORS_SHIPPED = ("detectors/detectors.json", "detectors/hosts.json", "fetch/fetch.json",
                     "split/split.json")
SCIML_SHIPPED = ("ledger.json", "operator_floor.json", "fv_balance.json", "fno.json", "mgn.json",
                 "mgn_faults.json", "second_task.json", "unified.json",
                 "pinn.json")


def ship(run: Path, study: str = "drift", root: Path | None = None) -> Path:
    """Copy a finished run's evidence into ``claims/<study>/evidence/<substrate>``
    (a SciML run folder, recognised by its ``ledger.json``, goes to ``claims/sciml``, to
    ``null`` when its subjects are the untrained null subjects, else to ``kit``; a
    sweep folder, by its ``sweep/sweep.json``, to ``claims/realdrift``; a corpus folder, by
    its ``corpus/corpus.json``, to ``claims/corpus``, every file its run manifest lists; a
    detector-study folder, by its ``detectors/detectors.json``, to
    ``claims/corpus/evidence/detectors``). ``root``: the checkout (default the kit's)."""
    root = ROOT if root is None else root
    if (run / "detectors" / "detectors.json").is_file():
        path = run / "detectors" / "hosts.json"
        hosts = _field(read_json(path), path, "hosts", list)
        names = [*DETECTORS_SHIPPED, *(
            plain_name(_field(row, path, f"hosts[{i}].evidence", str), path,
                       f"hosts[{i}].evidence")
            for i, row in enumerate(hosts) if _field(row, path, f"hosts[{i}].hosted", bool))]
        return _ship_files(run, root, ("corpus", "detectors"), names, path)
    if (run / "corpus" / "corpus.json").is_file():
        path = run / MANIFEST
        listed = _field(read_json(path), path, "files", dict)
        names = [plain_name(name, path, "a files entry") for name in sorted(listed)]
        return _ship_files(run, root, ("corpus", "kit"), names, path)
    if (run / "ledger.json").is_file() and not (run / "fetch").is_dir():
        from kit.sciml.ledger import NULL_NOTE

        if read_json(run / "ledger.json").get("subjects_note") == NULL_NOTE:
            # the null subjects: seeded initial weights, rebuilt from the code, not shipped
            return _ship_files(run, root, ("sciml", "null"), list(SCIML_SHIPPED),
                               run / MANIFEST)
        path = run / MANIFEST
        listed = _field(read_json(path), path, "files", dict)
        weights = [plain_name(name, path, "a files entry") for name in sorted(listed)
                   if name.startswith(f"{WEIGHTS_DIR}/")]  # trained weights are evidence
        return _ship_files(run, root, ("sciml", "kit"), [*SCIML_SHIPPED, *weights], path)
    path = run / "fetch" / "fetch.json"
    substrate = plain_name(_field(read_json(path), path, "substrate", str), path,
                           "substrate", segments=1)
    if (run / "sweep" / "sweep.json").is_file():
        names = [*REALDRIFT_SHIPPED, *(name for name in REALDRIFT_OPTIONAL
                                       if (run / name).is_file())]
        return _ship_files(run, root, ("realdrift", substrate), names, path,
                           weights=substrate == "digits")
    names = _model_files(run / "fetch" / "fetch.json") if substrate == "digits" else []
    path = run / "score" / "score.json"
    tables = _field(read_json(path), path, "tables", dict)
    names += list(SHIPPED) + [name for name in DRIFT_OPTIONAL if (run / name).is_file()] + [
        plain_name(_field(entry, path, f"tables.{key}.path", str), path, f"tables.{key}.path")
        for key, entry in tables.items()]
    return _ship_files(run, root, (plain_name(study, run, "the study", 1), substrate),
                       names, path, weights=substrate == "digits")


def _ship_weights(run: Path, root: Path) -> None:
    """The training weights of a digits run's models into ``claims/drift/weights/digits``
    (``kit.claims.verify.training_weights_problems``): each taken from the training cache
    where fetch trained it, written only when the shipped file is not those bytes already
    (a run on the shipped models finds them there), each checked against the sha256 the
    run's fetch record names before it is written."""
    from kit.drift.stages.fetch import training_weights
    from kit.files import sha256, write_atomic
    from kit.runfolder import TRAINING_CACHE, Run

    folder = root / "claims" / "drift" / "weights" / "digits"
    record = run / "fetch" / "fetch.json"
    models = _field(read_json(record), record, "models", dict)
    cached = _field(read_json(run / TRAINING_CACHE), run / TRAINING_CACHE, "models", dict)
    for name, entry in sorted(models.items()):
        target = folder / f"{plain_name(name, record, 'models', 1)}.pt"
        digest = _field(entry, record, f"models.{name}.weights_sha256", str)
        if target.is_file() and not target.is_symlink() and sha256(target) == digest:
            continue
        source = training_weights(Run(run), name, cached.get(name, {}), digest)
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            raise KitError(f"{folder}: not a folder of the checkout; move it away")
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(target, source.read_bytes())


def _model_files(path: Path) -> list[str]:
    """The digits models' plain ONNX files the fetch record names: they ship, so that
    ``reproduce --models shipped`` replays the study on the shipped weights on any CPU (the
    instrumented copies are made again from them and checked against the run manifest)."""
    models = _field(read_json(path), path, "models", dict)
    return [plain_name(_field(entry, path, f"models.{name}.onnx", str), path,
                       f"models.{name}.onnx") for name, entry in sorted(models.items())]


def _field(record: Any, source: Path, field: str, kind: type) -> Any:
    """``record[last part of field]`` when ``record`` is an object holding it as ``kind``;
    FileFormatError naming ``source`` and ``field`` otherwise."""
    key = field.rsplit(".", 1)[-1]
    value = record.get(key) if isinstance(record, dict) else None
    if not isinstance(value, kind):
        raise FileFormatError(f"{source}: {field} is not a {kind.__name__}; the record is "
                              "not the kit's: rerun the stage that wrote it")
    return value


def _ship_files(run: Path, root: Path, where: tuple[str, str], names: list[str],
                source: Path, weights: bool = False) -> Path:
    """Copy ``names`` (read from ``source``) of ``run`` into
    ``root/claims/<where[0]>/evidence/<where[1]>``: every name checked and every file
    found before the staging folder is made, the old target replaced only when the new one
    is complete. ``weights``: the digits models' training weights too (``_ship_weights``),
    once every check passed."""
    claims = root / "claims"
    target = claims / where[0] / "evidence" / where[1]
    copies = [(inside(run, name, source, "a listed file"), name) for name in names]
    copies += [(inside(run, MANIFEST, run, "the run manifest"), SHIPPED_MANIFEST)]
    copies += [(inside(run, name, run, "a run record"), name) for name in (REPLAY, MACHINE)
               if (run / name).is_file() or (run / name).is_symlink()]  # no link followed out
    for path, _ in copies:
        if not path.is_file():
            raise KitError(f"{path}: missing; run every stage before shipping")
    parent = target.parent
    for folder in (claims, parent.parent, parent, target, root / "manifests"):
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            raise KitError(f"{folder}: not a folder of the checkout (a link or a file); "
                           "ship writes only real folders under claims/: move it away")
    if claims.resolve() not in parent.resolve().parents:
        raise KitError(f"{parent}: resolves outside {claims}; ship writes only under it")
    added = unshipped(root, target) if target.is_dir() else []
    if added:  # the evidence folder is replaced whole: nothing of a user's goes with it
        raise KitError(f"{added[0]}: not a file an earlier ship wrote (the evidence manifest "
                       "does not list it, or lists another sha256); move it out, or restore "
                       "it, and ship again")
    parent.mkdir(parents=True, exist_ok=True)
    if weights:
        _ship_weights(run, root)

    def fill(staging: Path) -> None:
        refuse_leftovers(root, besides=staging)  # a live writer's temporaries: refused
        for path, name in copies:
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, staging / name)

    journal.replace(root, target, write_manifests, fill)
    return target
