"""``python -m kit archive``: the deposit a permanent archive takes (what ACM's "Available"
badge asks for: Zenodo, Software Heritage or an institutional repository).

It writes into ``--out`` (default ``runs/archive``; the kit's folder rule, ``kit.owned``):

    kit-<commit>.tar.gz   ``git archive`` of the committed tree: every file git tracks
                          (ledgers, shipped evidence, code, locks), nothing else
    DEPOSIT.json          the commit, the root digest verify prints for that tree, the
                          archive's sha256 and size, and the command a reviewer runs on
                          the unpacked tree to see the same root
    SHA256SUMS            the archive's sha256 in ``sha256sum -c`` form

A checkout with uncommitted changes to tracked files is refused: its root would not be the
archive's. The root is computed here from the checkout (``kit.claims.coverage.roots``),
which equals the archive's tree because nothing tracked differs from the commit.
``DEPOSIT.json`` moves into place last (``kit.owned.publish``'s commit file): where it
stands, the whole deposit does.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from kit.claims.coverage import roots
from kit.errors import KitError
from kit.files import canonical_json, sha256, write_atomic
from kit.owned import publish, staged


def _git(root: Path, *args: str) -> str:
    try:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              check=False, timeout=600)
    except FileNotFoundError as exc:
        raise KitError("archive: git is needed to archive the committed tree") from exc
    if proc.returncode != 0:
        raise KitError(f"archive: git {' '.join(args)} failed in {root}: "
                       f"{proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def write_archive(root: Path, out: Path) -> Path:
    """The deposit of ``root``'s committed tree into ``out``; returns ``DEPOSIT.json``."""
    changed = [line for line in _git(root, "status", "--porcelain",
                                     "--untracked-files=no").splitlines() if line.strip()]
    if changed:
        first = changed[0][3:]
        raise KitError(f"archive: {root / first} (and any other tracked file changed) is not "
                       "committed; commit or restore it, so the archive holds the tree the "
                       "root names")
    commit = _git(root, "rev-parse", "HEAD").strip()
    found = roots(root)
    name = f"kit-{commit[:12]}.tar.gz"
    with staged(out) as staging:
        _git(root, "archive", "--format=tar.gz", f"--prefix=kit-{commit[:12]}/",
             "-o", str(staging / name), "HEAD")
        digest = sha256(staging / name)
        write_atomic(staging / "SHA256SUMS", f"{digest}  {name}\n".encode())
        write_atomic(staging / "DEPOSIT.json", canonical_json({
            "commit": commit, "archive": name, "sha256": digest,
            "bytes": (staging / name).stat().st_size, "root": found["combined"],
            "roots": found, "check": "tar xzf ARCHIVE && cd kit-<commit>/ && python3 -m "
            "kit.runtime.venvs verify && .venv-verify/bin/python -m kit verify "
            f"--expect-root {found['combined']}"}))
        publish(staging, out, "python -m kit archive", commit="DEPOSIT.json")
    return out / "DEPOSIT.json"
