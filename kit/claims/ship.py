"""Shipping: a finished run's evidence copied into ``claims/<study>/evidence/<substrate>``,
then the manifests rewritten (``python -m kit ship``). The copy is staged beside its target
and renamed over it, so a failed ship leaves the previous evidence in place.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from kit.claims.coverage import write_manifests
from kit.errors import KitError
from kit.files import read_json
from kit.paths import ROOT
from kit.runfolder import MACHINE, MANIFEST, REPLAY

SHIPPED = ("score/protocol.yaml", "fetch/fetch.json", "split/split.json", "fault/fault.json",
           "fault/severity.json",
           "score/score.json", "score/summary.json", "score/layers.npz",
           "score/clean-logits.npz", "bootstrap/bootstrap.json", "bootstrap/summary.json",
           "sensitivity/sensitivity.json", "sensitivity/summary.json")

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


def ship(run: Path, study: str = "drift", root: Path = ROOT) -> Path:
    """Copy a finished run's evidence into ``claims/<study>/evidence/<substrate>``
    (a SciML run folder, recognised by its ``ledger.json``, goes to ``claims/sciml``; a
    sweep folder, by its ``sweep/sweep.json``, to ``claims/realdrift``; a corpus folder, by
    its ``corpus/corpus.json``, to ``claims/corpus``, every file its run manifest lists; a
    detector-study folder, by its ``detectors/detectors.json``, to
    ``claims/corpus/evidence/detectors``)."""
    if (run / "detectors" / "detectors.json").is_file():
        hosts = read_json(run / "detectors" / "hosts.json")["hosts"]
        names = [*DETECTORS_SHIPPED, *(row["evidence"] for row in hosts if row["hosted"])]
        return _ship_files(run, root / "claims" / "corpus" / "evidence" / "detectors", names,
                           root)
    if (run / "corpus" / "corpus.json").is_file():
        listed = read_json(run / MANIFEST)["files"]
        return _ship_files(run, root / "claims" / "corpus" / "evidence" / "kit", sorted(listed),
                           root)
    if (run / "ledger.json").is_file() and not (run / "fetch").is_dir():
        return _ship_files(run, root / "claims" / "sciml" / "evidence" / "kit",
                           list(SCIML_SHIPPED), root)
    substrate = str(read_json(run / "fetch" / "fetch.json")["substrate"])
    if (run / "sweep" / "sweep.json").is_file():
        names = [*REALDRIFT_SHIPPED, *(name for name in REALDRIFT_OPTIONAL
                                       if (run / name).is_file())]
        return _ship_files(run, root / "claims" / "realdrift" / "evidence" / substrate,
                           names, root)
    target = root / "claims" / study / "evidence" / substrate
    record = read_json(run / "score" / "score.json")
    names = list(SHIPPED) + [d["path"] for d in record["tables"].values()]
    return _ship_files(run, target, names, root)


def _ship_files(run: Path, target: Path, names: list[str], root: Path) -> Path:
    staging = target.with_name(target.name + ".tmp")
    if staging.exists():
        shutil.rmtree(staging)
    for name in names:
        if not (run / name).is_file():
            raise KitError(f"{run / name}: missing; run every stage before shipping")
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(run / name, staging / name)
    shutil.copyfile(run / MANIFEST, staging / "run-manifest.json")
    for metadata in (REPLAY, MACHINE):
        if (run / metadata).is_file():
            shutil.copyfile(run / metadata, staging / metadata)
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    write_manifests(root)
    return target
