"""``python -m kit audit --bisect`` end to end on every host of the corpus (kit.audit.bisect
through kit.audit.command): from the first release the defect was observed on to the last
release the kit locks, at the level it was observed at, the audit is beyond clean drift,
the bisection names the case's first fixed release and the case among those that change
there, and onnx's reference implementation sides with the fixed release.

It needs every locked release's environment (18 of them, built on first use), so the
default test run leaves it to ``nox -s bisect`` (``KIT_AUDIT_CORPUS=1``); the default run
tests the search itself with a stand-in audit (tests/test_audit.py)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from kit.audit.command import UNDONE
from kit.corpus.case import Case
from kit.corpus.cases import CASES
from kit.runtime.runtimes import known_releases
from tests.test_audit import audit, case_files

pytestmark = pytest.mark.skipif(os.environ.get("KIT_AUDIT_CORPUS") != "1",
                                reason="nox -s bisect (every release's environment)")
LAST = max(known_releases(), key=lambda r: tuple(int(p) for p in r.split(".")))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bisect_names_the_first_fixed_release(case: Case, tmp_path: Path) -> None:
    model, inputs = case_files(tmp_path, case.id)
    arrays = dict(np.load(inputs))
    if len(next(iter(arrays.values()))) < 2:  # a host built with one row: four seeds' rows
        built = [case.build(seed).inputs for seed in range(4)]
        np.savez(inputs, **{k: np.concatenate([b[k] for b in built]) for k in arrays})
    source, fixed = case.affected[0], case.fixed[0]
    level = case.level
    out = tmp_path / "report"
    proc = audit(str(model), "--inputs", str(inputs), "--from", f"{source}/{level}",
                 "--to", f"{LAST}/{level}", "--bisect", "--out", str(out))
    assert proc.returncode == 1, proc.stderr[-2000:]  # beyond, and a known defect
    record = json.loads((out / "audit.json").read_text())
    assert record["verdict"] == "beyond clean drift"
    found = record["bisect"]
    assert found["first_release"] == fixed, found["visited"]
    assert case.id in found["known_cases_changing_there"]
    assert 0 < found["audits"] <= math.ceil(math.log2(found["releases_between"]))  # halves
    # the first node that moves there is named, or why not: the instrumented copy's own
    # outputs stay put (exposing its tensors undid the move: the fusion cases)
    assert found["first_moving"] or found["unlocalised"] == UNDONE, found
    closer = [row["closer"] for row in record["oracle"]["outputs"].values()]
    assert "to" in closer, closer
    assert set(closer) <= {"to", "neither"}, closer
    print(f"{case.id}: {source} -> {LAST} at {level}: first fixed {fixed}, "
          f"{found['audits']} audits over {found['releases_between']} releases, "
          f"first moving {(found['first_moving'] or {}).get('node')}")
