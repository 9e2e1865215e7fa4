"""The audit's cells run and their outputs stacked back (``kit.audit.command`` calls them):
the inputs file(s) every job reads, one job per cell and file in the kit's worker, and each
cell's outputs in input order, or compared whole where a tensor carries no batch axis
(``stacked``), with the shapes the runtime gave recorded (``Whole``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from kit.audit.model import Cell, input_count, sliced
from kit.files import load_npz, write_npz
from kit.heartbeat import heartbeat
from kit.runfolder import say
from kit.runtime.scratch import SHARED_FILE
from kit.runtime.serve import Workers

GRAPHS = {"plain": "model.onnx", "probe": "probe.onnx"}
# The tensors compared whole: per tensor and cell, its dtype and the shape of each run
Whole = dict[str, dict[str, dict[str, Any]]]
RUN_ROWS = 64  # inputs per worker call for a model whose first axis is dynamic
BEAT = 30.0  # seconds between two "still running" lines while a round's jobs run


def write_inputs(work: Path, arrays: dict[str, Any], fixed: int | None, sets: bool = False
                 ) -> list[tuple[str, int | None]]:
    """The inputs file(s) the jobs read and the rows of each: runs of the model's fixed
    first axis (the worker feeds a model only the shape it declares), else of ``RUN_ROWS``
    (one ``inputs.npz`` when they all fit); with ``sets`` one file per input set, the
    arrays as the model takes them (rows None: the set's outputs are stacked on a new
    first axis, ``stacked``). Readable to the worker's container whatever the umask
    (``SHARED_FILE``)."""
    n = input_count(arrays)
    if sets:
        for i in range(n):
            write_npz(work / f"inputs-{i:05d}.npz", {k: v[i] for k, v in arrays.items()},
                      SHARED_FILE)
        return [(f"inputs-{i:05d}.npz", None) for i in range(n)]
    step = fixed or RUN_ROWS
    if fixed is None and n <= step:
        write_npz(work / "inputs.npz", arrays, SHARED_FILE)
        return [("inputs.npz", n)]
    feeds: list[tuple[str, int | None]] = []
    for i in range(0, n, step):
        name = f"inputs-{i // step:05d}.npz"
        write_npz(work / name, sliced(arrays, i, i + step), SHARED_FILE)
        feeds.append((name, min(step, n - i)))
    return feeds


def run_cells(cells: list[Cell], work: Path, feeds: list[tuple[str, int | None]],
              pool: Workers, graph: str
              ) -> tuple[dict[tuple[Cell, str], dict[str, Any]], Whole]:
    """Every cell and inputs file of one graph (``GRAPHS``) in the kit's worker, one batch
    per release to that release's worker in ``pool`` (``kit.runtime.serve``: one process
    per release for every round of the audit), each file in one call (``whole``: a tensor
    may lack a batch axis); each cell's outputs stacked back in input order (``stacked``).
    Also the tensors compared whole: per tensor, each cell's shapes as they came. While
    the jobs run, a line every ``BEAT`` seconds says they still do."""
    from kit.runtime.runtimes import release_runtime
    from kit.runtime.scale import Batch

    jobs: dict[str, list[dict[str, Any]]] = {}
    paths: dict[tuple[Cell, str], list[Path]] = {}
    for cell in cells:
        for feed, count in feeds:
            output = f"outputs/{cell.release}/{cell.level}-t{cell.threads}/{graph}-{feed}"
            paths.setdefault((cell, graph), []).append(work / output)
            jobs.setdefault(cell.release, []).append({
                "id": f"{cell.name}/{graph}/{feed}", "model": GRAPHS[graph], "inputs": feed,
                "graph_optimization": cell.level, "intra_op_threads": cell.threads,
                "output": output, "batch_size": count or 1, "whole": True,
                # NaN and infinities go in as given: the comparison counts them
                "nonfinite": True})
    batches = [Batch(release_runtime(release), tuple(found), release)
               for release, found in jobs.items()]
    say(f"audit: {sum(len(j) for j in jobs.values())} jobs of the {graph} graph over "
        f"{len(cells)} cells")
    # a job that runs long (or never ends) prints nothing of its own until it is done
    with heartbeat(f"audit: the {graph} graph's jobs (Ctrl-C stops them)", every=BEAT):
        pool.run(batches, work, work)
    found: dict[tuple[Cell, str], dict[str, Any]] = {}
    whole: Whole = {}
    sizes = [rows for _, rows in feeds]
    for (cell, graph_of), files in paths.items():
        parts = [load_npz(path) for path in files]
        found[(cell, graph_of)] = {
            name: stacked([part[name] for part in parts], sizes, name, whole,
                          label(cell, graph_of))
            for name in parts[0]}
    return found, whole


def stacked(parts: list[Any], sizes: list[int | None], name: str,
            whole: Whole, cell: str) -> Any:
    """One tensor's runs in input order: concatenated along the batch axis where every run
    carries its rows first and the same shape after them (stacked on a new first axis
    where each run is one input set, size None, and all have one shape), else compared
    whole (every run's values as one row of one input, its dtype and the runs' shapes
    recorded in ``whole[name][cell]``): an attention tensor laid out by head or by
    sequence position, a scalar, or a tensor whose other axes follow its inputs (a
    similarity matrix of the inputs, or a set's output whose shape follows its data) is
    judged, never refused."""
    if None in sizes:
        if len({p.shape for p in parts}) == 1:
            return np.stack(parts)
    elif all(p.ndim and p.shape[0] == rows for p, rows in zip(parts, sizes, strict=True)) \
            and len({p.shape[1:] for p in parts}) == 1:
        return np.concatenate(parts)
    whole.setdefault(name, {})[cell] = {"dtype": str(parts[0].dtype),
                                        "shapes": [list(p.shape) for p in parts]}
    return np.concatenate([p.reshape(-1) for p in parts]).reshape(1, 1, -1)


def merge_whole(whole: Whole, more: Whole) -> None:
    """``more``'s tensors compared whole into ``whole``, per tensor and cell."""
    for name, cells in more.items():
        whole.setdefault(name, {}).update(cells)


def label(cell: Cell, graph: str) -> str:
    """A cell's name in ``compared_whole``: its name for the plain graph, with the graph
    for the instrumented copy."""
    return cell.name if graph == "plain" else f"{cell.name} ({graph})"


def first_run(array: Any, name: str, labelled: str, whole: Whole, rows: int | None
              ) -> list[int]:
    """One cell's tensor's shape on the first run of ``rows`` inputs (None: one input
    set), as the runtime gave it (``stacked``)."""
    ran = whole.get(name, {}).get(labelled)
    if ran:
        return list(ran["shapes"][0])
    return list(np.shape(array)[1:]) if rows is None else [rows, *np.shape(array)[1:]]


def as_run(array: Any, name: str, labelled: str, whole: Whole) -> str:
    """One cell's tensor as the runtime gave it: its dtype and the runs' shapes where it
    was compared whole (``stacked``), else the stacked array's dtype and shape."""
    ran = whole.get(name, {}).get(labelled)
    if ran is None:
        return f"{array.dtype}{list(np.shape(array))}"
    return " + ".join(f"{ran['dtype']}{shape}" for shape in ran["shapes"])
