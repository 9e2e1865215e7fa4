"""The drift stages in order, and one call per stage for nox and the command line."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kit.drift.protocol import PROTOCOL, load_protocol
from kit.drift.stages.bootstrap import run_bootstrap
from kit.drift.stages.fault import run_fault
from kit.drift.stages.fetch import SHIPPED_DIGITS, run_fetch
from kit.drift.stages.infer import run_infer
from kit.drift.stages.report import run_report
from kit.drift.stages.score import run_score
from kit.drift.stages.sensitivity import run_sensitivity
from kit.drift.stages.split import run_split
from kit.errors import KitError
from kit.heartbeat import heartbeat
from kit.runfolder import Run, check_manifest, cpu_seconds, default_run, record_timing, say
from kit.runlock import check_protocol, hold

STAGES = ("fetch", "split", "fault", "infer", "score", "bootstrap", "sensitivity", "report")


def run_stage(name: str, *, substrate: str | None = None, run_dir: Path | None = None,
              assets: Path | None = None, backend: str | None = None,
              protocol_file: Path = PROTOCOL, asset_pins: Path | None = None,
              scheduler: str | None = None, workers: int | None = None,
              models: str = "train") -> dict[str, Any]:
    """Run one stage holding the run folder (``runlock.hold``) under the protocol it was
    started with; returns its record (``asset_pins``: fetch's pins file, if any;
    ``scheduler``, ``workers``: where infer's batches run, ``kit.runtime.scale``;
    ``models``: fetch trains the digits models or takes the shipped ones, and fault then
    injects the shipped severity choices)."""
    if name not in STAGES:
        raise KitError(f"unknown stage {name!r}; stages: {STAGES}")
    protocol = load_protocol(protocol_file)
    chosen = substrate or protocol["substrate_default"]
    with hold(run_dir or default_run(chosen).root) as root:
        check_protocol(root, protocol, protocol_file)
        run = Run(root)
        steps: dict[str, Callable[[], dict[str, Any]]] = {
            "fetch": lambda: run_fetch(protocol, run, chosen, assets, asset_pins, models),
            "split": lambda: run_split(protocol, run),
            "fault": lambda: run_fault(protocol, run, backend, scheduler, workers,
                                       SHIPPED_DIGITS if models == "shipped" else None),
            "infer": lambda: run_infer(protocol, run, backend, scheduler, workers),
            "score": lambda: run_score(protocol, run),
            "bootstrap": lambda: run_bootstrap(protocol, run),
            "sensitivity": lambda: run_sensitivity(protocol, run),
            "report": lambda: run_report(protocol, run),
        }
        if name != "fetch" and run.record("fetch")["substrate"] != chosen:
            raise KitError(f"{run.root}: fetched for substrate "
                           f"{run.record('fetch')['substrate']!r}, not {chosen!r}; use another "
                           "--run folder")
        run.forget(name)
        start, cpu = time.monotonic(), cpu_seconds()
        with heartbeat(f"{name}: running"):  # fetch trains for minutes on a busy machine
            record = steps[name]()
        elapsed, cpu = time.monotonic() - start, cpu_seconds() - cpu
        record_timing(run, name, elapsed, cpu)
        say(f"{name}: done in {elapsed:.1f} s, {cpu:.0f} CPU s ({run.root})")
        return record


def reproduce(stages: tuple[str, ...] = STAGES, **options: Any) -> Path:
    """Every stage in order, holding the run folder throughout; returns the run folder
    after checking its manifest."""
    protocol = load_protocol(options.get("protocol_file", PROTOCOL))
    run_dir = options.get("run_dir") or default_run(
        options.get("substrate") or protocol["substrate_default"]).root
    with hold(Path(run_dir)):
        for name in stages:
            run_stage(name, **options)
        problems = check_manifest(Path(run_dir))
    if problems:
        raise KitError("run manifest does not check out:\n" + "\n".join(problems[:20]))
    return Path(run_dir)


def digits_images(run: Run, backend: str | None, protocol_file: Path,
                  models: str = "train") -> list[str]:
    """Fetch and split a digits run folder where they have not run yet (the models and
    images the real-drift sweep and the corpus detector study reuse from the drift study;
    ``models``: fetch trains them or takes the shipped ones); returns the source condition
    and the primary rotation's name."""
    for stage in ("fetch", "split"):
        if not run.record_path(stage).is_file():
            run_stage(stage, substrate="digits", run_dir=run.root, backend=backend,
                      protocol_file=protocol_file, models=models)
    conditions = run.record("split")["conditions"]
    return ["orig", next(name for name, c in conditions.items() if c.get("primary"))]


def finished(run: Run) -> bool:
    """Whether every stage with a record finished (a killed stage leaves none) and the
    folder agrees with its manifest."""
    return all(run.record_path(name).is_file() for name in STAGES if name != "report") \
        and check_manifest(run.root) == []
