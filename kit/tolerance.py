"""A replay verdict per file: a fresh evidence file against the shipped one.

    identical         the same bytes
    within tolerance  tensor-aware: the same arrays (names, shapes, dtypes, NaN positions)
                      whose largest absolute and relative differences stay under the bound
                      declared for the file; a JSON record the same way, number by number,
                      with the same keys and strings
    retrained, within seed spread
                      after a retrain on another CPU only: a JSON record whose every moved
                      value stays inside the study's own seed-to-seed spread (``kit.spread``)
    differs           anything else: the first file, array (or JSON path) and element named

Every file that is not identical gets its largest absolute and relative difference, whether
a bound is declared for it or not (a file without a bound differs, and its figures say by
how much); only a file that is neither arrays nor JSON (a model's bytes) has none
(``None``). The relative difference is taken against the larger magnitude of the two values,
so it is at most 2 and a zero on either side reads 1 (the whole value), never a huge
quotient of a tiny denominator.

Under a bound, a JSON field whose name ends in ``sha256``, and every value of a ``.sha256``
file (file name to hash), is the hash of another evidence file, which is judged itself, so
it is not compared: only the names must agree (a file without a bound must be identical
byte for byte, hashes included).

The bounds are written once, per study and kind of file, each with its reason and the
measurements it rests on (a shipped replay record, or a restriction replay documented in
``docs/tolerances.md``), in ``kit/protocols/tolerances.yaml`` (schema
``tolerances.schema.json``; under the evidence root like every protocol). A file no bound
names must be identical, and the same file lists each such kind with why it is
deterministic by construction. Machine facts
(``machine.json`` and the other run metadata of ``kit.runfolder.UNHASHED``) stay outside the
comparison.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kit import schema
from kit.files import load_npz, read_bytes, read_json, read_yaml

TOLERANCES = Path(__file__).with_name("protocols") / "tolerances.yaml"
RETRAINED = "retrained, within seed spread"  # kit.spread: a retrain judged as science
VERDICTS = ("identical", "within tolerance", RETRAINED, "differs")
TINY = float(np.finfo(np.float64).tiny)  # the relative difference's floor under a zero


@dataclass(frozen=True)
class Bound:
    """The bound of one kind of file: a difference passes when it is at most ``atol`` or
    at most ``rtol`` relative to the larger magnitude of the two values."""

    study: str
    files: str
    atol: float
    rtol: float
    reason: str

    def admits(self, a: float, b: float) -> bool:
        """Whether two finite numbers are within the bound of each other."""
        if not (math.isfinite(a) and math.isfinite(b)):
            return False
        return abs(a - b) <= self.atol or relative_difference(a, b) <= self.rtol


@dataclass
class Verdict:
    """One file: its verdict, the largest differences, and where it first differs."""

    file: str
    verdict: str
    max_abs: float | None = 0.0  # None: opaque bytes, no difference to measure
    max_rel: float | None = 0.0
    where: str = ""
    bound: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


def load_tolerances(path: Path = TOLERANCES) -> dict[str, Any]:
    """The whole file: bounds with their measurements, and the exact kinds
    (schema-checked; a bad file is a KitError naming it)."""
    document = read_yaml(path)
    schema.check(document, "tolerances.schema.json", path)
    return document  # type: ignore[no-any-return]


def load_bounds(path: Path = TOLERANCES) -> list[Bound]:
    """Every bound, in the file's order (the first that matches a file applies)."""
    return [Bound(b["study"], b["files"], float(b["atol"]), float(b["rtol"]), b["reason"])
            for b in load_tolerances(path)["tolerances"]]


def bound_for(bounds: list[Bound], study: str, name: str) -> Bound | None:
    """The first bound of ``study`` whose file pattern matches ``name`` (none: identical)."""
    return next((b for b in bounds if b.study == study and fnmatch.fnmatch(name, b.files)),
                None)


def compare_file(fresh: Path, shipped: Path, name: str, bound: Bound | None,
                 retrained: bool = False) -> Verdict:
    """The verdict for one file present in both folders (module docstring). ``retrained``:
    the fresh run trained its own models on another CPU, so a JSON record that differs is
    judged against the study's seed spread (``kit.spread``) before it is called differing."""
    found = _compare_file(fresh, shipped, name, bound)
    if retrained and found.verdict == "differs" and name.endswith(".json"):
        from kit.spread import judge

        judged = judge(read_json(shipped), read_json(fresh), bound.admits if bound else None)
        if judged.within:
            found.verdict = RETRAINED
            found.where = f"{judged.moved} values moved, each within its seed spread"
            found.detail = {}
        else:
            found.where = (f"retrained: {judged.beyond} of {judged.moved} moved values outside "
                           f"their seed spread; first: {judged.outside}")
            found.detail = judged.detail or {}
    return found


def _compare_file(fresh: Path, shipped: Path, name: str, bound: Bound | None) -> Verdict:
    if read_bytes(fresh) == read_bytes(shipped):
        return Verdict(name, "identical")
    declared = bound is not None
    measure = bound or Bound("", name, 0.0, 0.0, "no bound declared: equality only")
    found = Verdict(name, "within tolerance",
                    bound=f"atol {measure.atol:g}, rtol {measure.rtol:g}" if declared else "")
    if name.endswith(".npz"):
        compare_arrays(load_npz(shipped), load_npz(fresh), measure, found)
    elif name.endswith(".sha256"):  # file name -> hash of a file judged itself
        a, b = read_json(shipped), read_json(fresh)
        if not (isinstance(a, dict) and isinstance(b, dict)) or sorted(a) != sorted(b):
            _differs(found, "the files it lists", shipped=a, fresh=b)
    elif name.endswith(".json"):
        compare_json(read_json(shipped), read_json(fresh), measure, "", found)
    else:
        found.max_abs = found.max_rel = None
        _differs(found, "bytes differ (not an .npz or JSON file)")
    if not declared:  # measured for the record, but only equal bytes pass without a bound
        first = f" (first: {found.where})" if found.verdict == "differs" else ""
        found.verdict = "differs"
        found.where = f"bytes differ and no tolerance is declared{first}"
    return found


def _differs(found: Verdict, where: str, **detail: Any) -> None:
    if found.verdict != "differs":
        found.verdict, found.where, found.detail = "differs", where, detail


def compare_arrays(shipped: dict[str, np.ndarray[Any, Any]],
                   fresh: dict[str, np.ndarray[Any, Any]], bound: Bound, found: Verdict) -> None:
    """Every array of two .npz files under ``bound``; the first difference goes to ``found``."""
    if sorted(shipped) != sorted(fresh):
        _differs(found, "array names", shipped=sorted(shipped), fresh=sorted(fresh))
        return
    for name in sorted(shipped):
        a, b = shipped[name], fresh[name]
        if a.shape != b.shape or a.dtype != b.dtype:
            _differs(found, f"array {name}", shipped=f"{a.dtype}{list(a.shape)}",
                     fresh=f"{b.dtype}{list(b.shape)}")
            continue
        if a.dtype.kind not in "fc":  # integers, flags, words: equal or differing
            if not np.array_equal(a, b):
                index = tuple(int(i) for i in np.argwhere(a != b)[0])
                if a.dtype.kind in "iu":  # the figures still say by how much
                    wide_a, wide_b = a.astype(np.float64), b.astype(np.float64)
                    moved = np.abs(wide_a - wide_b)
                    scale = np.maximum(np.maximum(np.abs(wide_a), np.abs(wide_b)), TINY)
                    found.max_abs = max(found.max_abs or 0.0, float(moved.max()))
                    found.max_rel = max(found.max_rel or 0.0, float((moved / scale).max()))
                count = int(np.count_nonzero(a != b))
                _differs(found, f"array {name} element {list(index)} ({count} of {a.size} "
                         "elements differ; integers are compared exactly)",
                         shipped=a[index].item(), fresh=b[index].item())
            continue
        _compare_floats(name, a.astype(np.float64), b.astype(np.float64), bound, found)


def _compare_floats(name: str, a: np.ndarray[Any, Any], b: np.ndarray[Any, Any], bound: Bound,
                    found: Verdict) -> None:
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    if not np.array_equal(nan_a, nan_b):
        index = tuple(int(i) for i in np.argwhere(nan_a != nan_b)[0])
        _differs(found, f"array {name} element {list(index)} (NaN position)",
                 shipped=float(a[index]), fresh=float(b[index]))
        return
    same = nan_a | (a == b)  # equal infinities included
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(same, 0.0, np.abs(a - b))
        rel = np.where(same, 0.0, diff / np.maximum(np.maximum(np.abs(a), np.abs(b)), TINY))
    if diff.size:
        found.max_abs = max(found.max_abs or 0.0, float(np.nanmax(diff)))
        found.max_rel = max(found.max_rel or 0.0, float(np.nanmax(rel)))
    outside = ~same & ~((diff <= bound.atol) | (rel <= bound.rtol))
    if outside.any():
        index = tuple(int(i) for i in np.argwhere(outside)[0])
        _differs(found, f"array {name} element {list(index)}", shipped=float(a[index]),
                 fresh=float(b[index]), abs=float(diff[index]), rel=float(rel[index]))


def compare_json(a: Any, b: Any, bound: Bound, path: str, found: Verdict) -> None:
    """Two JSON values number by number under ``bound`` (keys and strings equal)."""
    where = path or "(top)"
    if isinstance(a, dict) and isinstance(b, dict):
        if sorted(a) != sorted(b):
            _differs(found, f"keys of {where}", shipped=sorted(a), fresh=sorted(b))
            return
        for key in sorted(a):
            if key.endswith("sha256") and isinstance(a[key], str) and isinstance(b[key], str):
                continue  # the hash of another file of the comparison, judged itself
            compare_json(a[key], b[key], bound, f"{path}/{key}", found)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            _differs(found, f"length of {where}", shipped=len(a), fresh=len(b))
            return
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            compare_json(x, y, bound, f"{path}/{i}", found)
    elif _number(a) and _number(b):
        _compare_number(float(a), float(b), bound, where, found)
    elif a != b or type(a) is not type(b):
        _differs(found, where, shipped=a, fresh=b)


def relative_difference(a: float, b: float) -> float:
    """|a - b| over the larger magnitude of the two: at most 2, and 1 where one is zero."""
    return abs(a - b) / max(abs(a), abs(b), TINY)


def largest_relative(moved: Any, reference: Any) -> float | None:
    """The largest relative difference, ``moved / |reference|``, over the elements whose
    reference is not zero (a difference from a zero has no relative size: a quotient by
    it, or by a floor standing in for it, is no number to print); None where every
    reference is zero. The rule of the replay report's arrays (``kit.drift.replay``) and
    the audit's outputs (``kit.audit.calibrate``), whose reference side is the first run's
    or FROM's; a replay record's files use ``relative_difference``, between two values
    neither of which is the reference."""
    moved = np.asarray(moved, np.float64).reshape(-1)
    scale = np.abs(np.asarray(reference, np.float64)).reshape(-1)
    kept = scale > 0  # a NaN reference is left out too
    if not kept.any():
        return None
    with np.errstate(invalid="ignore"):  # an infinite reference moved by an infinity
        return float(np.nanmax(moved[kept] / scale[kept], initial=0.0))


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _compare_number(a: float, b: float, bound: Bound, where: str, found: Verdict) -> None:
    if a == b or (math.isnan(a) and math.isnan(b)):
        return
    if math.isnan(a) or math.isnan(b) or math.isinf(a) or math.isinf(b):
        _differs(found, f"{where} (NaN or infinity)", shipped=a, fresh=b)
        return
    diff = abs(a - b)
    rel = relative_difference(a, b)
    found.max_abs = max(found.max_abs or 0.0, diff)
    found.max_rel = max(found.max_rel or 0.0, rel)
    if not bound.admits(a, b):
        _differs(found, where, shipped=a, fresh=b, abs=diff, rel=rel)


def compare_folders(fresh: Path, shipped: Path, study: str, names: list[str],
                    bounds: list[Bound], retrained: bool = False) -> list[Verdict]:
    """The verdict of every named file (relative to both folders): a file missing from
    either side differs (``retrained``: ``compare_file``)."""
    verdicts = []
    for name in sorted(names):
        a, b = fresh / name, shipped / name
        if not (a.is_file() and b.is_file()):
            missing = "the fresh run" if not a.is_file() else "the shipped evidence"
            verdicts.append(Verdict(name, "differs", where=f"missing from {missing}"))
        else:
            verdicts.append(compare_file(a, b, name, bound_for(bounds, study, name),
                                         retrained))
    return verdicts


def summary(verdicts: list[Verdict]) -> dict[str, Any]:
    """How many files have each verdict, the largest differences, and the first that
    differs."""
    counts = {v: sum(1 for x in verdicts if x.verdict == v) for v in VERDICTS}
    first = next((x for x in verdicts if x.verdict == "differs"), None)
    return {"counts": counts,
            "max_abs": max((x.max_abs for x in verdicts if x.max_abs is not None), default=0.0),
            "max_rel": max((x.max_rel for x in verdicts if x.max_rel is not None), default=0.0),
            "opaque": sum(1 for x in verdicts if x.max_abs is None),
            "first_difference": None if first is None else
            {"file": first.file, "where": first.where, **first.detail}}


def through_inputs(found: Verdict, unlike: Callable[[Path], str], fresh: Path, shipped: Path,
                   inputs: str, how: str) -> Verdict:
    """A differing record computed from other evidence files (its ``inputs``, already
    judged within their bounds), judged through them: ``unlike(root)`` says where that
    side's stored record first differs from the one recomputed from its own inputs ("" when
    nowhere). Within tolerance when neither side differs (``how``: the words the verdict's
    bound adds); otherwise ``found``, naming the side."""
    for side, root in (("fresh", fresh), ("shipped", shipped)):
        where = unlike(root)
        if where:
            found.where += (f"; recomputed from the {side} {inputs} it differs from the "
                            f"{side} file at {where}")
            return found
    return Verdict(found.file, "within tolerance", found.max_abs, found.max_rel,
                   bound=f"{found.bound}; moved only through its inputs ({how})",
                   detail={"moved_first": found.where})
