"""The run folder of the drift study: where each stage reads and writes, the run
manifest (sha256 of every file), and progress lines for long stages.

    <run>/fetch/   dataset.npz, models/<m>.onnx, models/<m>.sketch.onnx, fetch.json
    <run>/split/   sample.json, images/<cond>.npz, inputs/<cond>.npz, split.json
    <run>/fault/   models/<m>/<fault>.onnx, fault.json, severity.json (+ severity-here.json
                   on the shipped models: the rule's own choices on this CPU)
    <run>/infer/   <cell>/<m>/<variant>/<graph>-<cond>.npz (+ .meta.json), infer.json
    <run>/score/   cases/<cell>-<cond>.npz, layers.npz, clean-logits.npz, summary.json
    <run>/bootstrap/  replicates.npz, summary.json;  <run>/sensitivity/summary.json
    <run>/manifest.json

Not hashed (run metadata, not results): ``<run>/timings.json`` (wall time per stage),
``<run>/machine.json`` (the machine fingerprint of the last stage run),
``<run>/replay.json`` (the last replay's comparison), ``<run>/.lock`` (the pid of the
command holding the folder), ``<run>/run.json`` (the sha256 of the protocol the folder was
started with; ``kit/runlock.py``), ``<run>/training-cache.json`` (the digits
models' training-cache keys, which hash the training code, and whether each came from the
cache), temporaries (``.NAME.kit<pid>-<random>.tmp``, the kit's one temporary name,
``kit.files.TEMPORARY``; removed when a command takes the folder and their writer is
gone), ``<run>/.kit-replay`` (the mark of a replay folder the kit made,
``kit/drift/replay.py``), ``<run>/steps/`` (the
SciML pipeline's per-step state) and ``<run>/report/`` (tables, figures and the HTML page,
which show the timings and the machine), so a replay compares results only.

A stage's record (``<stage>/<stage>.json``) is written last and removed when the stage
starts, so it marks a stage that finished: a killed stage leaves none.
"""

from __future__ import annotations

import os
import re
import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit import schema
from kit.errors import FileFormatError, KitError
from kit.files import TEMPORARY, canonical_json, read_json, sha256, write_atomic
from kit.heartbeat import stderr_line
from kit.paths import ROOT

MANIFEST = "manifest.json"
SHIPPED_MANIFEST = "run-manifest.json"  # the run manifest, as ship names it beside the evidence
TIMINGS = "timings.json"
MACHINE = "machine.json"
# A SciML run's trained subjects' checkpoints, hashed and shipped with its evidence.
WEIGHTS_DIR = "weights"
REPLAY = "replay.json"
LOCK = ".lock"
RUN_STATE = "run.json"
TRAINING_CACHE = "training-cache.json"  # the digits models' cache keys (code hashes)
REPLAY_MARK = ".kit-replay"  # written by the kit into a replay folder it makes
# Run metadata beside the results, never inside the run manifest.
CPU_TIMES = "cpu.json"  # per stage: wall and CPU seconds, cores, utilisation (nox -s bench)
# The stage records a later stage reads fields of, checked on every read.
RECORD_SCHEMAS = {"fetch": "fetch_record.schema.json"}
UNHASHED = (MANIFEST, TIMINGS, MACHINE, REPLAY, LOCK, RUN_STATE, TRAINING_CACHE, CPU_TIMES,
            REPLAY_MARK)
STEPS_DIR = "steps"  # the SciML pipeline's per-step state (kit/sciml/pipeline.py)
UNHASHED_DIRS = ("report", STEPS_DIR)
# A name read out of a run's records (a substrate, a table path, an evidence file, a run
# manifest entry): a relative POSIX path of plain segments. NAME_MAX bounds a segment (the
# file system's limit), PATH_MAX the whole (the longest shipped name is under 100).
PLAIN_SEGMENT = re.compile(r"[A-Za-z0-9_+=@,-][A-Za-z0-9._+=@,-]*")
NAME_MAX = 255
PATH_MAX = 1024


@dataclass(frozen=True)
class Run:
    """A run folder for one substrate."""

    root: Path

    def stage(self, name: str) -> Path:
        return self.root / name

    def record_path(self, stage: str) -> Path:
        return self.root / stage / f"{stage}.json"

    def record(self, stage: str) -> dict[str, Any]:
        """A finished stage's record (``<stage>/<stage>.json``); KitError when absent or
        damaged."""
        path = self.record_path(stage)
        if not path.is_file():
            raise KitError(f"{path}: stage {stage!r} has not run in {self.root}; run it first "
                           f"(nox -s {stage})")
        fix = (f"delete the stage folder {path.parent} and rerun the stage "
               f"(python -m kit stage {stage} --run {self.root}, with the run's --protocol)")
        record = read_json(path, fix)
        if not isinstance(record, dict):
            raise FileFormatError(f"{path}: not a JSON object; {fix}")
        if stage in RECORD_SCHEMAS:
            schema.check(record, RECORD_SCHEMAS[stage], f"{path} ({fix})", FileFormatError)
        return record

    def listed(self, stage: str, name: object, field: str) -> Path:
        """The file ``name`` that stage ``stage``'s record names in ``field``, once it is
        a plain relative name inside the run folder (``inside``)."""
        return inside(self.root, plain_name(name, self.record_path(stage), field),
                      self.record_path(stage), field)

    def forget(self, stage: str) -> None:
        """Remove a stage's record as the stage starts: until it finishes, it has not run."""
        self.record_path(stage).unlink(missing_ok=True)

    def write_record(self, stage: str, record: dict[str, Any]) -> Path:
        """Write a stage record, then refresh the run manifest."""
        path = self.record_path(stage)
        write_atomic(path, canonical_json(record))
        write_manifest(self.root)
        return path


def plain_name(value: object, source: Path, field: str, segments: int | None = None) -> str:
    """``value`` when it is a plain relative name (``segments`` of them at most, any
    number when None); FileFormatError naming ``source`` and ``field`` otherwise. A plain
    segment holds letters, digits and ``._+=@,-``, does not start with a dot and is at
    most NAME_MAX long; segments are joined by ``/``: no absolute path, no ``..``, no
    backslash, no empty segment, at most PATH_MAX characters in all."""
    fix = "the record is not the kit's; rerun the stage that wrote it"
    if not isinstance(value, str):
        raise FileFormatError(f"{source}: {field} is {type(value).__name__} "
                              f"{str(value)[:80]!r}, not a name; {fix}")
    parts = value.split("/")
    if (len(value) > PATH_MAX or (segments is not None and len(parts) > segments)
            or not all(PLAIN_SEGMENT.fullmatch(p) and len(p) <= NAME_MAX for p in parts)):
        shape = "one plain name" if segments == 1 else "a relative path of plain names"
        raise FileFormatError(
            f"{source}: {field} {value[:200]!r} is not {shape} (letters, digits and "
            f"'._+=@,-', no leading dot, no '..', '/' first, backslash or empty part, at "
            f"most {NAME_MAX} characters a part and {PATH_MAX} in all); {fix}")
    return value


def inside(base: Path, name: str, source: Path, field: str) -> Path:
    """``base / name`` once it resolves inside ``base`` (symbolic links followed): a
    link that leads out is refused as a FileFormatError naming ``source`` and ``field``."""
    path = base / plain_name(name, source, field)
    resolved, home = path.resolve(), base.resolve()
    if resolved != home and home not in resolved.parents:
        raise FileFormatError(f"{source}: {field} {name!r} leads out of {base} (to "
                              f"{resolved}); the run folder holds a link that is not the "
                              "kit's: remove it and rerun the stage")
    return path


def unlinked(base: Path, name: str, fix: str) -> Path:
    """``base / name``, a file the kit reads at a fixed name in a folder a user names (an
    audit's, a run's records), once neither it nor a folder between ``base`` and it is a
    symbolic link: no link is followed out (nor in: ``inside`` allows one that stays);
    a FileFormatError naming the link otherwise."""
    parts = Path(name).parts
    for step in (base.joinpath(*parts[:n]) for n in range(1, len(parts) + 1)):
        if step.is_symlink():
            raise FileFormatError(f"{step}: a symbolic link (to {os.readlink(step)}), and "
                                  f"the kit reads no file through a link; {fix}")
    return base / name


def default_run(substrate: str) -> Run:
    """``<repo>/runs/<substrate>``."""
    return Run(ROOT / "runs" / substrate)


def hashed_files(root: Path) -> list[Path]:
    """Every result file of a run folder (sorted): not the manifest, the timings, the
    report or a temporary file."""
    return [path for path in sorted(root.rglob("*"))
            if path.is_file() and not TEMPORARY.fullmatch(path.name)
            and path.relative_to(root).as_posix() not in UNHASHED
            and path.relative_to(root).parts[0] not in UNHASHED_DIRS]


def cpu_seconds() -> float:
    """CPU time of this process and of every child it has reaped (worker processes,
    training processes, the Dask cluster's workers once closed)."""
    own, children = (resource.getrusage(who) for who in
                     (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def record_timing(run: Run, stage: str, seconds: float, cpu: float | None = None) -> None:
    """Add one stage's wall time to the (unhashed) timings file, and ``cpu`` (its CPU
    seconds) with the utilisation of the machine's cores to ``cpu.json``; write the
    machine fingerprint beside them (byte identity holds per machine)."""
    from kit.machine import fingerprint

    write_atomic(run.root / MACHINE, canonical_json(fingerprint()))
    if cpu is not None:
        cores = os.cpu_count() or 1
        path = run.root / CPU_TIMES
        found = read_json(path, f"delete {path} (run metadata)") if path.is_file() else {}
        found = found if isinstance(found, dict) else {}
        found[stage] = {"wall_s": round(seconds, 1), "cpu_s": round(cpu, 1), "cores": cores,
                        "utilisation": round(cpu / (seconds * cores), 3) if seconds > 0 else 0.0}
        write_atomic(path, canonical_json(found))
    path = run.root / TIMINGS
    timings = read_json(path, f"delete {path} (wall times only)") if path.is_file() else {}
    timings = timings if isinstance(timings, dict) else {}
    timings[stage] = round(seconds, 1)
    write_atomic(path, canonical_json(timings))


def write_manifest(root: Path) -> Path:
    """sha256 of every result file under ``root`` (sorted relative paths)."""
    files = {path.relative_to(root).as_posix(): sha256(path) for path in hashed_files(root)}
    target = root / MANIFEST
    write_atomic(target, canonical_json({"files": files}))
    return target


def check_manifest(root: Path) -> list[str]:
    """Problems between the run folder and its manifest (empty when they agree)."""
    path = root / MANIFEST
    if not path.is_file():
        return [f"{path}: no run manifest"]
    fix = f"delete {path} and rerun the last stage"
    manifest = read_json(path, fix)
    listed = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(listed, dict):
        return [f"{path}: no 'files' mapping; {fix}"]
    present = {p.relative_to(root).as_posix() for p in hashed_files(root)}
    problems = [f"{root / name}: listed but missing" for name in sorted(set(listed) - present)]
    problems += [f"{root / name}: present but not listed" for name in sorted(present - set(listed))]
    problems += [f"{root / name}: sha256 differs from the manifest"
                 for name in sorted(set(listed) & present)
                 if sha256(root / name) != listed[name]]
    return problems


class Progress:
    """Count, rate and ETA on stderr for a stage with a known number of steps."""

    def __init__(self, what: str, total: int) -> None:
        self.what, self.total, self.done = what, total, 0
        self.start = time.monotonic()

    def step(self, note: str = "") -> None:
        self.done += 1
        elapsed = time.monotonic() - self.start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else 0.0
        stderr_line(f"{self.what}: {self.done}/{self.total} ({rate:.2f}/s, eta {eta:.0f} s) {note}")


def say(text: str) -> None:
    """A progress line for a person watching a stage."""
    stderr_line(text)
