"""``python -m kit sciml`` (``nox -s sciml``): the SciML study through cards, gate,
verdicts and ledger, as the named steps of ``kit.sciml.pipeline``.

The P1 divergence floor sweep (kit/sciml/operator_floor.py) decides the
absolute-divergence card per resolution (numerically decidable only where the card's
tolerance dominates the measured floor by its margin), and the flux-form finite-volume
balance is admitted and executed as a conservation verdict; the FNO subjects
(kit/sciml/fno_study.py) add periodic translation and conservation verdicts, the rejected
Dirichlet translation and the K=15 admission roster; the PINN subjects
(kit/sciml/pinn_study.py) add MR-A, MR-B and MR-C with their statistics; the
MeshGraphNet study (kit/sciml/mgn_study.py) adds node permutation, the mirror-y
relations and continuity on the simulated cylinder flow, its fault catalogue and the
second task; the closed-form output-level PINN and FNO probes (kit/sciml/probes.py)
complete the 60-entry unified catalogue; the report (kit/sciml/report.py) draws it.
"""

from __future__ import annotations

from pathlib import Path

from kit.errors import KitError
from kit.sciml.config import Config
from kit.sciml.deepmind import read_meta
from kit.sciml.pipeline import run_pipeline


def default_folder(resimulate: bool, deepmind: Path | None) -> str:
    """The run folder's name under ``runs/`` for the trajectories the study reads."""
    return "sciml-deepmind" if deepmind else "sciml-resimulated" if resimulate else "sciml"


SHIPPED = Path("claims") / "sciml" / "evidence" / "kit"


def shipped_weights(evidence: Path) -> dict[str, tuple[Path, str]]:
    """Every checkpoint the shipped SciML evidence holds: its name under the cache -> (the
    file, the sha256 the shipped run manifest lists for it)."""
    from kit.files import read_json
    from kit.runfolder import SHIPPED_MANIFEST, WEIGHTS_DIR

    manifest = evidence / SHIPPED_MANIFEST
    listed = read_json(manifest, "restore it with git checkout claims")
    files = listed.get("files") if isinstance(listed, dict) else None
    if not isinstance(files, dict):
        raise KitError(f"{manifest}: no 'files' mapping; restore it with git checkout claims")
    prefix = f"{WEIGHTS_DIR}/"
    found = {name[len(prefix):]: (evidence / name, digest) for name, digest in files.items()
             if name.startswith(prefix)}
    if not found:
        raise KitError(f"{manifest}: the shipped SciML evidence lists no trained weights "
                       f"({prefix}); use --models train")
    return found


def run_command(run: Path | None = None, without_physicsnemo: bool = False,
                resimulate: bool = False, deepmind: Path | None = None,
                small: bool = False, models: str = "train") -> Path:
    """``python -m kit sciml``: build the PhysicsNeMo environment unless left out, then run
    (or resume) every step into ``run`` (default ``runs/<default_folder>``); returns the
    folder. ``small``: ``Config.tiny`` (its own cache folder, no PhysicsNeMo). ``models``:
    ``train`` trains (or loads from the cache) every subject; ``shipped`` takes every
    subject's checkpoint from the shipped evidence and trains nothing; ``null`` runs the
    null subjects (``Config.null``: every subject untrained) into ``runs/sciml-null``."""
    from kit.paths import ROOT, cache_dir
    from kit.runlock import hold
    from kit.runtime.venvs import ensure_physicsnemo

    if models == "null" and (small or resimulate or deepmind is not None):
        raise KitError("sciml --models null runs the full study's subjects untrained on its "
                       "own flow; leave out --small, --resimulate and --deepmind")
    out = run or ROOT / "runs" / ("sciml-null" if models == "null"
                                  else default_folder(resimulate, deepmind))
    with hold(out) as folder:
        if small:
            if models != "train":
                raise KitError("sciml --small trains its own tiny subjects; the shipped "
                               "weights belong to the full configuration")
            if resimulate or deepmind is not None:
                raise KitError("sciml --small reads its own tiny simulated flow; leave out "
                               "--resimulate and --deepmind")
            run_pipeline(Config.tiny(cache_dir() / "sciml-small"), folder)
            return folder
        if deepmind is not None:
            read_meta(deepmind)  # before building anything: a bad folder fails at once
        cache = None
        if models == "shipped":
            from kit.sciml.checkpoints import use_shipped

            cache = use_shipped(shipped_weights(ROOT / SHIPPED), cache_dir() / "sciml-shipped")
        physicsnemo = None if without_physicsnemo else ensure_physicsnemo()
        if models == "null":
            run_pipeline(Config.null(physicsnemo), folder)
            return folder
        run_pipeline(Config(physicsnemo=physicsnemo,
                            mgn_source=None if deepmind is None else deepmind.resolve(),
                            mgn_resimulate=resimulate, cache=cache), folder)
    return folder
