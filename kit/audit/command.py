"""``python -m kit audit MODEL.onnx --inputs X.npz --from RELEASE[/LEVEL] --to
RELEASE[/LEVEL]`` (``nox -s audit``): does the move change the model's outputs beyond
clean drift, where first, and does a known defect touch it.

1. Check everything first (``kit.audit.model``): the model, the inputs against its inputs,
   both cells against the kit's releases and levels. A bad one is a ``kit: error`` before
   any environment is built.
2. The static screen (``kit.audit.screen``), no runtime.
3. One job per cell and run of inputs in the kit's worker, under each release's
   hash-locked environment, on any backend (venv, docker, Dask): the two audited cells
   and the clean pairs of ``kit/protocols/audit.yaml``. On the venv backend each release's
   cells run in one worker process for the whole audit (``kit.runtime.serve``; the record's
   ``worker_processes``, null on docker or a Dask scheduler, which start one worker per
   batch), with no cluster to start.
4. Per output: largest absolute and relative difference, bit-identical share, argmax
   flips, Polygraphy's default verdict, the calibrated verdict (``kit.audit.calibrate``);
   only when the verdict is beyond clean drift, which side onnx's reference
   implementation sides with (``kit.audit.oracle``) and, from the instrumented copy run
   on every cell too, the first node that leaves its clean envelope.
5. ``audit.json`` and ``index.html`` in the report folder. Exit 0 within clean drift, 1
   beyond it, when it cannot calibrate, or on an affected known defect whose pattern
   decides (an advisory match is shown, never the exit code); 2 on an error.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from kit.audit.calibrate import calibrate, first_moving, flips, reshaped, verdict
from kit.audit.model import (
    Cell,
    carry_external,
    check_inputs,
    external_files,
    fixed_batch,
    load_model,
    load_protocol,
    parse_cell,
    probe,
)
from kit.audit.oracle import judge_sides
from kit.audit.report import write_report
from kit.audit.screen import screen
from kit.errors import KitError
from kit.files import load_npz, write_atomic, write_npz
from kit.owned import publish, staged
from kit.paths import ROOT
from kit.runfolder import say
from kit.runtime.serve import Workers
from kit.tolerance import TINY

GRAPHS = {"plain": "model.onnx", "probe": "probe.onnx"}
RUN_ROWS = 64  # inputs per worker call for a model whose first axis is dynamic


def clean_partners(side: Cell, protocol: dict[str, Any]) -> list[Cell]:
    """The clean pairs' other cells for one side (the protocol's rule)."""
    pairs = protocol["clean_pairs"]
    others = [Cell(side.release, level) for level in pairs["levels"] if level != side.level]
    return others + [Cell(side.release, side.level, t) for t in pairs["threads"] if t != 1]


def run_command(args: argparse.Namespace) -> int:
    from kit.runtime.scale import check_options

    check_options(args.scheduler, args.workers)
    protocol = load_protocol()
    sides = {"from": parse_cell(args.source, "--from", protocol),
             "to": parse_cell(args.target, "--to", protocol)}
    check_release_pair(sides)
    model = load_model(args.model)
    if args.inputs is None and not args.screen_only:
        raise KitError("audit: --inputs X.npz is needed to run the model (or --screen-only "
                       "for the static screen alone)")
    arrays = None if args.inputs is None else \
        check_inputs(model, args.inputs, protocol["inputs"]["minimum"])
    out = args.out or ROOT / "runs" / "audit" / args.model.stem
    external_files(args.model)  # checked before anything runs
    known = screen(model, sides, protocol)
    record: dict[str, Any] = {"model": str(args.model), "inputs": str(args.inputs or ""),
                              "sides": {k: v.__dict__ for k, v in sides.items()},
                              "protocol_version": protocol["version"], "screen": known}
    on_affected = [row for row in known if "affected" in (row["from"], row["to"])]
    touched = [row["case"] for row in on_affected if row["decides"]]
    advisory = [row["case"] for row in on_affected if not row["decides"]]
    with staged(out) as staging:  # kit.owned: a folder the kit did not write is refused
        if arrays is not None and not args.screen_only:
            started = time.monotonic()
            record.update(measure(model, arrays, sides, protocol, staging, args))
            if getattr(args, "bisect", False) and record["verdict"] == "beyond clean drift":
                record["bisect"] = run_bisect(model, arrays, sides, protocol, staging, args,
                                              (record.get("first_moving"),
                                               record.get("unlocalised")))
            record["wall_s"] = round(time.monotonic() - started, 1)
        else:
            record["verdict"], record["why"] = "screen only", "no runtime was run"
        record["known_defects_affecting"] = touched
        record["advisory_matches_affecting"] = advisory
        write_report(staging, record)
        publish(staging, out, "python -m kit audit", commit="audit.json")
    say(f"audit: {record['verdict']}; known defects on an affected side: "
        f"{', '.join(touched) or 'none'}; advisory matches (not deciding): "
        f"{', '.join(advisory) or 'none'}; report {out / 'index.html'}")
    return 1 if touched or record["verdict"] in ("beyond clean drift", "cannot calibrate") \
        else 0


def run_bisect(model: Any, arrays: dict[str, Any], sides: dict[str, Cell],
               protocol: dict[str, Any], out: Path, args: argparse.Namespace,
               to_moving: tuple[dict[str, Any] | None, str | None]) -> dict[str, Any]:
    """``kit.audit.bisect`` over the locked releases between FROM and TO, each visited
    release audited from FROM as the main audit was."""
    from kit.audit.bisect import bisect
    from kit.runtime.runtimes import known_releases

    def one(cell: Cell, work: Path) -> dict[str, Any]:
        say(f"audit: bisect visits {cell.name}")
        return measure(model, arrays, {"from": sides["from"], "to": cell}, protocol, work,
                       args)

    found = bisect(sides["from"], sides["to"], list(known_releases()), one, out / "bisect",
                   lambda cell: screen(model, {"from": sides["from"], "to": cell}, protocol))
    if found["first_moving"] is None and found["first_release"] == sides["to"].release:
        # TO itself: the main audit's first node, or why it names none
        found["first_moving"], found["unlocalised"] = to_moving
    return found


def measure(model: Any, arrays: dict[str, Any], sides: dict[str, Cell],
            protocol: dict[str, Any], out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Run every cell and graph in ``out/work`` (``out``: the audit's staging folder, moved
    into the report folder whole by ``kit.owned.publish``), then calibrate, judge and
    localise."""
    work = out / "work"
    work.mkdir()
    os.chmod(out, 0o755)  # the docker worker reads them as the image's own user
    os.chmod(work, 0o755)
    with Workers(args.backend, args.scheduler, args.workers, say) as pool:
        found = _measure(model, arrays, sides, protocol, work, args, pool)
    # per release on the serving venv backend; null where workers start per batch
    return {**found, "worker_processes": dict(sorted(pool.started.items()))
            if pool.serving else None}


def _measure(model: Any, arrays: dict[str, Any], sides: dict[str, Cell],
             protocol: dict[str, Any], work: Path, args: argparse.Namespace,
             pool: Workers) -> dict[str, Any]:
    write_atomic(work / GRAPHS["plain"], model.SerializeToString())
    external = external_files(args.model)
    carry_external(external, work)
    feeds = write_inputs(work, arrays, fixed_batch(model))
    outputs, whole, partners, cells = run_plain(sides, protocol, work, feeds, args, pool)
    n = len(next(iter(arrays.values())))
    n_cal = calibration_count(n, protocol)
    alarm, rate = protocol["alarm"], protocol["alarm"]["false_alarm_rate"]

    def judge(graph: str) -> dict[str, Any]:
        names = outputs[(sides["from"], graph)].keys()
        return {name: calibrate(
            [(outputs[(side, graph)][name], outputs[(p, graph)][name])
             for key, side in sides.items() for p in partners[key]],
            (outputs[(sides["from"], graph)][name], outputs[(sides["to"], graph)][name]),
            n_cal, alarm) for name in names}

    plain = judge("plain")
    found, why = verdict(plain, rate)
    if not any(partners.values()):
        found, why = "within clean drift", IDENTICAL
    dialled = None
    if getattr(args, "dial", False):  # the sensitivity on this model, beside Polygraphy's
        from kit.audit.dial import dial

        dialled = [row for name in plain for row in dial(
            [(outputs[(side, "plain")][name], outputs[(p, "plain")][name])
             for key, side in sides.items() for p in partners[key]],
            outputs[(sides["from"], "plain")][name], n_cal, alarm, name)]
    rows = {name: {**c.as_dict(), **({} if any(partners.values()) else {"tau": None}),
                   **describe(outputs[(sides["from"], "plain")][name],
                              outputs[(sides["to"], "plain")][name], name)}
            for name, c in plain.items()}
    moving, exposed, moving_why = None, None, None
    oracle = {"ran": False, "why": "not run: the two sides agree within clean drift, so "
              "neither is nearer a reference than rounding", "outputs": {}}
    if found == "beyond clean drift":  # which side is right, and where it first moves
        batched = [name for name in plain  # on one side at least: the other may have lost it
                   if any(len(outputs[(cell, "plain")][name]) == n for cell in sides.values())]
        oracle = judge_sides(onnx.load(str(args.model)) if external else model, arrays,
                             *({name: outputs[(sides[key], "plain")][name] for name in batched}
                               for key in ("from", "to")))
        exposed = probe(model, work / GRAPHS["probe"], protocol["localisation"]["op_types"])
        probed, more = run_cells(cells, work, feeds, pool, "probe")
        outputs.update(probed)
        whole.update(more)
        moving, moving_why = localise(judge("probe"), exposed, list(plain), rate)
        for path in work.glob("outputs/*/*/probe-*"):  # every activation of every input
            path.unlink()
    pairs = [f"{side.name} vs {p.name}" for key, side in sides.items() for p in partners[key]]
    return {"verdict": found, "why": why, "outputs": rows, "inputs_n": n, "calibration_n": n_cal,
            "clean_pairs": pairs, "compared_whole": whole,
            "external_data": sorted(external), "cells": [c.name for c in cells],
            "exposed": None if exposed is None else len(exposed), "oracle": oracle,
            "envelope": "run" if any(partners.values()) else "not run: bit-identical",
            "first_moving": moving, **({} if moving_why is None else {"unlocalised": moving_why}),
            **({} if dialled is None else {"dial": dialled})}


def calibration_count(n: int, protocol: dict[str, Any]) -> int:
    """The inputs that calibrate: the protocol's share of ``n``, rounded up, at least one
    and leaving one held out."""
    n_cal = -(-n * protocol["inputs"]["calibration_share"] // 1)
    return int(min(max(n_cal, 1), n - 1))


IDENTICAL = ("the two sides' outputs are bit-identical on every input: a zero difference is "
             "within every envelope, so the clean pairs were not run (--envelope runs them)")


def run_plain(sides: dict[str, Cell], protocol: dict[str, Any], work: Path,
              feeds: list[tuple[str, int]], args: argparse.Namespace, pool: Workers
              ) -> tuple[dict[tuple[Cell, str], dict[str, Any]], dict[str, str],
                         dict[str, list[Cell]], list[Cell]]:
    """The plain graph's outputs: the audited pair first, then the clean pairs' cells only
    when some output of the pair differs in a bit, or ``--envelope`` or ``--dial`` asks
    (``clean_pairs.when`` of the protocol). Also the tensors compared whole, each side's
    partners (none when they were not run) and every cell run."""
    pair = list(dict.fromkeys(sides.values()))
    partners = {side: clean_partners(cell, protocol) for side, cell in sides.items()}
    rest = list(dict.fromkeys(c for p in partners.values() for c in p if c not in pair))
    if getattr(args, "envelope", False) or getattr(args, "dial", False):  # all at once
        return (*run_cells(pair + rest, work, feeds, pool, "plain"), partners, pair + rest)
    outputs, whole = run_cells(pair, work, feeds, pool, "plain")
    a, b = (outputs[(sides[key], "plain")] for key in ("from", "to"))
    if a.keys() == b.keys() and all(same_bits(a[name], b[name]) for name in a):
        return outputs, whole, {key: [] for key in sides}, pair
    more, more_whole = run_cells(rest, work, feeds, pool, "plain")
    outputs.update(more)
    whole.update(more_whole)
    return outputs, whole, partners, pair + rest


def same_bits(a: Any, b: Any) -> bool:
    """One shape, one dtype and the same bytes (a -0.0 against a 0.0 differs, as do two
    NaNs of other payloads); strings by value."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return a.tobytes() == b.tobytes() if a.dtype.kind != "O" else bool(np.array_equal(a, b))


def localise(probed: dict[str, Any], exposed: list[dict[str, str]], names: list[str],
             rate: float) -> tuple[dict[str, Any] | None, str | None]:
    """The first exposed tensor that moves in the instrumented copy; where none does, why
    (the plain graph's outputs moved, or there would be nothing to localise)."""
    moving = first_moving(probed, exposed, rate)
    if moving is not None:
        return moving, None
    unmoved = all(probed[name].audited_rate <= rate for name in names)
    return None, UNDONE if unmoved else UNEXPOSED


UNDONE = ("no instrumented node leaves its clean envelope, and neither do the instrumented "
          "copy's outputs: exposing its tensors undoes what moves the plain graph (a fusion "
          "or an elimination across the exposed tensors; the corpus's fusion cases do so)")
UNEXPOSED = ("no instrumented node leaves its clean envelope, but the instrumented copy's "
             "outputs do: the move starts in a node the copy leaves unexposed (an op outside "
             "the protocol's op_types, or a tensor of an unknown type)")


def describe(a: Any, b: Any, name: str) -> dict[str, Any]:
    """The plain measures of one output: largest absolute and relative difference, argmax
    flips, Polygraphy's default verdict per input; none of them for two arrays of other
    shapes or dtypes, which fail every input (``calibrate.reshaped``)."""
    from kit.drift.polygraphy_check import polygraphy_fails

    if reshaped(a, b):
        return {"max_abs": None, "max_rel": None, "flips": None,
                "polygraphy_fails": len(a), "polygraphy_verdict": "fails (shapes differ)"}
    diff = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))
    rel = diff / np.maximum(np.abs(np.asarray(a, np.float64)), TINY)
    fails = polygraphy_fails(np.asarray(a, np.float32), np.asarray(b, np.float32), name)
    return {"max_abs": float(np.nanmax(diff, initial=0.0)),
            "max_rel": float(np.nanmax(np.where(diff == 0, 0, rel), initial=0.0)),
            "flips": flips(np.asarray(a), np.asarray(b)),
            "polygraphy_fails": int(fails.sum()), "polygraphy_verdict":
                "fails" if fails.any() else "passes"}


def write_inputs(work: Path, arrays: dict[str, Any], fixed: int | None
                 ) -> list[tuple[str, int]]:
    """The inputs file(s) the jobs read and the rows of each: runs of the model's fixed
    first axis (the worker feeds a model only the shape it declares), else of ``RUN_ROWS``
    (one ``inputs.npz`` when they all fit)."""
    n = len(next(iter(arrays.values())))
    step = fixed or RUN_ROWS
    if fixed is None and n <= step:
        write_npz(work / "inputs.npz", arrays)
        return [("inputs.npz", n)]
    feeds = []
    for i in range(0, n, step):
        name = f"inputs-{i // step:05d}.npz"
        write_npz(work / name, {k: v[i:i + step] for k, v in arrays.items()})
        feeds.append((name, min(step, n - i)))
    return feeds


def run_cells(cells: list[Cell], work: Path, feeds: list[tuple[str, int]],
              pool: Workers, graph: str
              ) -> tuple[dict[tuple[Cell, str], dict[str, Any]], dict[str, str]]:
    """Every cell and inputs file of one graph (``GRAPHS``) in the kit's worker, one batch
    per release to that release's worker in ``pool`` (``kit.runtime.serve``: one process
    per release for every round of the audit), each file in one call (``whole``: a tensor
    may lack a batch axis); each cell's outputs stacked back in input order (``stacked``).
    Also the tensors compared whole, with the shape of their first run."""
    from kit.runtime.runtimes import release_runtime
    from kit.runtime.scale import Batch

    jobs: dict[str, list[dict[str, Any]]] = {}
    paths: dict[tuple[Cell, str], list[Path]] = {}
    for cell in cells:
        for feed, rows in feeds:
            output = f"outputs/{cell.release}/{cell.level}-t{cell.threads}/{graph}-{feed}"
            paths.setdefault((cell, graph), []).append(work / output)
            jobs.setdefault(cell.release, []).append({
                "id": f"{cell.name}/{graph}/{feed}", "model": GRAPHS[graph], "inputs": feed,
                "graph_optimization": cell.level, "intra_op_threads": cell.threads,
                "output": output, "batch_size": rows, "whole": True})
    batches = [Batch(release_runtime(release), tuple(found), release)
               for release, found in jobs.items()]
    say(f"audit: {sum(len(j) for j in jobs.values())} jobs of the {graph} graph over "
        f"{len(cells)} cells")
    pool.run(batches, work, work)
    found: dict[tuple[Cell, str], dict[str, Any]] = {}
    whole: dict[str, str] = {}
    sizes = [rows for _, rows in feeds]
    for key, files in paths.items():
        parts = [load_npz(path) for path in files]
        found[key] = {name: stacked([part[name] for part in parts], sizes, name, whole)
                      for name in parts[0]}
    return found, whole


def stacked(parts: list[Any], sizes: list[int], name: str, whole: dict[str, str]) -> Any:
    """One tensor's runs in input order: concatenated along the batch axis where every run
    carries its rows first, else compared whole (every run's values as one row of one
    input, its shape recorded in ``whole``): an attention tensor laid out by head or by
    sequence position is judged, never refused."""
    if all(p.ndim and p.shape[0] == rows for p, rows in zip(parts, sizes, strict=True)):
        return np.concatenate(parts)
    whole.setdefault(name, " + ".join(f"{p.dtype}{list(p.shape)}" for p in parts))
    return np.concatenate([p.reshape(-1) for p in parts]).reshape(1, 1, -1)


def check_release_pair(sides: dict[str, Cell]) -> None:
    if sides["from"] == sides["to"]:
        raise KitError("--from and --to name the same cell; nothing moves")
