"""The kill harness on the archive's deposit (``kit.claims.archive.write_archive``, which
``python -m kit archive`` runs on the checkout): killed at its first, middle and last own
write in the default tests, at every one in ``nox -s hardening``, the
folder beside the deposit keeps the user's files, the deposit folder holds the whole
deposit wherever ``DEPOSIT.json`` stands (``kit.owned``: staged, then published, that file
last; the mark and a killed writer's temporary are bookkeeping the next run settles), and
the same call again gives the uninterrupted deposit byte for byte. ``git archive`` runs
as a child writing into the staging folder; it is not killed itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from kit.files import stale
from kit.owned import MARK
from kit.paths import ROOT
from tests.claims.test_archive import repo as repo
from tests.kill_at import USER_FILES, changed_user_files, seed_user_files

EVERY = int(os.environ.get("KIT_KILL_EVERY", "0"))
DRIVER = ("import sys; from pathlib import Path; from tests.kill_at import arm\n"
          "count = arm(int(sys.argv[1]))\n"
          "from kit.claims.archive import write_archive\n"
          "try:\n    write_archive(Path(sys.argv[2]), Path(sys.argv[3]))\n"
          "finally:\n    print(f'kill_at: {count[0]} writes', file=sys.stderr)")


def _deposit(kill_at: int, root: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", DRIVER, str(kill_at), str(root), str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()}


def test_killed_at_each_write_the_deposit_is_whole_or_absent(repo: Path,
                                                               tmp_path: Path) -> None:
    (tmp_path / "whole").mkdir()  # as each killed run's folder: the same writes
    seed_user_files(tmp_path / "whole", USER_FILES)
    whole = _deposit(0, repo, tmp_path / "whole" / "deposit")
    assert whole.returncode == 0, whole.stderr[-3000:]
    writes = int(whole.stderr.rsplit("kill_at: ", 1)[1].split()[0])
    assert writes >= 5
    expected = _files(tmp_path / "whole" / "deposit")
    assert set(expected) >= {"DEPOSIT.json", "SHA256SUMS"}
    for kill_at in range(1, writes + 1) if EVERY == 1 else (1, writes // 2, writes):
        folder = tmp_path / f"k{kill_at}"
        folder.mkdir()
        seed_user_files(folder, USER_FILES)
        out = folder / "deposit"
        proc = _deposit(kill_at, repo, out)
        assert proc.returncode == -signal.SIGKILL, (kill_at, proc.stderr[-2000:])
        assert changed_user_files(folder, USER_FILES) == [], kill_at
        if (out / "DEPOSIT.json").exists():  # moved last: the whole deposit is there
            deposit = {name: data for name, data in _files(out).items()  # the kit's own
                       if name != MARK and not stale(name)}  # bookkeeping set apart
            assert deposit == {n: d for n, d in expected.items() if n != MARK}, kill_at
        rerun = _deposit(0, repo, out)
        assert rerun.returncode == 0, (kill_at, rerun.stderr[-3000:])
        assert _files(out) == expected, kill_at
        assert changed_user_files(folder, USER_FILES) == [], kill_at
