"""Polygraphy's own output comparison beside the calibrated detectors.

Polygraphy (NVIDIA's runtime-debugging toolkit) is what practitioners run to compare two
runtimes' outputs. The kit calls it, never re-implements it: ``Comparator.compare_accuracy``
over saved outputs, with ``SimpleCompareFunc()`` at its defaults (atol 1e-5, rtol 1e-5,
elementwise), one iteration per image, so that an image alarms when Polygraphy says its
candidate logits do not match the reference's.

- on the sweep: each cell's alarm rate on the clean held-out source images
  (``kit/drift/sweep.py`` adds it to every row);
- on the drift study's fault matrix (``python -m kit polygraphy --run runs/digits``): its
  TPR over every injected fault and its realised FPR on the clean candidate, held-out
  source images, beside the calibrated detectors' rates from the same run's score stage.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from kit.drift.stages.infer import output_path
from kit.errors import KitError
from kit.files import canonical_json, load_npz, read_json
from kit.owned import json_with, write_named_file
from kit.runfolder import Run

Array = np.ndarray[Any, Any]
PAIR = ("reference", "candidate")


def version() -> str:
    import polygraphy

    return str(polygraphy.__version__)


class _NoTorch:
    """A finder that answers "not installed" for torch (see ``torch_hidden``)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"torch is hidden from Polygraphy's type checks: {name}")


@contextlib.contextmanager
def torch_hidden() -> Iterator[None]:
    """Polygraphy asks of every array whether it is a torch tensor, and to answer it
    imports torch when torch is installed (1.6 s in the kit's environment, where the SciML
    study installs it). The arrays compared here are numpy's, so the answer is "no" either
    way: while Polygraphy runs, torch is reported absent unless it is already imported.
    Nothing is imported or patched; the finder is removed on the way out."""
    if "torch" in sys.modules:
        yield
        return
    finder = _NoTorch()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


def polygraphy_fails(reference: Array, candidate: Array, output: str = "logits") -> Array:
    """Per row, whether Polygraphy's default comparison fails (one iteration per row)."""
    from polygraphy.comparator import Comparator, RunResults
    from polygraphy.comparator.compare import SimpleCompareFunc
    from polygraphy.comparator.struct import IterationResult
    from polygraphy.logger import G_LOGGER

    G_LOGGER.module_severity = G_LOGGER.CRITICAL
    results = RunResults()
    with torch_hidden(), warnings.catch_warnings():
        for name, rows in zip(PAIR, (reference, candidate), strict=True):
            results.append((name, [IterationResult({output: rows[i:i + 1]}, runner_name=name)
                                   for i in range(len(rows))]))
        warnings.simplefilter("ignore", DeprecationWarning)
        # its statistics of an empty, infinite or NaN array warn; the verdict is unaffected
        warnings.simplefilter("ignore", RuntimeWarning)
        accuracy = Comparator.compare_accuracy(results, compare_func=SimpleCompareFunc())
    per_iteration = accuracy[0][PAIR]
    return np.array([not bool(iteration[output]) for iteration in per_iteration], bool)


def fault_matrix(run: Run) -> dict[str, Any]:
    """Polygraphy's TPR over the run's faults and FPR on its clean candidate (held-out,
    source images), beside every calibrated detector's from the score stage."""
    split, faults = run.record("split"), run.record("fault")
    held = [i for i, row in enumerate(split["rows"]) if row["role"] == "heldout"]
    models = sorted({f["model"] for f in faults["faults"]})

    def logits(cell: str, model: str, variant: str) -> Array:
        path = run.stage("infer") / output_path(cell, model, variant, "plain", "orig")
        return load_npz(path)["logits"][held]

    per_fault, clean = [], {}
    for model in models:
        reference = logits("ref", model, "clean")
        clean[model] = int(polygraphy_fails(reference, logits("cand", model, "clean")).sum())
        for fault in (f for f in faults["faults"] if f["model"] == model):
            hits = polygraphy_fails(reference, logits("cand", model, fault["id"]))
            per_fault.append({"fault": fault["id"], "model": model, "alarms": int(hits.sum()),
                              "n": len(held)})
    alarms = sum(f["alarms"] for f in per_fault)
    summary = read_json(run.listed("score", run.record("score")["summary"]["path"],
                                   "summary.path"))
    detectors = {name: {"tpr": entry["tpr"], "fpr": entry["fpr"]}
                 for name, entry in summary["primary"].items()}
    return {"polygraphy": version(), "check": "SimpleCompareFunc() defaults, atol 1e-5 rtol 1e-5",
            "faults": len(per_fault), "heldout_images": len(held),
            "tpr": {"alarms": alarms, "n": len(per_fault) * len(held),
                    "rate": alarms / (len(per_fault) * len(held))},
            "fpr": {"alarms": sum(clean.values()), "n": len(models) * len(held),
                    "rate": sum(clean.values()) / (len(models) * len(held))},
            "clean_alarms_per_model": clean, "per_fault": per_fault,
            "calibrated_detectors": detectors}


def write_fault_matrix(run_dir: Path, out: Path) -> Path:
    """Compute ``fault_matrix`` of a finished drift run and write it to ``out`` (outside
    the run folder, whose manifest it would otherwise break)."""
    if out.resolve().is_relative_to(run_dir.resolve()):
        raise KitError(f"{out}: write the Polygraphy table outside the run folder {run_dir}")
    write_named_file(out, canonical_json(fault_matrix(Run(run_dir))), fault_table, "--out")
    return out


# The only file ``--out`` replaces: a table ``write_fault_matrix`` wrote.
fault_table = json_with({"polygraphy", "check", "tpr", "fpr"})
