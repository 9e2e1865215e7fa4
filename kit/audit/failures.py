"""A worker's refusal during an audit, named as the user knows the files
(``kit.audit.command`` raises it in place of the worker's).

The audit stages the user's model and inputs in its own work folder (``kit.audit.cells``:
the model as ``model.onnx``, its instrumented copy as ``probe.onnx``, the inputs as
``inputs.npz`` or one ``inputs-NNNNN.npz`` per run of them), so the worker names those
files and onnxruntime their staged paths, which are gone when the command ends. ``named``
gives the refusal as one line: the user's model or ``--inputs`` file (with the inputs the
run held, where the file was cut into runs), what was wrong, and the release; of
onnxruntime's message it keeps what onnxruntime said (``kit.errors.onnxruntime_said``: no
status prefix, no path it loaded, no C++ source location and function signature).
"""

from __future__ import annotations

import re
from pathlib import Path

from kit.audit.cells import GRAPHS
from kit.errors import WorkerFailed, first_line, onnxruntime_said

ROWS = re.compile(r" \(rows (\d+) to (\d+)\)")  # of the worker's run of one inputs file


def named(exc: WorkerFailed, work: Path, model: Path, inputs: Path,
          feeds: list[tuple[str, int | None]]) -> WorkerFailed:
    """``exc`` as one line naming the user's ``model`` or ``inputs`` and the release
    (module docstring); ``feeds``: the staged inputs files and their rows (None: one
    input set of ``--sets``), in order."""
    staged = {GRAPHS["plain"]: str(model),
              GRAPHS["probe"]: f"{model} (the audit's instrumented copy of it)"}
    start, n = 0, sum(count or 1 for _, count in feeds)
    for name, count in feeds:
        staged[name] = f"{inputs} (input set {start})" if count is None else \
            str(inputs) if len(feeds) == 1 else \
            f"{inputs} (inputs {start} to {start + count - 1})"
        start += count or 1
    release = f"onnxruntime {exc.release}"
    file, _, what = (exc.reason or "").partition(": ")
    if exc.release is None:  # no worker's answer: a backend's own refusal
        return WorkerFailed(first_line(str(exc)).replace(str(work), "the audit's work folder"),
                            exc.stderr, exc.reason, exc.release)
    if file not in staged:  # the audit's jobs file, or a worker that stopped unasked
        said = [line for line in exc.stderr.splitlines()
                if line.strip() and not line.startswith("worker: progress")]
        why = f"refused the audit's jobs: {exc.reason}" if exc.reason else \
            f"stopped before it answered ({said[-1] if said else 'it said nothing'})"
        return WorkerFailed(f"{model}: the {release} worker {first_line(why)}"
                            .replace(str(work), "the audit's work folder"),
                            exc.stderr, exc.reason, exc.release)
    for folder in {str(work.resolve()), str(work)}:  # a staged path onnxruntime names
        for name in sorted(staged, key=len, reverse=True):
            what = what.replace(f"{folder}/{name}", staged[name])
        what = what.replace(f"{folder}/", f"{model.parent}/")  # external data beside it
    what = onnxruntime_said(what)
    rows = ROWS.search(what) if file in GRAPHS.values() else None
    if rows:  # a run of the model failed: on which of the user's inputs
        first, last = int(rows[1]), int(rows[2])
        on = f" on one of the {n} input sets of {inputs}" if feeds[0][1] is None else \
            f" on inputs {first} to {last} of {inputs}" if len(feeds) == 1 else \
            f" on a run of {last - first + 1} of the {n} inputs of {inputs}"
        what = what[:rows.start()] + on + what[rows.end():]
    if release not in what:
        what += f" (under {release})"
    return WorkerFailed(f"{staged[file]}: {what}", exc.stderr, exc.reason, exc.release)
