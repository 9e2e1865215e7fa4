"""The bench rule (kit.drift.bench.passes) decided in kit, not in the noxfile.

Also covers ``kit.runtime.floor`` (no test file of its own)."""

from __future__ import annotations

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
