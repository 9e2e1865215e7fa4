"""python -m kit corpus-detectors: the corpus's detector study
(``kit/protocols/corpus-detectors.yaml``). Each CNN-op case is written into each of the drift
study's digits models (``kit.corpus.hosts``), run under its pair of releases, and scored by
the drift study's detectors and Polygraphy against clean controls.

Run folder (default ``runs/corpus-detectors``), resumable like the drift stages::

    fetch/, split/                      the drift study's stages (the same models and images)
    detectors/models/<case>/<model>.onnx (+ .sketch.onnx)   the hosts
    detectors/outputs/<case>/<model>/<cell>/<graph>-<cond>.npz   one worker job each
    detectors/controls/<release>/<model>/<cond>.npz         the hosts without the case
    detectors/evidence/<case>/<model>.npz   the host's evidence arrays
                                        (``kit.corpus.detector_measures``)
    detectors/hosts.json                per host: placement, pair and every measure; the
                                        cases no model hosts, with the reason
    detectors/detectors.json            the stage record
    report/detectors.html               the table and the matched-FPR figure
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from kit.corpus.detector_measures import CELLS, CONDS, host_measures, params
from kit.corpus.hosts import CASE_SKETCH, Hosted, write_host
from kit.drift.localise import KINDS, layer_scores
from kit.drift.polygraphy_check import polygraphy_fails, version
from kit.drift.protocol import PROTOCOL as DRIFT_PROTOCOL
from kit.drift.protocol import load_protocol
from kit.drift.stages.infer import is_done
from kit.drift.stages.pipeline import digits_images
from kit.errors import ConfigError
from kit.files import canonical_json, load_npz, read_yaml, sha256, write_atomic, write_npz
from kit.paths import ROOT
from kit.runfolder import Run, cpu_seconds, record_timing, say, write_manifest
from kit.runlock import hold
from kit.runtime.runtimes import Runtime, release_runtime
from kit.runtime.scale import Batch, run_batches

PROTOCOL = ROOT / "kit" / "protocols" / "corpus-detectors.yaml"
STAGE = "detectors"
EVIDENCE_JSON = f"{STAGE}/hosts.json"
GRAPHS = ("plain", "sketch")


def load_study_protocol(path: Path = PROTOCOL) -> dict[str, Any]:
    protocol = read_yaml(path)
    if not isinstance(protocol, dict) or protocol.get("study") != "corpus-detectors":
        raise ConfigError(f"{path}: not the detector study's protocol (study: "
                          "corpus-detectors)")
    return protocol


def write_small_protocol(path: Path, pair: list[str], case: str = "pad-avgpool-fusion",
                         replicates: int = 400) -> Path:
    """The frozen study protocol cut down for the tests and ``reproduce-all --small``:
    ``case``'s affected and fixed releases moved to ``pair`` (releases whose environments
    the small runs build anyway) and fewer nested bootstrap replicates. Nothing of it is a
    result of the study."""
    protocol = read_yaml(PROTOCOL)
    protocol["cases"][case]["pair"] = {"affected": pair[0], "fixed": pair[1]}
    protocol["bootstrap"]["nested_replicates"] = replicates
    write_atomic(path, yaml.safe_dump(protocol, sort_keys=False).encode())
    return path


def release_level(pair: dict[str, str], cell: str) -> tuple[str, str]:
    """(release, level) of a cell of the protocol."""
    return {"reference": (pair["fixed"], "disable_all"), "clean": (pair["fixed"], "enable_all"),
            "positive": (pair["affected"], "enable_all")}[cell]


def choose_cases(protocol: dict[str, Any], asked: list[str] | None) -> list[str]:
    known = [c for c, entry in protocol["cases"].items() if isinstance(entry, dict)]
    unknown = [c for c in asked or [] if c not in known]
    if unknown:
        raise ConfigError(f"{PROTOCOL}: case(s) {', '.join(unknown)} not in the detector "
                          f"study ({', '.join(known)})")
    return list(asked) if asked else known


def build_hosts(run: Run, protocol: dict[str, Any], drift: dict[str, Any], cases: list[str]
                ) -> dict[tuple[str, str], Hosted]:
    """Every (case, model) placement; a host's graphs are written once and kept."""
    fetched = run.record("fetch")["models"]
    found = {}
    for case, model in itertools.product(cases, drift["models"]):
        entry = protocol["cases"][case]
        target = run.stage(STAGE) / "models" / case / f"{model}.onnx"
        source = run.listed("fetch", fetched[model]["onnx"], f"models.{model}.onnx")
        found[(case, model)] = write_host(source, entry["node"],
                                          entry.get("placement", "stem"), target,
                                          drift["instrumentation"]["max_values"])
    return found


def _job(model: str, cond: str, release_level: tuple[str, str], output: str) -> dict[str, Any]:
    return {"id": output.removesuffix(".npz"), "model": model,
            "inputs": f"split/inputs/{cond}.npz", "graph_optimization": release_level[1],
            "intra_op_threads": 1, "output": output}


def plan(run: Run, protocol: dict[str, Any], hosts: dict[tuple[str, str], Hosted],
         conds: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Every job by release (one worker process each), controls once per release."""
    fetched = run.record("fetch")["models"]
    jobs: dict[str, dict[str, dict[str, Any]]] = {}
    for (case, model), hosted in hosts.items():
        if not hosted.hosted:
            continue
        pair = protocol["cases"][case]["pair"]
        graphs = {"plain": f"{STAGE}/models/{case}/{model}.onnx",
                  "sketch": f"{STAGE}/models/{case}/{model}.sketch.onnx"}
        for cell, graph, cond in itertools.product(CELLS, GRAPHS, conds):
            where = release_level(pair, cell)
            out = f"outputs/{case}/{model}/{cell}/{graph}-{cond}.npz"
            jobs.setdefault(where[0], {})[out] = _job(graphs[graph], cond, where, out)
        for role, cond in itertools.product(("affected", "fixed"), conds):
            out = f"controls/{pair[role]}/{model}/{cond}.npz"
            jobs.setdefault(pair[role], {})[out] = _job(fetched[model]["onnx"], cond,
                                                        (pair[role], "enable_all"), out)
    return {release: list(found.values()) for release, found in sorted(jobs.items())}


def _execute(run: Run, runtimes: dict[str, Runtime], jobs: dict[str, list[dict[str, Any]]],
             backend: str | None, scheduler: str | None, workers: int | None) -> None:
    hashes: dict[str, str] = {}
    pending = []
    for release, listed in jobs.items():
        todo = [job for job in listed if not is_done(run, job, hashes, stage=STAGE)]
        if todo:
            pending.append(Batch(runtimes[release], tuple(todo), f"detectors {release}"))
    total = sum(len(listed) for listed in jobs.values())
    say(f"corpus-detectors: {sum(len(b.jobs) for b in pending)} of {total} jobs to run")
    run_batches(pending, run.root, run.stage(STAGE), backend, scheduler, workers, say)


def evidence_arrays(run: Run, case: str, model: str, pair: dict[str, str], hosted: Hosted,
                    conds: list[str]) -> dict[str, Any]:
    """A host's evidence arrays (``kit.corpus.detector_measures``) from its job outputs."""
    rows = run.record("split")["rows"]
    roles = {role: np.array([i for i, r in enumerate(rows) if r["role"] == role])
             for role in ("calibration", "heldout")}
    base = run.stage(STAGE)
    arrays: dict[str, Any] = {}
    sketches: dict[str, dict[str, dict[str, Any]]] = {}
    for cell, (name, cond) in itertools.product(CELLS, zip(CONDS, conds, strict=True)):
        plain = load_npz(base / f"outputs/{case}/{model}/{cell}/plain-{cond}.npz")["logits"]
        for role, picked in roles.items():
            arrays[f"logits/{cell}/{name}/{role}"] = plain[picked]
        sketch = load_npz(base / f"outputs/{case}/{model}/{cell}/sketch-{cond}.npz")
        sketches.setdefault(cell, {})[name] = sketch
    for role, (name, cond) in itertools.product(("affected", "fixed"),
                                                 zip(CONDS, conds, strict=True)):
        arrays[f"control/{role}/{name}"] = load_npz(
            base / f"controls/{pair[role]}/{model}/{cond}.npz")["logits"]
    held = arrays["logits/reference/orig/heldout"]
    for cell in ("clean", "positive"):
        arrays[f"polygraphy/{cell}"] = polygraphy_fails(held, arrays[f"logits/{cell}/orig/heldout"])
    for cell, role in (("clean", "calibration"), ("positive", "heldout")):
        blocks = {(c, n): [sketches[c][n][layer][roles[role]] for layer in hosted.layers]
                  for c in (cell, "reference") for n in CONDS}
        scores = layer_scores(blocks[(cell, "orig")], blocks[("reference", "orig")],
                              blocks[(cell, "rotated")], blocks[("reference", "rotated")])
        for kind in KINDS:
            arrays[f"layers/{cell}/{kind}"] = scores[kind].astype(np.float32)
    arrays["labels"] = np.array([rows[i]["label"] for i in roles["heldout"]], np.int64)
    arrays["truth"] = np.array([hosted.layers.index(CASE_SKETCH)], np.int64)
    return arrays


def measure(run: Run, protocol: dict[str, Any], drift: dict[str, Any],
            hosts: dict[tuple[str, str], Hosted], conds: list[str]) -> dict[str, Any]:
    """Write each host's evidence arrays, then measure it from what was written."""
    p = params(protocol, drift)
    rows = []
    for (case, model), hosted in hosts.items():
        pair = protocol["cases"][case]["pair"]
        row = {"case": case, "model": model, "pair": pair, **hosted.describe()}
        if hosted.hosted:
            path = run.stage(STAGE) / "evidence" / case / f"{model}.npz"
            write_npz(path, evidence_arrays(run, case, model, pair, hosted, conds))
            row["evidence"] = path.relative_to(run.root).as_posix()
            row.update(host_measures(load_npz(path), p))
        rows.append(row)
    return {"polygraphy": version(), "hosts": rows,
            "not_hosted": protocol["cases"]["not_hosted"]}


def run_detectors(run_dir: Path, *, protocol_file: Path = PROTOCOL,
                  drift_protocol: Path = DRIFT_PROTOCOL, cases: list[str] | None = None,
                  backend: str | None = None, scheduler: str | None = None,
                  workers: int | None = None, models: str = "train") -> dict[str, Any]:
    """Run (or resume) the detector study in ``run_dir``; returns its evidence
    (``models``: the digits models trained, or the shipped ones)."""
    protocol = load_study_protocol(protocol_file)
    drift = load_protocol(drift_protocol)
    chosen = choose_cases(protocol, cases)
    releases = sorted({protocol["cases"][c]["pair"][k] for c in chosen
                       for k in ("affected", "fixed")})
    runtimes = {release: release_runtime(release) for release in releases}
    with hold(run_dir) as root:
        started, cpu = time.monotonic(), cpu_seconds()
        run = Run(root)
        conds = digits_images(run, backend, drift_protocol, models)
        run.forget(STAGE)
        hosts = build_hosts(run, protocol, drift, chosen)
        _execute(run, runtimes, plan(run, protocol, hosts, conds), backend, scheduler, workers)
        evidence = {"protocol_sha256": sha256(protocol_file),
                    **measure(run, protocol, drift, hosts, conds)}
        write_atomic(root / EVIDENCE_JSON, canonical_json(evidence))
        run.write_record(STAGE, {"protocol_sha256": evidence["protocol_sha256"],
                                 "cases": chosen, "releases": releases})
        write_manifest(root)
        record_timing(run, STAGE, time.monotonic() - started, cpu_seconds() - cpu)
        from kit.corpus.detector_report import write_detector_report

        write_detector_report(root)
        hosted = sum(1 for row in evidence["hosts"] if row["hosted"])
        say(f"corpus-detectors: {hosted} host(s) of {len(chosen)} case(s) measured in "
            f"{time.monotonic() - started:.1f} s ({root})")
        return evidence
