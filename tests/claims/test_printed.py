"""The kit's number in the paper's printed form (``kit.claims.printed``): the token that is
the graded value sets the decimals and the unit; a confidence level is skipped; a pair or
k/n takes the kit's second number only from the half the paper printed second; an
interval the kit computed is shown as one; without a matching token, nothing."""

from __future__ import annotations

import numpy as np
import pytest

from kit.claims.printed import printed

N = [{"label": "n", "kit": 168.0, "paper": 180.0}]


@pytest.mark.parametrize(("published", "paper", "kit", "halves", "expected"), [
    ("95% CI [0.975,0.992]", 0.975, 0.995566, None, "0.996"),  # not "1%"
    ("72.83%", 72.83, 99.3333, None, "99.33%"),
    ("16,200", 16200, 5896, None, "5,896"),
    ("+0.08 points", 0.08, 0.5, None, "+0.50"),
    ("+0.08 points", 0.08, -0.74, None, "-0.74"),
    ("180/180 fail", 180, 168, N, "168/168"),
    ("180/180 fail", 180, 168, [{"label": "ratio", "kit": 0.5, "paper": 2.0}], "168"),
    ("conservation 1.00/0.81", 1.0, np.float64(1.0),
     [{"label": "recall", "kit": 0.875, "paper": 0.81}], "1.00/0.88"),
    ("Wilson 95% CI [0.80,1.00]", 0.8, [0.796117, 1.0], None, "[0.80, 1.00]"),
    ("[74.65%, 76.75%]", 74.65, (70.123, 71.0), None, "[70.12%, 71.00%]"),
    ("about 12 of them", 13, 12, None, None),  # no printed token is the graded value
    ("12 of them", 12, "a word", None, None),
    ("12 of them", 12, True, None, None),
])
def test_the_printed_form(published: str, paper: object, kit: object,
                          halves: list[dict[str, object]] | None, expected: str | None) -> None:
    assert printed(published, paper, kit, halves) == expected
