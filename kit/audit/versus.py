"""``python -m kit bench --vs-polygraphy [MODEL ...]``: the audit against the same question
answered by hand, side by side on one machine.

The by-hand route is the one a user takes without the kit: Polygraphy in each release's
own environment, ``polygraphy run MODEL --onnxrt --load-inputs in.json --save-outputs
a.json`` under FROM, then ``--load-outputs a.json`` under TO (two inferences, Polygraphy's
default tolerances). Here each release's environment is the kit's own (the lock's
onnxruntime and numpy) and Polygraphy is the one tools.lock pins, put on that
environment's path alone (a folder holding only the ``polygraphy`` package), so neither
route installs anything the other lacks. The inputs' JSON is written with Polygraphy's own
``save_json`` before the clock starts, as a user would have it ready.

Both routes are timed as whole commands in fresh processes, alternately, after one
untimed run of each (file cache, bytecode): the audit as ``python -m kit audit MODEL
--inputs X.npz --from FROM --to TO`` (both releases at once; the clean pairs only when the
two sides differ in a bit), the two Polygraphy commands one after the other, and the same
audit with ``--envelope`` (every cell of the clean pairs, whatever the outputs). The
ratio of the first two medians is the measure (target: at most ``TARGET``); the audit's
floor ratio (``kit.audit.bench``: its
wall time over the two runtimes' own inference) is printed beside it.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kit.errors import KitError
from kit.paths import ROOT

TARGET = 3.0
PAIR = ("1.20.1", "1.29.0")


def polygraphy_path(folder: Path) -> Path:
    """A folder holding only a link to the tools environment's ``polygraphy`` package."""
    import polygraphy

    (folder / "polygraphy").symlink_to(Path(polygraphy.__file__).parent)
    return folder


def polygraphy_commands(model: Path, inputs_json: Path, outputs_json: Path,
                        pythons: tuple[Path, Path]) -> list[list[str]]:
    """The two by-hand commands, FROM's saving its outputs, TO's comparing with them."""
    run = "import sys; from polygraphy.tools import main; sys.argv[0] = 'polygraphy'; " \
          "sys.exit(main())"
    return [[str(pythons[0]), "-c", run, "run", str(model), "--onnxrt", "--load-inputs",
             str(inputs_json), "--save-outputs", str(outputs_json)],
            [str(pythons[1]), "-c", run, "run", str(model), "--onnxrt", "--load-inputs",
             str(inputs_json), "--load-outputs", str(outputs_json)]]


def _timed(commands: list[list[str]], env: dict[str, str] | None) -> tuple[float, int, str]:
    """Wall seconds of the commands one after another, the last exit status and output."""
    start = time.monotonic()
    code, tail = 0, ""
    for command in commands:
        proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                              check=False, timeout=1800)
        code, tail = proc.returncode, (proc.stdout + proc.stderr).strip()
        if code not in (0, 1):  # 1: a verdict (the audit's "beyond", Polygraphy's FAILED)
            raise KitError(f"bench: {' '.join(command[:4])} ... exited {code}: "
                           f"{tail.splitlines()[-1] if tail else 'no output'}")
    return time.monotonic() - start, code, tail


def side_by_side(name: str, folder: Path, runs: int, pair: tuple[str, str] = PAIR
                 ) -> dict[str, Any]:
    """One model's row: both routes' median, least and most wall seconds, their ratio,
    both verdicts and the audit's floor ratio."""
    from polygraphy.json import save_json

    from kit.audit.bench import bench_audit
    from kit.audit.models import export
    from kit.files import load_npz
    from kit.runtime.runtimes import release_runtime
    from kit.runtime.venvs import ensure_runtime

    model, inputs = export(name, folder)
    inputs_json = folder / f"{name}-inputs.json"
    save_json([load_npz(inputs)], str(inputs_json))
    pythons = (ensure_runtime(release_runtime(pair[0]).name),
               ensure_runtime(release_runtime(pair[1]).name))
    env = {**os.environ, "PYTHONPATH": str(polygraphy_path(Path(tempfile.mkdtemp(
        prefix="polygraphy-", dir=folder))))}
    by_hand = polygraphy_commands(model, inputs_json, folder / f"{name}-outputs.json", pythons)
    times: dict[str, list[float]] = {"audit": [], "polygraphy": [], "envelope": []}
    verdicts: dict[str, str] = {}
    for attempt in range(runs + 1):  # the first of each is not counted
        out = folder / f"audit-{name}-{attempt}"
        audit = [sys.executable, "-m", "kit", "audit", str(model), "--inputs", str(inputs),
                 "--from", pair[0], "--to", pair[1], "--out", str(out)]
        forced = [*audit[:-1], f"{out}-envelope", "--envelope"]  # the clean pairs always
        for route, commands, environment in (("audit", [audit], None),
                                             ("polygraphy", by_hand, env),
                                             ("envelope", [forced], None)):
            seconds, code, tail = _timed(commands, environment)
            if attempt:
                times[route].append(seconds)
            verdicts[route] = _verdict(route, code, tail)
    floor = bench_audit(out, quiet=True)
    audit_s, poly_s, forced_s = (statistics.median(times[k])
                                 for k in ("audit", "polygraphy", "envelope"))
    return {"model": name, "from": pair[0], "to": pair[1], "runs": runs,
            "audit_s": _spread(times["audit"]), "polygraphy_s": _spread(times["polygraphy"]),
            "ratio": round(audit_s / poly_s, 2), "target": TARGET,
            "met": bool(audit_s / poly_s <= TARGET), "audit_verdict": verdicts["audit"],
            "polygraphy_verdict": verdicts["polygraphy"], "floor_s": floor["floor_s"],
            "floor_ratio": round(audit_s / floor["floor_s"], 1),
            "envelope": json.loads((out / "audit.json").read_text())["envelope"],
            "envelope_s": _spread(times["envelope"]), "envelope_ratio": round(forced_s / poly_s, 2)}


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 2), "min": round(min(values), 2),
            "max": round(max(values), 2)}


def _verdict(route: str, code: int, tail: str) -> str:
    if route == "audit":
        return tail.splitlines()[-1].split(";")[0].removeprefix("audit: ") if tail else "?"
    return "PASSED" if code == 0 else "FAILED"


def bench_versus(names: list[str], runs: int = 3) -> int:
    """Print one JSON row per model and a line per model; 0 when every ratio is within the
    target. The exports, inputs and reports live in a folder this call makes and removes."""
    folder = Path(tempfile.mkdtemp(prefix="kit-bench-versus-"))
    try:
        rows = [side_by_side(name, folder, runs) for name in names]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    for row in rows:
        print(json.dumps(row))
        print(f"bench: {row['model']} {row['from']} -> {row['to']}: audit "
              f"{row['audit_s']['median']} s ({row['audit_verdict']}) against Polygraphy by "
              f"hand {row['polygraphy_s']['median']} s ({row['polygraphy_verdict']}), median "
              f"of {row['runs']}: {row['ratio']}x (target <= {TARGET}x; the audit is "
              f"{row['floor_ratio']}x its floor; clean pairs {row['envelope']}; with "
              f"--envelope {row['envelope_s']['median']} s, {row['envelope_ratio']}x): "
              f"{'OK' if row['met'] else 'FAILED'}")
    return 0 if all(row["met"] for row in rows) else 1
