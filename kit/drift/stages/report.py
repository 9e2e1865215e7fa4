"""Stage report: ``<run>/report/`` with Tables 1-4 (and the bootstrap and per-model
tables) as markdown and CSV, four PNG figures and ``index.html`` with the provenance.
The report shows run metadata (wall times), so it is outside the run manifest."""

from __future__ import annotations

from typing import Any

from kit.drift import report
from kit.files import read_json, sha256
from kit.machine import fingerprint
from kit.papers import read_ledger
from kit.paths import ROOT
from kit.runfolder import TIMINGS, Run
from kit.runtime.docker import MANIFEST as IMAGES_MANIFEST
from kit.runtime.runtimes import load_runtimes

LEDGER = ROOT / "claims" / "drift.yaml"


def provenance(run: Run) -> dict[str, Any]:
    """Substrate, runtimes, lock hashes, image IDs, machine and wall time per stage."""
    found: dict[str, Any] = {"run folder": str(run.root),
                             "substrate": run.record("fetch")["substrate"]}
    for name, runtime in load_runtimes().items():
        found[f"runtime {name}"] = runtime.description
        found[f"lock {runtime.lock.name} sha256"] = runtime.lock_sha256()
    found["lock tools.lock sha256"] = sha256(ROOT / "locks" / "tools.lock")
    images = IMAGES_MANIFEST
    if images.is_file():
        built = read_json(images, "run `nox -s images` again")
        for name, entry in sorted(built["runtimes"].items()):
            found[f"image {name}"] = f"{entry['image']} {entry['id']}"
    else:
        found["images"] = "none built here (venv backend)"
    found.update({f"machine {k}": v for k, v in fingerprint().items()})
    timings = run.root / TIMINGS
    if timings.is_file():
        found.update({f"wall time {k}": f"{v} s" for k, v in
                      read_json(timings, f"delete {timings} (wall times only)").items()})
    found["run manifest sha256"] = sha256(run.root / "manifest.json") \
        if (run.root / "manifest.json").is_file() else "not written yet"
    return found


def run_report(protocol: dict[str, Any], run: Run) -> dict[str, Any]:
    del protocol
    return report.write_report(run, run.root / "report", report.paper_values(read_ledger(LEDGER)),
                               provenance(run))
