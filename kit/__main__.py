"""Command line: ``python -m kit COMMAND``.

    run        one exchange: a model and an input .npz under one runtime -> an output .npz
    images     build runtime images (ref, cand, any ort-RELEASE) into build/images.json
    stage      one drift stage (fetch split fault infer score bootstrap sensitivity report)
    reproduce  the drift stages in order, then the run manifest check
    verify     every ledger, schema, manifest and claim, offline (--replay: rerun and compare)
    ship       copy a finished run's evidence into claims/ and rewrite the manifests
    reports    every study's report from the shipped evidence (tables, figures, pages)
    sciml      the SciML study (operator floor, FNO, PINN, MeshGraphNet, catalogue)
    sciml-report  the SciML report of a finished run (tables, figures, one HTML page)
    bench      infer's wall time against its floor and the nested bootstrap's engine
    sweep      the real-drift sweep (every release x level x threads)
    corpus     the real-defect corpus (named onnxruntime CPU defects under every release)
    corpus-detectors  the corpus's detector study (its CNN-op cases in the digits models)
    reproduce-all  every study into runs/, shipped into a fresh folder, claims recomputed
    audit      does an onnxruntime upgrade move a model beyond clean drift (anyone's model)
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

# ``python -m kit verify`` runs itself again isolated (``kit.claims.isolation``) before it
# reads another kit module: this file and the package's ``__init__`` are all a first start
# has read when it is replaced.
FLAGS = ("-I", "-S", "--check-hash-based-pycs", "always")
BOOT = Path(__file__).resolve().parent / "claims" / "boot.py"  # the second start


def isolated() -> bool:
    """Whether this process runs as ``reexec`` starts it (``FLAGS``)."""
    import _imp

    return bool(sys.flags.isolated and sys.flags.no_site) \
        and _imp.check_hash_based_pycs == "always"


def reexec(argv: list[str]) -> None:
    """``python -m kit verify ...`` started otherwise than isolated: replaced, at once, by
    the same command under ``FLAGS`` (``kit.claims.isolation``). Other commands run as
    they are."""
    if len(argv) < 2 or argv[1] != "verify" or isolated():
        return
    os.execv(sys.executable, [sys.executable, *FLAGS, str(BOOT), *argv[1:]])


if __name__ == "__main__":
    reexec(sys.argv)

from kit.cli import parser as build_parser  # noqa: E402 (after the verify restart)
from kit.errors import KitError, missing_module, path_problem  # noqa: E402
from kit.procs import die_with_parent  # noqa: E402


def _run(args: argparse.Namespace) -> int:
    from kit.runtime.exchange import exchange

    print(exchange(args.runtime, args.model, args.inputs, args.output, args.backend,
                   args.batch_size))
    return 0


def _images(args: argparse.Namespace) -> int:
    from kit.runtime.docker import build_images

    build_images(args.base, args.runtime)
    return 0


def _stage(args: argparse.Namespace) -> int:
    from kit.drift.protocol import PROTOCOL
    from kit.drift.stages.pipeline import reproduce, run_stage
    from kit.runtime.scale import check_options

    check_options(args.scheduler, args.workers)

    options = {"substrate": args.substrate, "run_dir": args.run, "assets": args.assets,
               "asset_pins": args.asset_pins, "backend": args.backend,
               "protocol_file": args.protocol or PROTOCOL, "scheduler": args.scheduler,
               "workers": args.workers, "models": args.models}
    if args.command == "stage":
        run_stage(args.name, **options)
    else:
        print(reproduce(**options))
    return 0


def _verify(args: argparse.Namespace) -> int:
    if args.compare:
        from kit.drift.replay import report_replay

        return report_replay(*args.compare)
    if args.evidence:
        from kit.claims.fresh import verify_fresh

        _refuse_unused(args, "--evidence", ("status_only", "retrained", "models"))
        models = {"*": args.models} if args.models else {}  # for the record
        return verify_fresh(args.evidence, args.status_only, retrained=args.retrained or (),
                            models={**models, **dict.fromkeys(args.retrained or (), "train")},
                            out=args.page)
    if args.replay:
        from kit.drift.replay import replay

        _refuse_unused(args, "--replay", ("stages", "run", "substrate", "backend", "protocol",
                                          "small", "models"))
        return replay(args.run, args.substrate, args.stages, args.small, args.protocol,
                      args.backend, args.models or "train")
    replay_only = [f"--{name.replace('_', '-')}" for name in REPLAY_OPTIONS
                   if getattr(args, name) not in (None, False)]
    if replay_only:
        raise KitError(f"verify: {', '.join(replay_only)} only apply with --replay (or, for "
                       "--run, --compare; for --status-only, --retrained and --models, "
                       "--evidence); add it or leave them out")
    if args.deep and args.claim:
        raise KitError("verify: --deep recounts every stored summary, which no claim reads; "
                       "it does not go with --claim")
    from kit.claims.page import DEFAULT_PAGE
    from kit.claims.verify import Selection, verify
    from kit.paths import ROOT

    select = Selection(tuple(args.claim), tuple(args.study), tuple(args.status))
    return verify(json_out=args.json, strict_findings=args.strict_findings,
                  expect_root=args.expect_root,
                  # a run that selects (claims, studies or statuses) prints its rows and
                  # leaves the full page be, unless --page asks for one
                  page=args.page or (None if select else ROOT / DEFAULT_PAGE), select=select,
                  interpreter=True, deep=args.deep)


# The verify options that only a replay reads: refused without --replay.
def _refuse_unused(args: argparse.Namespace, mode: str, allowed: tuple[str, ...]) -> None:
    """A KitError naming the options given that ``mode`` does not use (never ignored)."""
    unused = [f"--{name.replace('_', '-')}" for name in REPLAY_OPTIONS
              if name not in allowed and getattr(args, name) not in (None, False)]
    if unused:
        raise KitError(f"verify {mode}: {', '.join(unused)} do not apply to it; leave "
                       f"{'it' if len(unused) == 1 else 'them'} out")


REPLAY_OPTIONS = ("stages", "run", "substrate", "backend", "protocol", "small",
                  "status_only", "retrained", "models")


def _sciml(args: argparse.Namespace) -> int:
    from kit.sciml.run import run_command

    print(run_command(args.run, args.without_physicsnemo, args.resimulate, args.deepmind,
                      args.small, args.models))
    return 0


def _sciml_report(args: argparse.Namespace) -> int:
    from kit.paths import ROOT
    from kit.sciml.report import publish_report

    # into --out, or the run folder's report/, by kit.owned's rule either way
    print(publish_report(args.evidence or ROOT / "runs" / "sciml", args.out))
    return 0


def _reports(args: argparse.Namespace) -> int:
    from kit.claims.reports import write_reports
    from kit.paths import ROOT

    print(write_reports(args.out or ROOT / "runs" / "reports"))
    return 0


def _archive(args: argparse.Namespace) -> int:
    from kit.claims.archive import write_archive
    from kit.files import read_json
    from kit.paths import ROOT

    deposit = write_archive(ROOT, args.out or ROOT / "runs" / "archive")
    found = read_json(deposit)
    print(f"archive: {deposit.parent / found['archive']}: sha256 {found['sha256']}, "
          f"{found['bytes']} bytes; root {found['root']} (commit {found['commit']}); "
          f"the record: {deposit}")
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from kit.drift.protocol import PROTOCOL
    from kit.drift.sweep import run_sweep
    from kit.paths import ROOT
    from kit.runtime.scale import check_options

    check_options(args.scheduler, args.workers)

    folder = args.run or ROOT / "runs" / "sweep-digits"
    run_sweep(folder, drift_protocol=args.protocol or PROTOCOL, releases=args.releases,
              levels=args.levels, threads=args.threads, backend=args.backend,
              scheduler=args.scheduler, workers=args.workers, drift_run=args.drift_run,
              models=args.models)
    print(folder)
    return 0


def _corpus(args: argparse.Namespace) -> int:
    from kit.corpus.pipeline import run_corpus
    from kit.paths import ROOT
    from kit.runtime.scale import check_options

    check_options(args.scheduler, args.workers)
    folder = args.run or ROOT / "runs" / "corpus"
    run_corpus(folder, releases=args.releases, cases=args.cases, backend=args.backend,
               scheduler=args.scheduler, workers=args.workers)
    print(folder)
    return 0


def _corpus_detectors(args: argparse.Namespace) -> int:
    from kit.corpus.detectors import PROTOCOL as STUDY
    from kit.corpus.detectors import run_detectors
    from kit.drift.protocol import PROTOCOL
    from kit.paths import ROOT
    from kit.runtime.scale import check_options

    check_options(args.scheduler, args.workers)
    folder = args.run or ROOT / "runs" / "corpus-detectors"
    run_detectors(folder, protocol_file=args.study_protocol or STUDY,
                  drift_protocol=args.protocol or PROTOCOL, cases=args.cases,
                  backend=args.backend, scheduler=args.scheduler, workers=args.workers,
                  models=args.models)
    print(folder)
    return 0


def _polygraphy(args: argparse.Namespace) -> int:
    from kit.drift.polygraphy_check import write_fault_matrix
    from kit.paths import ROOT

    folder = args.run or ROOT / "runs" / "digits"
    print(write_fault_matrix(folder, args.out or folder.parent / f"polygraphy-{folder.name}.json"))
    return 0


def _bench(args: argparse.Namespace) -> int:
    if args.answer:  # in the reviewer's environment when it is built
        from kit.claims.answer import bench as bench_answer
        from kit.runtime.venvs import VERIFY_VENV

        python = VERIFY_VENV / "bin" / "python"
        return bench_answer(args.answer, str(python) if python.is_file() else sys.executable)
    if args.vs_polygraphy is not None:
        from kit.audit.versus import bench_versus

        return bench_versus(args.vs_polygraphy or ["resnet18"])
    if args.audit:
        from kit.audit.bench import bench_audit

        bench_audit(args.audit)
        return 0
    from kit.drift.bench import bench

    return bench(args.run, args.sweep)


def _reproduce_all(args: argparse.Namespace) -> int:
    from kit.reproduce.command import run_command

    return run_command(args)


def _audit(args: argparse.Namespace) -> int:
    from kit.audit.command import run_command

    return run_command(args)


def _ship(args: argparse.Namespace) -> int:
    from kit.claims.ship import ship
    from kit.paths import ROOT
    from kit.runfolder import default_run
    from kit.runlock import hold

    if args.into is not None:  # a folder of the kit's, or new or empty: never a user's
        from kit.owned import claim

        claim(args.into, "ship --into")
    if args.recover:
        from kit.claims.coverage import write_manifests
        from kit.claims.journal import recover

        if args.run is not None or args.replay_record is not None:
            raise KitError("ship: --recover takes no --run or --replay-record")
        print(f"ship: {recover(args.into or ROOT, write_manifests) or 'nothing to recover'}")
        return 0
    if args.replay_record is not None:
        from kit.claims.replays import ship_record

        if args.run is not None:
            raise KitError("ship: give --run or --replay-record, not both")
        for path in ship_record(args.replay_record, args.into or ROOT):
            print(path)
        return 0
    folder = args.run or default_run("digits").root
    with hold(folder, create=False):
        print(ship(folder, root=args.into))
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": _run, "images": _images, "stage": _stage, "reproduce": _stage, "verify": _verify,
    "sciml": _sciml, "sciml-report": _sciml_report, "sweep": _sweep,
    "polygraphy": _polygraphy, "bench": _bench, "ship": _ship, "corpus": _corpus,
    "corpus-detectors": _corpus_detectors, "reports": _reports, "archive": _archive,
    "reproduce-all": _reproduce_all, "audit": _audit}


def main(argv: list[str] | None = None) -> int:
    die_with_parent()  # a study reproduce-all started ends with it (kit.procs)
    args = build_parser(__doc__).parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except KitError as exc:
        print(f"kit: error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:  # run outside the environment that has it
        print(f"kit: error: {missing_module(exc, f'python -m kit {args.command}')}",
              file=sys.stderr)
        return 2
    except OSError as exc:  # a path the user gave: too long, unwritable, a folder, ...
        print(f"kit: error: {path_problem(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (kit.procs.Stopped): unwound
        status = getattr(exc, "status", 130)
        print(f"kit: {args.command} {'terminated' if status != 130 else 'interrupted'}",
              file=sys.stderr)
        return status


if __name__ == "__main__":
    from kit.procs import stop_on_sigterm

    stop_on_sigterm()
    sys.exit(main())
