"""``python -m kit audit MODEL.onnx --inputs X.npz --from RELEASE[/LEVEL] --to
RELEASE[/LEVEL]`` (``nox -s audit``): does the move change the model's outputs beyond
clean drift, where first, and does a known defect touch it.

1. Check everything first (``kit.audit.model``): the model, the inputs against its inputs,
   no node drawing random numbers without a seed (``unseeded_random``: two runs of one
   release already differ), both cells against the kit's releases and levels. A bad one
   is a ``kit: error`` before any environment is built.
2. The static screen (``kit.audit.screen``), no runtime.
3. One job per cell and run of inputs in the kit's worker, under each release's
   hash-locked environment, on any backend (venv, docker, Dask): the two audited cells
   and the clean pairs of ``kit/protocols/audit.yaml``. On the venv backend each release's
   cells run in one worker process for the whole audit (``kit.runtime.serve``; the record's
   ``worker_processes``, null on docker or a Dask scheduler, which start one worker per
   batch), with no cluster to start; each cell's outputs stacked back in input order or
   compared whole (``kit.audit.cells``). A worker's refusal is named as the user knows
   the files: the model or the inputs file, and the release (``kit.audit.failures``).
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
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from kit.audit.calibrate import calibrate, describe, first_moving, verdict
from kit.audit.cells import (
    GRAPHS,
    Whole,
    as_run,
    first_run,
    label,
    merge_whole,
    run_cells,
    write_inputs,
)
from kit.audit.failures import named
from kit.audit.model import (
    Cell,
    carry_external,
    check_inputs,
    external_files,
    fixed_batch,
    graph_inputs,
    input_count,
    load_model,
    load_protocol,
    parse_cell,
    probe,
    sliced,
    unseeded_random,
    widen,
)
from kit.audit.oracle import judge_sides, spec_shapes, which_shape
from kit.audit.report import write_report
from kit.audit.screen import screen
from kit.errors import KitError, WorkerFailed
from kit.files import write_atomic
from kit.owned import publish, staged
from kit.paths import ROOT
from kit.runfolder import say
from kit.runtime.scratch import SHARED_FILE, SHARED_FOLDER
from kit.runtime.serve import Workers
from kit.runtime.worker import nonfinite_count


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
    check_release_pair(sides, getattr(args, "bisect", False))
    model = load_model(args.model)
    if args.inputs is None and not args.screen_only:
        raise KitError(f"{args.model}: --inputs X.npz is needed to run the model (one array "
                       f"per graph input: {', '.join(graph_inputs(model)) or 'none'}), or "
                       "--screen-only for the static screen alone")
    arrays = None if args.inputs is None else \
        check_inputs(model, args.inputs, protocol["inputs"]["minimum"], sets(args))
    drawn = unseeded_random(model.graph) if arrays is not None else []
    if drawn:
        raise KitError(f"{args.model}: {', '.join(drawn[:3])}{' and more' if drawn[3:] else ''}"
                       f" draw{'s' if len(drawn) == 1 else ''} random numbers without a seed, "
                       "so two runs of one release already differ and a difference between "
                       "releases says nothing; set the seed attribute to audit the model")
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
    os.chmod(out, SHARED_FOLDER)  # the docker worker reads them as the image's own user
    os.chmod(work, SHARED_FOLDER)
    feeds = write_inputs(work, arrays, fixed_batch(model), sets(args))
    with Workers(args.backend, args.scheduler, args.workers, say) as pool:
        try:
            found = _measure(model, arrays, sides, protocol, work, feeds, args, pool)
        except WorkerFailed as exc:  # it names the staged files: name the user's
            raise named(exc, work, args.model, args.inputs, feeds) from exc
    # per release on the serving venv backend; null where workers start per batch
    return {**found, "worker_processes": dict(sorted(pool.started.items()))
            if pool.serving else None}


def _measure(model: Any, arrays: dict[str, Any], sides: dict[str, Cell],
             protocol: dict[str, Any], work: Path, feeds: list[tuple[str, int | None]],
             args: argparse.Namespace, pool: Workers) -> dict[str, Any]:
    plain_copy, compared_as = widen(model)  # a type numpy lacks, cast exactly
    write_atomic(work / GRAPHS["plain"], plain_copy.SerializeToString(), SHARED_FILE)
    external = external_files(args.model)
    carry_external(external, work)
    outputs, whole, partners, cells = run_plain(sides, protocol, work, feeds, args, pool)
    n = input_count(arrays)
    n_cal = calibration_count(n, protocol)
    alarm, rate = protocol["alarm"], protocol["alarm"]["false_alarm_rate"]

    def judge(graph: str) -> dict[str, Any]:
        clean = [[outputs[(side, graph)], outputs[(p, graph)]]
                 for key, side in sides.items() for p in partners[key]]
        return judged({key: outputs[(cell, graph)] for key, cell in sides.items()},
                      {key: label(cell, graph) for key, cell in sides.items()}, clean,
                      n_cal, alarm, whole)

    plain = judge("plain")
    found, why = verdict(plain, rate)
    if not any(partners.values()):
        found, why = "within clean drift", IDENTICAL
    dialled = dialled_rows(outputs, sides, partners, list(plain), n_cal, alarm) \
        if getattr(args, "dial", False) else None
    rows = {name: {**c.as_dict(), **({} if any(partners.values()) else {"tau": None}),
                   **describe(outputs[(sides["from"], "plain")][name],
                              outputs[(sides["to"], "plain")][name], name),
                   **({"compared_as": compared_as[name]} if name in compared_as else {})}
            for name, c in plain.items()}
    moving, exposed, moving_why = None, None, None
    oracle = {"ran": False, "why": "not run: the two sides agree within clean drift, so "
              "neither is nearer a reference than rounding", "outputs": {}}
    if found == "beyond clean drift":  # which side is right, and where it first moves
        oracle = right_side(onnx.load(str(args.model)) if external else model, arrays, plain,
                            {key: outputs[(cell, "plain")] for key, cell in sides.items()},
                            {key: label(cell, "plain") for key, cell in sides.items()},
                            whole, feeds[0][1])
        exposed = probe(model, work / GRAPHS["probe"], protocol["localisation"]["op_types"])
        probed, more = run_cells(cells, work, feeds, pool, "probe")
        outputs.update(probed)
        merge_whole(whole, more)
        moving, moving_why = localise(judge("probe"), exposed, list(plain), rate)
        for path in work.glob("outputs/*/*/probe-*"):  # every activation of every input
            path.unlink()
    pairs = [f"{side.name} vs {p.name}" for key, side in sides.items() for p in partners[key]]
    return {"verdict": found, "why": why, "outputs": rows, "inputs_n": n, "calibration_n": n_cal,
            **({"sets": True} if sets(args) else {}),  # inputs_n counts input sets
            "nonfinite_inputs": sum(map(nonfinite_count, arrays.values())),
            "clean_pairs": pairs, "compared_whole": whole,
            "external_data": sorted(external), "cells": [c.name for c in cells],
            "exposed": None if exposed is None else len(exposed), "oracle": oracle,
            "envelope": "run" if any(partners.values()) else "not run: bit-identical",
            "first_moving": moving, **({} if moving_why is None else {"unlocalised": moving_why}),
            **({} if dialled is None else {"dial": dialled})}


def dialled_rows(outputs: dict[tuple[Cell, str], dict[str, Any]], sides: dict[str, Cell],
                 partners: dict[str, list[Cell]], names: list[str], n_cal: int,
                 alarm: dict[str, Any]) -> list[dict[str, Any]]:
    """``--dial``: the sensitivity on this model, beside Polygraphy's (``kit.audit.dial``),
    per output of the plain graph."""
    from kit.audit.dial import dial

    return [row for name in names for row in dial(
        [(outputs[(side, "plain")][name], outputs[(p, "plain")][name])
         for key, side in sides.items() for p in partners[key]],
        outputs[(sides["from"], "plain")][name], n_cal, alarm, name)]


def judged(audited: dict[str, dict[str, Any]], labels: dict[str, str],
           clean: list[list[dict[str, Any]]], n_cal: int, alarm: dict[str, Any],
           whole: Whole) -> dict[str, Any]:
    """Per output of the ``from`` side, its calibration (``kit.audit.calibrate``) from the
    clean pairs' outputs and the audited pair's; where a release changed its shape or
    dtype, both as the runtimes gave them (``as_run``, the sides' ``labels``), never as
    the audit stacked them."""
    found = {}
    for name, a in audited["from"].items():
        b = audited["to"][name]
        c = calibrate([(x[name], y[name]) for x, y in clean], (a, b), n_cal, alarm)
        if c.reshaped:
            c = replace(c, reshaped=f"{as_run(a, name, labels['from'], whole)} against "
                                    f"{as_run(b, name, labels['to'], whole)}")
        found[name] = c
    return found


def right_side(model: Any, arrays: dict[str, Any], plain: dict[str, Any],
               audited: dict[str, dict[str, Any]], labels: dict[str, str], whole: Whole,
               first: int | None) -> dict[str, Any]:
    """Which side onnx's reference implementation sides with (``kit.audit.oracle``): on
    its values for every output with a batch axis on one side at least (the other may have
    lost it), and, for an output whose shape a release changed, on the shape the
    specification's shape inference gives the first run of ``first`` inputs (None: the
    first input set)."""
    n = input_count(arrays)
    batched = [name for name in plain
               if any(len(audited[key][name]) == n for key in ("from", "to"))]
    from_outputs, to_outputs = ({name: audited[key][name] for name in batched}
                                for key in ("from", "to"))
    oracle = judge_sides(model, arrays, from_outputs, to_outputs, first is None)
    changed = [name for name, c in plain.items() if c.reshaped]
    if changed:
        spec = spec_shapes(model, {k: np.shape(v)[1:] if first is None else np.shape(v)
                                   for k, v in sliced(arrays, 0, first or 1).items()})
        oracle["outputs"].update({name: which_shape(spec.get(name), *(
            first_run(audited[key][name], name, labels[key], whole, first)
            for key in ("from", "to"))) for name in changed})
    return oracle


def sets(args: argparse.Namespace) -> bool:
    """``--sets``: each array of ``--inputs`` carries a leading axis of input sets."""
    return bool(getattr(args, "sets", False))


def calibration_count(n: int, protocol: dict[str, Any]) -> int:
    """The inputs that calibrate: the protocol's share of ``n``, rounded up, at least one
    and leaving one held out."""
    n_cal = -(-n * protocol["inputs"]["calibration_share"] // 1)
    return int(min(max(n_cal, 1), n - 1))


IDENTICAL = ("the two sides' outputs are bit-identical on every input: a zero difference is "
             "within every envelope, so the clean pairs were not run (--envelope runs them)")


def run_plain(sides: dict[str, Cell], protocol: dict[str, Any], work: Path,
              feeds: list[tuple[str, int | None]], args: argparse.Namespace, pool: Workers
              ) -> tuple[dict[tuple[Cell, str], dict[str, Any]], Whole,
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
    merge_whole(whole, more_whole)
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


def check_release_pair(sides: dict[str, Cell], bisecting: bool = False) -> None:
    """Two cells that differ; with ``--bisect``, every release it may visit between them
    offers TO's level (``kit.audit.bisect`` audits them at it)."""
    from kit.audit.bisect import between
    from kit.runtime.runtimes import known_releases, levels_offered

    if sides["from"] == sides["to"]:
        raise KitError("--from and --to name the same cell; nothing moves")
    visited = between(sides["from"], sides["to"], list(known_releases())) if bisecting else []
    level = sides["to"].level
    lacking = [release for release in visited if level not in levels_offered(release)]
    if lacking:
        common = [lv for lv in levels_offered(visited[0])
                  if all(lv in levels_offered(release) for release in visited)]
        raise KitError(f"--bisect audits the releases between --from and --to at --to's "
                       f"level {level}, which these onnxruntime releases do not offer: "
                       f"{', '.join(lacking)}; bisect at a level each offers "
                       f"({', '.join(common)})")
