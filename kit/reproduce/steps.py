"""The steps of reproduce-all: each study's own command (``python -m kit ...``, in a
process of its own) into its run folder under one runs root, in its full or its small
configuration.

    drift             ``reproduce``: the drift study on digits
    corpus            ``corpus``: the real-defect corpus
    corpus-detectors  ``corpus-detectors``: the corpus's detector study
    sciml             ``sciml``: the SciML study
    sciml-null        ``sciml --models null``: its null subjects (every subject untrained,
                      seeded), which every SciML row is decided against too; not in
                      ``--small``, whose tiny subjects have no null
    sweep             ``sweep``: the real-drift sweep, with Polygraphy on the drift run's
                      fault matrix when that run is there

The order puts the short steps first and the sweep (the longest) last, after the drift
run whose fault matrix it reads. ``--small`` is each study's own small configuration:
the drift protocol of ``write_small_protocol`` (one model, one epoch), the SciML
``Config.tiny``, the sweep and the corpus on the reference and candidate releases only,
the detector study on one case; minutes, not hours, and none of its numbers is a result.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from kit.errors import KitError
from kit.files import canonical_json
from kit.heartbeat import heartbeat
from kit.paths import ROOT
from kit.procs import run_child
from kit.runfolder import check_manifest, say

# Which studies ``--only`` names, and the steps each takes.
STUDIES = {"drift": ("drift",), "corpus": ("corpus", "corpus-detectors"),
           "sciml": ("sciml", "sciml-null"), "realdrift": ("sweep",)}
ORDER = ("drift", "corpus", "corpus-detectors", "sciml", "sciml-null", "sweep")
# The steps the small configuration leaves out, and why.
NOT_SMALL = {"sciml-null": "the null subjects are the full study's, untrained"}
# Each step's run folder under the runs root: the folder its own command writes by default.
FOLDERS = {"drift": "digits", "corpus": "corpus", "corpus-detectors": "corpus-detectors",
           "sciml": "sciml", "sciml-null": "sciml-null", "sweep": "sweep-digits"}
# The small configuration's subsets: the reference and candidate releases (the sweep
# refuses a set without them) at the two levels the papers compare, one corpus case.
SMALL_RELEASES = ["1.20.1", "1.29.0"]
SMALL_LEVELS = ["disable_all", "enable_all"]
SMALL_CASE = "pad-avgpool-fusion"


@dataclass(frozen=True)
class Options:
    """What every step is run with."""

    runs: Path
    small: bool = False
    # Each training step's models, "train" (the default) or "shipped"
    # (``kit.reproduce.command.resolve_models``).
    models: dict[str, str] = field(default_factory=dict)
    without_physicsnemo: bool = False
    backend: str | None = None
    scheduler: str | None = None
    workers: int | None = None

    def folder(self, step: str) -> Path:
        return self.runs / FOLDERS[step]

    def model(self, step: str) -> str:
        return self.models.get(step, "train")



# What a run's bytes can depend on besides its commands: the kit's code, protocols, MR
# cards and schemas, the locks and the project file (the plan's cost table excepted: it
# changes no byte of a run).
INPUTS = ("kit", "locks", "pyproject.toml")
NOT_INPUTS = ("costs.toml",)


def inputs_digest(root: Path = ROOT) -> str:
    """The sha256 over every file of ``INPUTS`` under ``root`` (path and bytes)."""
    digest = hashlib.sha256()
    for top in INPUTS:
        path = root / top
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for f in files:
            if "__pycache__" in f.parts or f.name in NOT_INPUTS or not f.is_file():
                continue
            digest.update(f.relative_to(root).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(f.read_bytes()).digest())
    return digest.hexdigest()


def identity(o: Options, step: str, root: Path = ROOT) -> str:
    """What a finished step must have been run with to be kept on a rerun: the sha256 of
    its commands (where its batches ran is not part of it: that changes no byte) and of the
    kit's code, protocols and locks (``inputs_digest``): a step finished before the kit
    changed runs again, where it was once kept and shipped a run of the earlier code."""
    plain = replace(o, backend=None, scheduler=None, workers=None)
    return hashlib.sha256(canonical_json({"commands": ARGV[step](plain),
                                          "inputs": inputs_digest(root)})).hexdigest()


def steps_for(only: list[str] | None, small: bool = False) -> list[str]:
    """The steps of the chosen studies or steps (default all), in ORDER: ``--only`` takes a
    study's name (all its steps) or any step name the plan prints; ``small`` leaves out
    the steps of ``NOT_SMALL``."""
    unknown = sorted(set(only or ()) - set(STUDIES) - set(ORDER))
    if unknown:
        raise KitError(f"--only {' '.join(unknown)}: no such study or step; studies: "
                       f"{', '.join(STUDIES)}; steps: {', '.join(ORDER)}")
    chosen = {step for name in (only or STUDIES)
              for step in STUDIES.get(name, (name,))}
    return [step for step in ORDER if step in chosen and not (small and step in NOT_SMALL)]


def small_protocols(o: Options) -> tuple[Path, Path]:
    """The small drift protocol and the small detector-study protocol, written under the
    runs root (the same bytes on every call, so a resumed run finds its folders' own), in a
    folder of the kit's by ``kit.owned``'s rule: a user's file there is refused, never
    replaced."""
    from kit.corpus.detectors import write_small_protocol as small_study
    from kit.drift.protocol import write_small_protocol
    from kit.owned import publish, staged

    folder = o.runs / "protocols"
    names = ("drift-small.yaml", "corpus-detectors-small.yaml")
    with staged(folder) as staging:
        write_small_protocol(staging / names[0])
        small_study(staging / names[1], SMALL_RELEASES)
        publish(staging, folder, "python -m kit reproduce-all --small")
    return folder / names[0], folder / names[1]


def _scale(o: Options) -> list[str]:
    found = ["--backend", o.backend] if o.backend else []
    found += ["--scheduler", o.scheduler] if o.scheduler else []
    return found + (["--workers", str(o.workers)] if o.workers else [])


def drift_argv(o: Options) -> list[list[str]]:
    """The study, then its same-machine replay (claims A-112 and A-113 read replay.json)."""
    protocol = ["--protocol", str(small_protocols(o)[0])] if o.small else []
    folder = ["--run", str(o.folder("drift")), "--models", o.model("drift"), *protocol]
    return [["reproduce", *folder, *_scale(o)],
            ["verify", "--replay", *folder, *(["--backend", o.backend] if o.backend else [])]]


def corpus_argv(o: Options) -> list[list[str]]:
    subset = ["--releases", *SMALL_RELEASES, "--cases", SMALL_CASE] if o.small else []
    return [["corpus", "--run", str(o.folder("corpus")), *subset, *_scale(o)]]


def detectors_argv(o: Options) -> list[list[str]]:
    subset: list[str] = []
    if o.small:
        drift, study = small_protocols(o)
        subset = ["--protocol", str(drift), "--study-protocol", str(study), "--cases",
                  SMALL_CASE]
    return [["corpus-detectors", "--run", str(o.folder("corpus-detectors")), *subset,
             "--models", o.model("corpus-detectors"), *_scale(o)]]


def sciml_argv(o: Options) -> list[list[str]]:
    # The SciML study pins torch's kernels before torch first runs: a process of its own.
    return [["sciml", "--run", str(o.folder("sciml")),
             *(["--small"] if o.small else ["--models", o.model("sciml")]),
             *(["--without-physicsnemo"] if o.without_physicsnemo else [])]]


def null_argv(o: Options) -> list[list[str]]:
    return [["sciml", "--run", str(o.folder("sciml-null")), "--models", "null",
             *(["--without-physicsnemo"] if o.without_physicsnemo else [])]]


def sweep_argv(o: Options) -> list[list[str]]:
    from kit.drift.stages.pipeline import finished as drift_finished
    from kit.runfolder import Run

    subset: list[str] = []
    if o.small:
        subset = ["--protocol", str(small_protocols(o)[0]), "--releases", *SMALL_RELEASES,
                  "--levels", *SMALL_LEVELS, "--threads", "1", "2"]
    if drift_finished(Run(o.folder("drift"))):  # Polygraphy on its fault matrix too
        subset += ["--drift-run", str(o.folder("drift"))]
    return [["sweep", "--run", str(o.folder("sweep")), *subset, "--models", o.model("sweep"),
             *_scale(o)]]


# Each step is its study's own commands (``python -m kit ARGV``), each run in a process of
# its own: the studies set process-wide numerics (torch threads, kernel pins) of their own.
ARGV: dict[str, Callable[[Options], list[list[str]]]] = {
    "drift": drift_argv, "corpus": corpus_argv, "corpus-detectors": detectors_argv,
    "sciml": sciml_argv, "sciml-null": null_argv, "sweep": sweep_argv}


def run_step(o: Options, step: str, expected_s: float | None = None) -> None:
    """Run one step's commands, a progress line at least every 30 s while they run (the
    step's time so far and, of ``expected_s``, its time left: one clock over all of the
    step's commands); an error naming the step and the command when one fails. A replay
    that finds differences exits 1 having written its report: a finding, not a failure of
    the step."""
    with heartbeat(f"reproduce-all: step {step}", expected_s):
        for command in ARGV[step](o):
            argv = [sys.executable, "-m", "kit", *command]
            say(f"reproduce-all: {step}: python {' '.join(argv[1:])}")
            code = run_child(argv, cwd=ROOT)  # stopped, the step's command unwinds too
            if code != 0 and not (code == 1 and "--replay" in command):
                raise KitError(f"{o.folder(step)}: step {step} failed (exit {code}) in python "
                               f"{' '.join(argv[1:])}; fix what it names and rerun "
                               "reproduce-all, which resumes")


# The record each step writes last: its presence (with a run manifest that checks out)
# marks a step that finished.
RECORDS = {"drift": "replay.json", "corpus": "corpus/corpus.json",
           "corpus-detectors": "detectors/detectors.json", "sciml": "steps/report.json",
           "sciml-null": "steps/report.json", "sweep": "sweep/sweep.json"}


def finished(o: Options, step: str) -> bool:
    """Whether ``step``'s folder holds a finished run whose files agree with its manifest."""
    folder = o.folder(step)
    return (folder / RECORDS[step]).is_file() and check_manifest(folder) == []
