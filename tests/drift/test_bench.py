"""The bench rule (kit.drift.bench.passes) decided in kit, not in the noxfile."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.drift.bench import BOOTSTRAP_TARGET_S, TARGET, passes

INFER = {"ratio": 1.1, "target": TARGET}
NESTED = {"agree_on_sample": True, "vectorised_s": 1.0, "target_s": BOOTSTRAP_TARGET_S}


def test_within_both_targets_passes() -> None:
    assert passes(INFER, NESTED)


@pytest.mark.parametrize(("infer", "nested"), [
    ({**INFER, "ratio": TARGET + 0.01}, NESTED),
    (INFER, {**NESTED, "vectorised_s": BOOTSTRAP_TARGET_S + 0.01}),
    (INFER, {**NESTED, "agree_on_sample": False}),
])
def test_each_target_missed_fails(infer: dict[str, object], nested: dict[str, object]) -> None:
    assert not passes(infer, nested)


def test_stage_times_sum_against_the_target(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from kit.drift.bench import stage_times
    from kit.runfolder import CPU_TIMES

    assert not stage_times(tmp_path, 900, "reproduce")
    (tmp_path / CPU_TIMES).write_text(json.dumps({
        "fetch": {"wall_s": 300.0, "cpu_s": 590.0, "cores": 2, "utilisation": 0.983},
        "infer": {"wall_s": 500.0, "cpu_s": 900.0, "cores": 2, "utilisation": 0.9}}))
    assert stage_times(tmp_path, 900, "reproduce")
    assert not stage_times(tmp_path, 799, "reproduce")
    said = capsys.readouterr().out
    assert "98.3% of 2 cores" in said
    assert "800 s in all" in said
    assert "1490 CPU s on 2 cores: no schedule ends before 745 s" in said
    assert "below that floor" not in said
    (tmp_path / CPU_TIMES).write_text(json.dumps({
        "fetch": {"wall_s": 477.0, "cpu_s": 850.0, "cores": 2, "utilisation": 0.891},
        "infer": {"wall_s": 625.0, "cpu_s": 1221.0, "cores": 2, "utilisation": 0.977}}))
    assert not stage_times(tmp_path, 900, "reproduce")
    said = capsys.readouterr().out
    assert "no schedule ends before 1036 s (the target is below that floor)" in said
