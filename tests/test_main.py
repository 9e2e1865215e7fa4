"""The command line's one error boundary: a path the user gives that the operating system
refuses (too long, a folder where a file goes, a file where a folder goes) is a
``kit: error`` naming it, exit 2, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kit.__main__ import main
from kit.paths import ROOT


def kit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kit", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, check=False)


def refused(proc: subprocess.CompletedProcess[str], path: Path | str) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    [line] = [x for x in proc.stderr.splitlines() if x.startswith("kit: error: ")]
    assert str(path) in line
    return line


def test_verify_outputs_under_a_file_onto_a_folder_or_too_long(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("mine\n")
    # one claim each: the outputs are checked before any claim, and written the same way
    line = refused(kit("verify", "--claim", "A-052", "--json", str(blocker / "out.json")),
                   blocker)
    assert "is a file where a folder is needed" in line
    folder = tmp_path / "a-folder"
    folder.mkdir()
    (folder / "kept.txt").write_text("mine\n")
    refused(kit("verify", "--claim", "A-052", "--page", str(folder)), folder)
    assert (folder / "kept.txt").read_text() == "mine\n"
    long = tmp_path / ("x" * 260 + ".json")
    assert "too long" in refused(kit("verify", "--claim", "A-052", "--json", str(long)),
                                 "x" * 200)
    assert blocker.read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "a-folder"]


def test_verify_json_and_page_replace_only_files_the_kit_wrote(tmp_path: Path) -> None:
    """``--json`` and ``--page`` name files: a new one is written, one the kit wrote is
    replaced (its mode kept), a user's file of that name is refused and left as it was."""
    for name, theirs in (("out.json", '{"mine": 1}'), ("index.html", "<html>mine</html>")):
        (tmp_path / name).write_text(theirs)
        os.chmod(tmp_path / name, 0o600)
        option = "--json" if name.endswith(".json") else "--page"
        line = refused(kit("verify", "--claim", "A-052", option, str(tmp_path / name)),
                       tmp_path / name)
        assert "a file the kit did not write" in line
        assert (tmp_path / name).read_text() == theirs
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o600
    ours = [tmp_path / "kit.json", tmp_path / "kit.html"]
    for mode in (0o640, None):  # the second run replaces what the first wrote
        proc = kit("verify", "--claim", "A-052", "--json", str(ours[0]), "--page", str(ours[1]))
        assert proc.returncode == 0, proc.stderr
        if mode is not None:
            os.chmod(ours[0], mode)
    assert ours[0].stat().st_mode & 0o777 == 0o640
    assert json.loads(ours[0].read_text())["root"]


def test_a_run_folder_or_model_name_too_long(tmp_path: Path) -> None:
    long = tmp_path / ("r" * 300)
    assert "too long" in refused(kit("stage", "split", "--run", str(long)), long)
    inputs = tmp_path / "in.npz"
    inputs.write_bytes(b"")
    proc = kit("run", "--runtime", "ref", "--model", str(long), "--inputs", str(inputs),
               "--output", str(tmp_path / "out.npz"), "--backend", "venv")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("kit: error: ")
    assert "r" * 250 in proc.stderr
    assert not (tmp_path / "out.npz").exists()


def test_a_missing_module_names_the_environment_to_build() -> None:
    """``python3 -m kit verify`` outside the reviewer environment: which module is missing
    and the command that builds the environment, exit 2, no traceback."""
    code = ("import sys; sys.modules['sklearn'] = None; from kit.__main__ import main; "
            "sys.exit(main(['verify']))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("kit: error: python -m kit verify needs the module 'sklearn")
    assert "`python3 -m kit.runtime.venvs verify`" in proc.stderr


def test_the_help_has_no_markup() -> None:
    for args in (["--help"], ["verify", "--help"], ["stage", "--help"]):
        proc = kit(*args)
        assert proc.returncode == 0
        assert "``" not in proc.stdout
    assert "verify     every ledger" in kit("--help").stdout


def test_replay_options_without_replay_are_refused() -> None:
    for option in (["--small"], ["--stages", "split"], ["--substrate", "digits"],
                   ["--backend", "venv"], ["--retrained", "sciml/kit"]):
        proc = kit("verify", *option)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr == (f"kit: error: verify: {option[0]} only apply with --replay (or, "
                               "for --run, --compare; for --status-only, --retrained and "
                               "--models, --evidence); add it or leave them out\n")


def test_options_a_mode_does_not_use_are_refused_never_ignored(tmp_path: Path) -> None:
    for mode, option in ((["--evidence", str(tmp_path)], ["--small"]),
                         (["--evidence", str(tmp_path)], ["--stages", "split"]),
                         (["--replay"], ["--retrained", "sciml/kit"]),
                         (["--replay"], ["--status-only"])):
        proc = kit("verify", *mode, *option)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr == (f"kit: error: verify {mode[0]}: {option[0]} do not apply to "
                               "it; leave it out\n")


def test_verify_one_claim_prints_that_claim_alone_after_the_summary(tmp_path: Path) -> None:
    page = str(tmp_path / "index.html")
    proc = kit("verify", "--claim", "A-052", "--page", page)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("verify: 2 claim checks, 0 failed checks")  # only A-052
    assert "verify: 2 of 2 claim checks selected" in lines
    headers = [line for line in lines if line.startswith("A-0")]
    assert headers == ["A-052 (drift, cifar100): not run here",
                       "A-052 (drift, digits): direction reproduced"]
    assert "  statement:      metamorphic-minus-direct detection difference, primary split" \
        in lines
    assert lines[-1] == lines[0]
    wrong = kit("verify", "--claim", "A-999", "--page", page)
    assert wrong.returncode == 2
    assert wrong.stderr.startswith("kit: error: verify: no claim A-999 in the ledgers")
    default_page = ROOT / "runs" / "verify" / "index.html"
    before = default_page.stat().st_mtime_ns if default_page.is_file() else None
    assert kit("verify", "--claim", "A-052").returncode == 0  # the full page is left be
    assert (default_page.stat().st_mtime_ns if default_page.is_file() else None) == before



def test_a_selection_by_study_or_status_leaves_the_claims_page_be(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The page verify is asked to write: the default one only when nothing is selected,
    ``--page`` whenever it is given."""
    import kit.claims.verify

    asked: list[object] = []
    monkeypatch.setattr(kit.claims.verify, "verify", lambda **kw: asked.append(kw["page"]) or 0)
    page = tmp_path / "p.html"
    for args in (["--study", "corpus"], ["--status", "described"], ["--claim", "A-052"],
                 [], ["--study", "corpus", "--page", str(page)]):
        assert main(["verify", *args]) == 0
    assert asked == [None, None, None, ROOT / "runs" / "verify" / "index.html", page]


def test_a_selection_of_a_study_whose_ledger_did_not_load_names_why(tmp_path: Path) -> None:
    """``verify --study realdrift`` when claims/realdrift.yaml cannot be loaded: the error
    says which check failed, not only that no such study exists."""
    import shutil

    for name in ("claims", "manifests", "locks", "kit"):
        shutil.copytree(ROOT / name, tmp_path / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    ledger = tmp_path / "claims" / "realdrift.yaml"
    ledger.write_text(ledger.read_text().replace("study: realdrift", "study: [realdrift", 1))
    proc = subprocess.run([sys.executable, "-m", "kit", "verify", "--study", "realdrift",
                           "--page", str(tmp_path / "page.html")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "no study realdrift in the ledgers" in proc.stderr
    assert f"failed checks: {ledger}" in proc.stderr
