"""python -m kit corpus: rebuild every case, run it under every release and level of the
protocol (``kit/protocols/corpus.yaml``), decide it by the frozen rule and write the evidence.

Run folder (default ``runs/corpus``)::

    cases/<id>/model.onnx       the minimal model the case's builder writes
    cases/<id>/inputs.npz       its inputs (fed at run time)
    cases/<id>/reference.npz    onnx's reference evaluator's outputs (or the case's override)
    cases/<id>/outputs/<release>/<level>.npz   each release's outputs (one worker job each)
    corpus/cases.json           per case: its entry, every deviation, load errors, decision,
                                Polygraphy's verdict; the rate and its Wilson interval
    corpus/crashes.json         the crash-only cases (``kit.corpus.crashes``): per release,
                                whether it ran and its deviation or error; never in the rate
    corpus/corpus.json          the stage record (protocol sha256, releases, cases)
    report/                     the per-case table and the release x case deviation map

A case under a release that cannot load or run its model records that release's error (a
finding: 1.15 loads opset <= 19 only, a crash-only defect raises), the run folder's path
written as ``<run>`` so that the evidence does not depend on where it ran; nothing is
dropped. A finished job's output is kept on a rerun when its model and inputs are unchanged.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kit.corpus import rule
from kit.corpus.case import LEVELS, Case, reference_outputs
from kit.corpus.cases import CASES, by_id
from kit.corpus.crashes import CRASHES, decide_crash, finite_scale
from kit.corpus.recount import polygraphy_verdict, summary
from kit.errors import ConfigError
from kit.files import canonical_json, load_npz, read_yaml, sha256, write_atomic, write_npz
from kit.paths import ROOT
from kit.runfolder import Run, cpu_seconds, record_timing, say, write_manifest
from kit.runlock import hold
from kit.runtime.runtimes import Runtime, release_runtime
from kit.runtime.scale import Batch, run_batches
from kit.runtime.worker import meta_path

PROTOCOL = ROOT / "kit" / "protocols" / "corpus.yaml"
CASES_JSON, CRASHES_JSON = rule.CASES_JSON, rule.CRASHES_JSON


def load_corpus_protocol(path: Path = PROTOCOL) -> dict[str, Any]:
    protocol = read_yaml(path)
    if not isinstance(protocol, dict) or protocol.get("study") != "corpus":
        raise ConfigError(f"{path}: not the corpus protocol (study: corpus)")
    return protocol


def choose(protocol: dict[str, Any], releases: list[str] | None,
           case_ids: list[str] | None) -> tuple[list[str], list[Case], list[Case]]:
    """The releases, cases and crash-only cases to run: the protocol's and all of them, or
    the named subsets (checked)."""
    known = [str(r) for r in protocol["releases"]]
    chosen = known if releases is None else releases
    unknown = [r for r in chosen if r not in known]
    if unknown:
        raise ConfigError(f"{PROTOCOL}: release(s) {', '.join(unknown)} not in the corpus's "
                          f"releases ({', '.join(known)})")
    crash_ids = {c.id for c in CRASHES}
    cases = list(CASES) if case_ids is None else [by_id(i) for i in case_ids
                                                  if i not in crash_ids]
    crashes = [c for c in CRASHES if case_ids is None or c.id in case_ids]
    return sorted(chosen, key=rule.release_key), cases, crashes


def build_case(root: Path, case: Case, seed: int) -> dict[str, str]:
    """Write a case's model, inputs and reference; returns their sha256."""
    folder = root / "cases" / case.id
    built = case.build(seed)
    write_atomic(folder / "model.onnx", built.model.SerializeToString(deterministic=True))
    write_npz(folder / "inputs.npz", built.inputs)
    write_npz(folder / "reference.npz", reference_outputs(built))
    return {name: sha256(folder / name) for name in ("model.onnx", "inputs.npz",
                                                     "reference.npz")}


def _batches(root: Path, cases: list[Case], runtimes: dict[str, Runtime],
             hashes: dict[str, dict[str, str]]) -> list[Batch]:
    """One batch per (case, release, level): a model one level cannot load must not keep the
    other level from running. A job whose output and its record exist under unchanged inputs
    is kept (a worker killed between the two leaves the output alone: that job runs again)."""
    pending = []
    for case in cases:
        stamp = root / "cases" / case.id / "outputs" / "inputs.sha256"
        current = canonical_json(hashes[case.id]).decode()
        if not stamp.is_file() or stamp.read_text() != current:
            for old in (root / "cases" / case.id / "outputs").rglob("*.npz"):
                old.unlink()
            write_atomic(stamp, current.encode())
        n = len(next(iter(load_npz(root / "cases" / case.id / "inputs.npz").values())))
        for release, runtime in runtimes.items():
            folder = f"cases/{case.id}/outputs/{release}"
            for level in LEVELS:
                output = root / folder / f"{level}.npz"
                if output.is_file() and meta_path(output).is_file():
                    continue
                job = {"model": f"cases/{case.id}/model.onnx",
                       "inputs": f"cases/{case.id}/inputs.npz", "output": f"{level}.npz",
                       "graph_optimization": level, "batch_size": n, "id": level}
                pending.append(Batch(runtime, (job,), f"{case.id} {release} {level}", folder))
    return pending


def deviations_of(root: Path, case: Case, releases: list[str], errors: dict[str, str],
                  reference: dict[str, Any]) -> tuple[dict[str, dict[str, float | None]],
                                                      dict[str, dict[str, str]]]:
    """d per release and level (None where the release did not run the model) and the
    recorded error of each release and level that did not."""
    folder = root / "cases" / case.id
    deviations: dict[str, dict[str, float | None]] = {}
    failures: dict[str, dict[str, str]] = {}
    for release in releases:
        deviations[release] = {}
        for level in LEVELS:
            path = folder / "outputs" / release / f"{level}.npz"
            label = f"{case.id} {release} {level}"
            if path.is_file():
                deviations[release][level] = rule.deviation(load_npz(path), reference, str(path))
            else:
                deviations[release][level] = None
                failures.setdefault(release, {})[level] = errors.get(label, "no output")
    return deviations, failures


def measure_crash(root: Path, case: Case, releases: list[str], errors: dict[str, str]
                  ) -> dict[str, Any]:
    """A crash-only case: where it fails, the errors, and whether that is as declared."""
    reference = load_npz(root / "cases" / case.id / "reference.npz")
    deviations, failures = deviations_of(root, case, releases, errors, reference)
    tolerance = rule.RELATIVE_TOLERANCE * finite_scale(reference)
    return {**case.describe(), "deviations": deviations, "errors": failures,
            "decision": decide_crash(case.describe(), deviations, tolerance)}


def measure_case(root: Path, case: Case, releases: list[str],
                 errors: dict[str, str]) -> dict[str, Any]:
    """Every release's deviation from the reference, the decision and Polygraphy's check."""
    folder = root / "cases" / case.id
    reference = load_npz(folder / "reference.npz")
    s = rule.scale(reference)
    deviations, failures = deviations_of(root, case, releases, errors, reference)
    entry = case.describe()
    decision = rule.decide(entry, deviations, s)
    loaded = [r for r in releases if deviations[r][case.level] is not None]
    return {**entry, "deviations": deviations, "errors": failures, "decision": decision,
            "range": rule.range_mismatch(entry, decision, loaded),
            "polygraphy": polygraphy_verdict(folder, entry, releases)}


def run_corpus(run_dir: Path, *, protocol_file: Path = PROTOCOL,
               releases: list[str] | None = None, cases: list[str] | None = None,
               backend: str | None = None, scheduler: str | None = None,
               workers: int | None = None) -> dict[str, Any]:
    """Run (or resume) the corpus in ``run_dir``; returns its evidence."""
    protocol = load_corpus_protocol(protocol_file)
    chosen, picked, crashes = choose(protocol, releases, cases)
    runtimes = {release: release_runtime(release) for release in chosen}
    with hold(run_dir) as root:
        started, cpu = time.monotonic(), cpu_seconds()
        run = Run(root)
        run.forget("corpus")
        seed = int(protocol["seeds"]["inputs"])
        hashes = {case.id: build_case(root, case, seed) for case in [*picked, *crashes]}
        pending = _batches(root, [*picked, *crashes], runtimes, hashes)
        say(f"corpus: {len(picked)} case(s) and {len(crashes)} crash-only case(s) x "
            f"{len(chosen)} release(s) x {len(LEVELS)} levels: {len(pending)} job(s) to run")
        errors = {label: error.replace(str(root), "<run>") for label, error in run_batches(
            pending, root, root, backend, scheduler, workers, say, collect=True).items()}
        rows = [measure_case(root, case, chosen, errors) for case in picked]
        evidence = {"protocol_sha256": sha256(protocol_file), "releases": chosen,
                    "cases": rows, "summary": summary(rows)}
        write_atomic(root / CASES_JSON, canonical_json(evidence))
        write_atomic(root / CRASHES_JSON, canonical_json({
            "releases": chosen,
            "crashes": [measure_crash(root, case, chosen, errors) for case in crashes]}))
        run.write_record("corpus", {"protocol_sha256": evidence["protocol_sha256"],
                                    "releases": chosen, "cases": [c.id for c in picked],
                                    "crashes": [c.id for c in crashes]})
        write_manifest(root)
        record_timing(run, "corpus", time.monotonic() - started, cpu_seconds() - cpu)
        from kit.corpus.report import write_report

        write_report(root)
        done: dict[str, Any] = summary(rows)
        say(f"corpus: {done['reproduced']}/{done['listed']} case(s) reproduced in "
            f"{time.monotonic() - started:.1f} s ({root})")
        return evidence
