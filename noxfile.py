"""nox sessions of the kit. Each is a thin call into one ``kit`` function or tool.

All sessions share one tools environment (``.venv``, built from ``locks/tools.lock``
with ``--require-hashes``; it holds torch, so it is built once, not per session), so nox
itself creates no environments (``venv_backend="none"``). Any nox on any Python 3.11+
can drive them: the first session builds ``.venv`` when it is missing or stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
from kit.runtime.venvs import ensure_tools  # noqa: E402  (the kit must be importable first)

nox.options.default_venv_backend = "none"
nox.options.sessions = ["tests"]
nox.options.error_on_external_run = False


def _python() -> str:
    return str(ensure_tools())


@nox.session
def tests(session: nox.Session) -> None:
    """The default test run (docker tests run when a daemon answers or KIT_REQUIRE_DOCKER=1)."""
    session.run(_python(), "-m", "pytest", *session.posargs, external=True)


@nox.session
def images(session: nox.Session) -> None:
    """Build Dockerfile.ref and Dockerfile.cand from host-downloaded wheelhouses."""
    session.run(_python(), "-m", "kit", "images", *session.posargs, external=True)


# One session per drift stage: ``nox -s NAME -- [--substrate S] [--run DIR] ...`` runs
# ``python -m kit stage NAME``. The docstring is what ``nox -l`` shows.
STAGE_SESSIONS = {
    "fetch": "Drift stage fetch: digits (default, trains the 3 models) or -- --substrate cifar100.",
    "split": "Drift stage split: the 600-image sample and every image condition.",
    "fault": "Drift stage fault: severities from calibration, the 54 faulty models.",
    "infer": "Drift stage infer: every model, runtime cell and image condition (resumable).",
    "score": "Drift stage score: per-case evidence tables, calibration, localisation, summary.",
    "bootstrap": "Drift stage bootstrap: 500 fixed-threshold and 5,000 nested replicates.",
    "sensitivity": "Drift stage sensitivity: the rotation grid on the 150/150 split.",
    "report": "Tables 1-4 (markdown, CSV), figures and an HTML page under <run>/report.",
}


def _stage_session(name: str, doc: str) -> None:
    def run(session: nox.Session) -> None:
        session.run(_python(), "-m", "kit", "stage", name, *session.posargs, external=True)

    run.__doc__, run.__name__ = doc, name
    nox.session(name=name)(run)


for _name, _doc in STAGE_SESSIONS.items():
    _stage_session(_name, _doc)


@nox.session
def reproduce(session: nox.Session) -> None:
    """Every drift stage in order (-- --substrate cifar100 --assets DIR)."""
    session.run(_python(), "-m", "kit", "reproduce", *session.posargs, external=True)


@nox.session(name="reproduce-all")
def reproduce_all(session: nox.Session) -> None:
    """Every study into runs/ (resumable), shipped into a fresh folder, the claims recomputed
    and judged against the shipped evidence (-- --small, --only STUDY ..., --models M,
    --plan, --scheduler tcp://HOST:PORT)."""
    session.run(_python(), "-m", "kit", "reproduce-all", *session.posargs, external=True)


@nox.session
def verify(session: nox.Session) -> None:
    """Every claim recomputed offline from shipped evidence (-- --replay [--stages ...])."""
    session.run(_python(), "-m", "kit", "verify", *session.posargs, external=True)


@nox.session
def reports(session: nox.Session) -> None:
    """Every study's report from the shipped evidence (python -m kit reports), into
    runs/reports (-- --out DIR)."""
    session.run(_python(), "-m", "kit", "reports", *session.posargs, external=True)


@nox.session
def sciml(session: nox.Session) -> None:
    """SciML study (python -m kit sciml): operator floor, FV balance, FNO, PINN,
    MeshGraphNet (with PhysicsNeMo, whose environment is built first), into runs/sciml.
    Options: -- --without-physicsnemo, --resimulate, --deepmind FOLDER, --run DIR."""
    session.run(_python(), "-m", "kit", "sciml", *session.posargs, external=True)


@nox.session
def sweep(session: nox.Session) -> None:
    """Real-drift sweep (python -m kit sweep): three models x two exports x every release of
    kit/runtime/releases.toml x every level it offers x threads {1, 2}, into
    runs/sweep-digits; builds each release's environment on demand. Options: -- --releases
    R ..., --levels L ..., --threads N ..., --workers N, --scheduler tcp://HOST:PORT."""
    session.run(_python(), "-m", "kit", "sweep", *session.posargs, external=True)


@nox.session
def corpus(session: nox.Session) -> None:
    """Real-defect corpus (python -m kit corpus): every case of kit/corpus/cases under every
    release of kit/protocols/corpus.yaml at both levels, into runs/corpus; builds each
    release's environment from its committed lock on demand. Options: -- --cases ID ...,
    --releases R ..., --workers N, --scheduler tcp://HOST:PORT. Without options it then runs
    the detector study (python -m kit corpus-detectors, into runs/corpus-detectors)."""
    session.run(_python(), "-m", "kit", "corpus", *session.posargs, external=True)
    if not session.posargs:
        session.run(_python(), "-m", "kit", "corpus-detectors", external=True)


@nox.session(name="corpus-detectors")
def corpus_detectors(session: nox.Session) -> None:
    """The corpus's detector study (python -m kit corpus-detectors): the CNN-op cases of
    kit/protocols/corpus-detectors.yaml in the digits models (trained first when not
    cached), into runs/corpus-detectors. Options: -- --cases ID ..., --workers N,
    --scheduler tcp://HOST:PORT."""
    session.run(_python(), "-m", "kit", "corpus-detectors", *session.posargs, external=True)


@nox.session
def audit(session: nox.Session) -> None:
    """Audit anyone's ONNX model across an onnxruntime move (python -m kit audit): -- MODEL
    --inputs X.npz --from RELEASE[/LEVEL] --to RELEASE[/LEVEL] [--screen-only]. The audit's
    own exit status comes back: 0 within clean drift, 1 beyond it (or a known defect), 2
    an error (nox's own failure would make both 1)."""
    import subprocess

    code = subprocess.run([_python(), "-m", "kit", "audit", *session.posargs],
                          check=False).returncode
    if code:
        session.log(f"python -m kit audit exited {code}")
        raise SystemExit(code)


@nox.session
def bench(session: nox.Session) -> None:
    """The audit of torchvision's resnet18 against Polygraphy by hand, side by side (<= 3x),
    then infer wall time over its floor (<= 1.3) and the nested bootstrap (<= 5 s); --
    --audit DIR: a finished audit's time over its floor (the two runtimes' own inference);
    -- --vs-polygraphy [MODEL ...]: the side-by-side alone; -- --answer: verify --claim
    A-052 in fresh starts (<= 2 s on an idle machine)."""
    if not session.posargs:  # first: it needs no finished run
        session.run(_python(), "-m", "kit", "bench", "--vs-polygraphy", "resnet18",
                    external=True)
    session.run(_python(), "-m", "kit", "bench", *session.posargs, external=True)


@nox.session
def bisect(session: nox.Session) -> None:
    """Every corpus host through `kit audit --bisect`, from its first affected release to
    the last the kit locks (every release's environment): the first fixed release found,
    the reference oracle on the fixed side (tests/test_audit_bisect_corpus.py)."""
    session.run(_python(), "-m", "pytest", "-q", "-s", "tests/test_audit_bisect_corpus.py",
                *session.posargs, env={"KIT_AUDIT_CORPUS": "1"}, external=True)


@nox.session
def hardening(session: nox.Session) -> None:
    """The kill harness at every write of each command it covers (the default tests kill
    at every fourth or at a few moments): tests/kill_at.py, tests/claims/test_ship_killed.py,
    test_reports_killed.py, test_verify_killed.py, test_replay_record_killed.py,
    tests/runtime/test_run_killed.py, tests/test_audit_killed.py,
    tests/test_writers_killed.py (sciml-report, polygraphy --out, verify --evidence),
    reproduce-all's, the SciML study's, the corpus study's, its detector study's, the
    sweep's, the archive's and verify --replay's."""
    session.run(_python(), "-m", "pytest", "-q", "tests/claims/test_ship_killed.py",
                "tests/claims/test_reports_killed.py", "tests/claims/test_verify_killed.py",
                "tests/claims/test_replay_record_killed.py",
                "tests/runtime/test_run_killed.py", "tests/test_audit_killed.py",
                "tests/test_writers_killed.py", "tests/test_reproduce_killed.py",
                "tests/sciml/test_sciml_killed.py",
                "tests/corpus/test_corpus_killed.py",
                "tests/corpus/test_corpus_detectors_killed.py",
                "tests/drift/test_sweep_killed.py", "tests/claims/test_archive_killed.py",
                "tests/drift/test_replay_killed.py", *session.posargs,
                env={"KIT_KILL_EVERY": "1"}, external=True)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff and mypy over the kit and its tests."""
    python = _python()
    session.run(python, "-m", "ruff", "check", "kit", "tests", "noxfile.py", external=True)
    session.run(python, "-m", "mypy", "kit", external=True)


@nox.session
def lock(session: nox.Session) -> None:
    """Regenerate locks/*.lock from locks/*.in (pip-tools, hashes for every wheel)."""
    session.run("bash", str(ROOT / "tools" / "lock.sh"), external=True,
                env={"PATH": f"{Path(_python()).parent}:{session.env.get('PATH', '')}"})
