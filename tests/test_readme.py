"""The README names only what exists: every repository path it puts in backticks, and
every nox session it names (``nox -s NAME`` and the session list) is one the noxfile
defines, so a reviewer following it never meets a moved file or a missing session."""

from __future__ import annotations

import re
import subprocess
import sys

from kit.paths import ROOT

README = (ROOT / "README.md").read_text()
# The folders a path the README names may start with, and the files at the top.
TOP = ("kit/", "claims/", "manifests/", "locks/", "tests/", "docs/", "tools/", ".ci/")
FILES = ("noxfile.py", "pyproject.toml", "LICENSE", "CITATION.cff", "Dockerfile.ref",
         "Dockerfile.cand", "Dockerfile.release", "README.md")
# Paths a run or a build writes (git-ignored), named as where output goes.
WRITTEN = ("runs/", "build/", ".kit/", ".venv")


def _named_paths() -> set[str]:
    found = set()
    for token in re.findall(r"`([^`\s]+)`", README):
        token = token.rstrip(".,;:)")
        if token.startswith(TOP) or token in FILES:
            found.add(token)
    return found


def test_every_path_the_readme_names_exists() -> None:
    named = _named_paths()
    assert len(named) > 40
    missing = []
    for name in sorted(named):
        if any(ch in name for ch in "*<>{}") or name.startswith(WRITTEN):
            pattern = re.sub(r"<[^>]+>|\{[^}]*\}", "*", name).rstrip("/")
            if not name.startswith(WRITTEN) and not list(ROOT.glob(pattern)):
                missing.append(name)
        elif not (ROOT / name.split("::")[0]).exists():
            missing.append(name)
    assert missing == []


def _sessions() -> set[str]:
    out = subprocess.run([sys.executable, "-m", "nox", "-l", "-f", str(ROOT / "noxfile.py")],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    return {line.split()[1] for line in out.splitlines() if line[:2] in ("* ", "- ")}


def test_every_nox_session_the_readme_names_exists_and_the_list_is_complete() -> None:
    sessions = _sessions()
    named = set(re.findall(r"nox -s ([a-z][a-z-]*)", README))
    assert named
    assert named <= sessions
    listed = re.search(r"`nox -l` lists the sessions: (.*?)\. Every session", README, re.S)
    assert listed is not None
    assert set(re.findall(r"`([a-z-]+)`", listed.group(1))) == sessions


def test_the_readme_cites_the_papers_by_title_not_by_a_path_outside_the_repository() -> None:
    assert "../shared" not in README
    assert "seeds/" not in README
    flat = " ".join(README.split())
    assert "When Metamorphic Contrast Hurts" in flat
    assert "Domain-Validity-Gated Metamorphic Testing of Scientific ML Surrogates" in flat
    assert "## Artifact evaluation" in README


def test_the_readme_shows_the_matrix_of_the_shipped_replay_records() -> None:
    """The README's table of CPUs is the one the shipped records make
    (``python -m kit.claims.replays`` prints it): a record added or changed without the
    README, or the other way round, fails here."""
    from kit.claims.replays import load_records, markdown

    records, problems = load_records()
    assert problems == []
    assert records  # at least this kit's own replay is shipped
    shown = re.search(r"<!-- replays -->\n(.*?)\n<!-- /replays -->", README, re.S)
    assert shown is not None
    assert shown.group(1) == markdown(records)


def test_the_last_line_the_readme_shows_is_the_one_verify_prints() -> None:
    """The example of verify's last line counts the claim checks of the README's status
    table (which ``tests/claims/test_verify.py`` checks against verify) and names the root
    the reviewer's command expects."""
    shown = re.search(r"verify: (\d+) claim checks, 0 failed checks, [\d.]+ s; "
                      r"root ([0-9a-f]{64}); OK", README)
    assert shown is not None
    expected = re.search(r"--expect-root ([0-9a-f]{64})", README)
    assert expected is not None
    assert shown.group(2) == expected.group(1)
    header = README.index("| study | reproduced |")
    table = README[header:].split("\n\n", 1)[0].splitlines()[2:]
    assert len(table) == 4
    assert int(shown.group(1)) == sum(int(row.rstrip(" |").rsplit("|", 1)[1]) for row in table)
