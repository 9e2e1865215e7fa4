"""The kill harness on ``python -m kit corpus-detectors`` at its own writes (the tiny drift
protocol's one-epoch model, one case on the default tests' two releases, as
tests/corpus/test_corpus_detectors.py runs it): killed at the middle of an uninterrupted
run's writes in the default tests, at every eighth in ``nox -s hardening``, it leaves no
process writing into the run folder, every user file beside the folder keeps its bytes and
mode, and a rerun into the same folder finishes with every file byte-identical to the
uninterrupted run's, the time records apart (``tests.kill_at.kill_and_rerun``)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import tiny_protocol
from tests.corpus.test_corpus_detectors import CASE, small_study_protocol
from tests.kill_at import kill_and_rerun

EVERY = int(os.environ.get("KIT_KILL_EVERY", "0"))


def test_killed_at_its_own_writes_a_rerun_gives_the_same_files(tmp_path: Path) -> None:
    kill_and_rerun(["corpus-detectors", "--cases", CASE, "--protocol",
                    str(tiny_protocol(tmp_path)), "--study-protocol",
                    str(small_study_protocol(tmp_path)), "--workers", "1"],
                   tmp_path, 8 if EVERY == 1 else 0)
