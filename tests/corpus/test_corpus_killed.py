"""The kill harness on ``python -m kit corpus`` at its own writes (two cases, two releases):
killed at the middle of an uninterrupted run's writes in the default tests, at every fourth
in ``nox -s hardening``, it leaves no process writing into the run folder, every user file
beside the folder keeps its bytes and mode, and a rerun into the same folder finishes with
every file byte-identical to the uninterrupted run's, the time records apart
(``tests.kill_at.kill_and_rerun``)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.kill_at import kill_and_rerun

EVERY = int(os.environ.get("KIT_KILL_EVERY", "0"))


def test_killed_at_its_own_writes_a_rerun_gives_the_same_files(tmp_path: Path) -> None:
    kill_and_rerun(["corpus", "--releases", "1.20.1", "1.21.1", "--cases",
                    "pad-avgpool-fusion", "minmax-nan", "--workers", "1"],
                   tmp_path, 4 if EVERY == 1 else 0)
