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
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kit.errors import KitError, missing_module, path_problem

Add = Callable[..., argparse.ArgumentParser]


def _add_runtime_commands(add: Add) -> None:
    run = add("run", help="run one model on one input .npz under one runtime")
    run.add_argument("--runtime", required=True, choices=["ref", "cand"])
    run.add_argument("--model", required=True, type=Path)
    run.add_argument("--inputs", required=True, type=Path)
    run.add_argument("--output", required=True, type=Path)
    run.add_argument("--backend", choices=["docker", "venv"],
                     help="default: docker when a daemon answers, else venv")
    run.add_argument("--batch-size", type=int, default=64)
    images = add("images", help="build runtime images (needs a Docker daemon)")
    images.add_argument("--base", help="base image (default: python:3.11-slim-bookworm, "
                                       "else a debootstrap base)")
    images.add_argument("--runtime", action="append",
                        help="build this runtime's image: ref, cand or ort-RELEASE "
                             "(repeatable; default ref and cand)")


def _add_drift_commands(add: Add) -> None:
    for command, help_text in (("stage", "run one drift stage"),
                               ("reproduce", "run the drift stages in order")):
        stage = add(command, help=help_text)
        if command == "stage":
            stage.add_argument("name", choices=["fetch", "split", "fault", "infer", "score",
                                                "bootstrap", "sensitivity", "report"])
        stage.add_argument("--substrate", choices=["digits", "cifar100"],
                           help="default: the protocol's (digits)")
        stage.add_argument("--run", type=Path, help="run folder (default runs/<substrate>)")
        stage.add_argument("--assets", type=Path, help="mirror folder of the pinned assets")
        stage.add_argument("--asset-pins", type=Path, metavar="FILE",
                           help="JSON pins replacing kit/drift/assets.py's for this run (cifar100; "
                                "full sha256 for every file; recorded in fetch.json)")
        stage.add_argument("--backend", choices=["docker", "venv"])
        stage.add_argument("--protocol", type=Path, help="protocol YAML (default: the frozen one)")
        _add_scale_options(stage)
    sweep = add("sweep", help="the real-drift sweep: every release x level x threads "
                              "(kit/protocols/realdrift.yaml)")
    sweep.add_argument("--run", type=Path, help="run folder (default runs/sweep-digits)")
    sweep.add_argument("--releases", nargs="+", metavar="RELEASE",
                       help="sweep only these releases (they must include 1.20.1 and 1.29.0)")
    sweep.add_argument("--levels", nargs="+", metavar="LEVEL",
                       help="sweep only these levels (default: every level each release offers)")
    sweep.add_argument("--threads", nargs="+", type=int, metavar="N",
                       help="intra-op thread counts (default: the protocol's 1 2)")
    sweep.add_argument("--protocol", type=Path,
                       help="drift protocol for fetch and split (default: the frozen one)")
    sweep.add_argument("--backend", choices=["docker", "venv"])
    sweep.add_argument("--drift-run", type=Path, metavar="RUN",
                       help="a finished drift run: also put Polygraphy to its fault matrix")
    _add_scale_options(sweep)
    poly = add("polygraphy", help="Polygraphy's default comparison on a finished drift run's "
                                  "fault matrix, beside the calibrated detectors")
    poly.add_argument("--run", type=Path, help="finished drift run (default runs/digits)")
    poly.add_argument("--out", type=Path,
                      help="JSON table to write (default runs/polygraphy-<run name>.json)")
    bench = add("bench", help="benchmark infer and the nested bootstrap")
    bench.add_argument("--run", type=Path, help="finished drift run (default runs/digits)")
    bench.add_argument("--sweep", type=Path, help="finished sweep folder: its time against "
                                                  "the 30-minute target too")


def _add_scale_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=int, metavar="N",
                        help="Dask LocalCluster worker processes (default: one per core; "
                             "1: serial, in this process)")
    parser.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                        help="an existing Dask cluster whose workers have the kit and see "
                             "the run folder at the same path")


def _add_claims_commands(add: Add) -> None:
    verify = add("verify", help="check every claim offline from shipped evidence")
    verify.add_argument("--json", type=Path, help="also write the outcome as JSON here")
    verify.add_argument("--replay", action="store_true",
                        help="rerun the pipeline (or --stages) into a fresh folder, compare bytes")
    verify.add_argument("--strict-findings", action="store_true",
                        help="also fail on a paper's direction reversed on a stand-in substrate")
    verify.add_argument("--expect-root", metavar="HEX",
                        help="fail unless the root digest over everything checked equals HEX "
                             "(the README publishes the shipped evidence's root)")
    verify.add_argument("--page", type=Path,
                        help="where to write the claims page (default runs/verify/index.html)")
    verify.add_argument("--claim", nargs="+", default=[], metavar="ID",
                        help="print only these claims, in full (every check still runs)")
    verify.add_argument("--study", nargs="+", default=[], metavar="NAME",
                        help="print only these studies' claims (drift, sciml, realdrift, "
                             "corpus)")
    verify.add_argument("--status", nargs="+", default=[], metavar="STATUS",
                        help="print only claims with these statuses (quote two words: "
                             "'by design')")
    verify.add_argument("--evidence", type=Path, metavar="DIR",
                        help="recompute every claim from a fresh run shipped into DIR (ship "
                             "--into DIR): file verdicts and the status diff")
    verify.add_argument("--status-only", action="store_true",
                        help="with --evidence: files may differ (a retrain on another CPU); "
                             "the verdict is the status diff alone")
    verify.add_argument("--stages", nargs="+", help="stages to replay (default: all)")
    verify.add_argument("--compare", nargs=2, type=Path, metavar=("FIRST", "REPLAY"),
                        help="only compare two finished run folders (writes FIRST/replay.json)")
    verify.add_argument("--run", type=Path, help="first run folder (default runs/<substrate>)")
    verify.add_argument("--substrate", choices=["digits", "cifar100"])
    verify.add_argument("--backend", choices=["docker", "venv"])
    verify.add_argument("--protocol", type=Path,
                        help="protocol of the run to replay (default: the frozen one)")
    verify.add_argument("--small", action="store_true",
                        help="replay the small configuration "
                             "(kit.drift.protocol.write_small_protocol) "
                             "in runs/digits-small, running it first if it is not there")
    ship = add("ship", help="copy a finished run's evidence into claims/")
    ship.add_argument("--run", type=Path, help="run folder (default runs/digits)")
    ship.add_argument("--into", type=Path, metavar="DIR",
                      help="ship into DIR/claims/... instead of the checkout (for verify "
                           "--evidence DIR)")
    reports = add("reports", help="render every study's report from the shipped evidence "
                                  "under claims/")
    reports.add_argument("--out", type=Path, help="report folder (default runs/reports)")


def _add_sciml_commands(add: Add) -> None:
    sciml = add("sciml", help="run the SciML study")
    sciml.add_argument("--run", type=Path,
                       help="run folder (default runs/sciml, runs/sciml-resimulated or "
                            "runs/sciml-deepmind)")
    sciml.add_argument("--without-physicsnemo", action="store_true",
                       help="leave out the PhysicsNeMo MeshGraphNet (its environment is "
                            "about 6.4 GB); its claims are then not run here")
    source = sciml.add_mutually_exclusive_group()
    source.add_argument("--resimulate", action="store_true",
                        help="simulate the cylinder trajectories again instead of reading the "
                             "pinned ones (claims/sciml/trajectories), recording how they "
                             "compare")
    source.add_argument("--deepmind", type=Path, metavar="FOLDER",
                        help="read the trajectories from DeepMind's cylinder_flow files "
                             "(meta.json, train.tfrecord, valid.tfrecord)")
    report = add("sciml-report", help="render the SciML report of a finished run")
    report.add_argument("--evidence", type=Path,
                        help="the run's records (default runs/sciml; the shipped ones are "
                             "claims/sciml/evidence/kit, which needs --out)")
    report.add_argument("--out", type=Path, help="report folder (default <evidence>/report)")


def _add_corpus_commands(add: Add) -> None:
    corpus = add("corpus", help="the real-defect corpus: named onnxruntime CPU defects under "
                                "every release (kit/protocols/corpus.yaml)")
    corpus.add_argument("--run", type=Path, help="run folder (default runs/corpus)")
    corpus.add_argument("--releases", nargs="+", metavar="RELEASE",
                        help="run only these releases (default: the protocol's 18)")
    corpus.add_argument("--cases", nargs="+", metavar="CASE",
                        help="run only these cases (default: every case of kit/corpus/cases)")
    corpus.add_argument("--backend", choices=["docker", "venv"])
    _add_scale_options(corpus)
    study = add("corpus-detectors", help="the corpus's detector study: its CNN-op cases in the "
                                         "digits models (kit/protocols/corpus-detectors.yaml)")
    study.add_argument("--run", type=Path, help="run folder (default runs/corpus-detectors)")
    study.add_argument("--cases", nargs="+", metavar="CASE",
                       help="run only these cases (default: every case of the protocol)")
    study.add_argument("--protocol", type=Path,
                       help="drift protocol YAML for fetch and split (default: the frozen one)")
    study.add_argument("--backend", choices=["docker", "venv"])
    _add_scale_options(study)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kit", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="The kit's commands (each one also a nox session):\n"
                    + __doc__.split("\n", 2)[2].replace("``", ""), allow_abbrev=False)
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, **options: Any) -> argparse.ArgumentParser:
        # allow_abbrev=False: a mistyped option must fail, not match a longer one
        return sub.add_parser(name, allow_abbrev=False, **options)

    for adder in (_add_runtime_commands, _add_drift_commands, _add_claims_commands,
                  _add_sciml_commands, _add_corpus_commands):
        adder(add)
    return parser


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
               "workers": args.workers}
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

        return verify_fresh(args.evidence, args.status_only)
    if args.replay:
        from kit.drift.replay import replay

        return replay(args.run, args.substrate, args.stages, args.small, args.protocol,
                      args.backend)
    replay_only = [f"--{name.replace('_', '-')}" for name in REPLAY_OPTIONS
                   if getattr(args, name) not in (None, False)]
    if replay_only:
        raise KitError(f"verify: {', '.join(replay_only)} only apply with --replay (or, for "
                       "--run, --compare; for --status-only, --evidence); add it or leave "
                       "them out")
    from kit.claims.verify import Selection, verify
    from kit.paths import ROOT

    select = Selection(tuple(args.claim), tuple(args.study), tuple(args.status))
    return verify(json_out=args.json, strict_findings=args.strict_findings,
                  expect_root=args.expect_root,
                  page=args.page or ROOT / "runs" / "verify" / "index.html", select=select)


# The verify options that only a replay reads: refused without --replay.
REPLAY_OPTIONS = ("stages", "run", "substrate", "backend", "protocol", "small",
                  "status_only")


def _sciml(args: argparse.Namespace) -> int:
    from kit.sciml.run import run_command

    print(run_command(args.run, args.without_physicsnemo, args.resimulate, args.deepmind))
    return 0


def _sciml_report(args: argparse.Namespace) -> int:
    from kit.paths import ROOT
    from kit.sciml.report import write_report

    print(write_report(args.evidence or ROOT / "runs" / "sciml", args.out))
    return 0


def _reports(args: argparse.Namespace) -> int:
    from kit.claims.reports import write_reports
    from kit.paths import ROOT

    print(write_reports(args.out or ROOT / "runs" / "reports"))
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
              scheduler=args.scheduler, workers=args.workers, drift_run=args.drift_run)
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
    from kit.corpus.detectors import run_detectors
    from kit.drift.protocol import PROTOCOL
    from kit.paths import ROOT
    from kit.runtime.scale import check_options

    check_options(args.scheduler, args.workers)
    folder = args.run or ROOT / "runs" / "corpus-detectors"
    run_detectors(folder, drift_protocol=args.protocol or PROTOCOL, cases=args.cases,
                  backend=args.backend, scheduler=args.scheduler, workers=args.workers)
    print(folder)
    return 0


def _polygraphy(args: argparse.Namespace) -> int:
    from kit.drift.polygraphy_check import write_fault_matrix
    from kit.paths import ROOT

    folder = args.run or ROOT / "runs" / "digits"
    print(write_fault_matrix(folder, args.out or folder.parent / f"polygraphy-{folder.name}.json"))
    return 0


def _bench(args: argparse.Namespace) -> int:
    from kit.drift.bench import bench

    return bench(args.run, args.sweep)


def _ship(args: argparse.Namespace) -> int:
    from kit.claims.ship import ship
    from kit.runfolder import default_run
    from kit.runlock import hold

    folder = args.run or default_run("digits").root
    with hold(folder, create=False):
        print(ship(folder, root=args.into))
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": _run, "images": _images, "stage": _stage, "reproduce": _stage, "verify": _verify,
    "sciml": _sciml, "sciml-report": _sciml_report, "sweep": _sweep,
    "polygraphy": _polygraphy, "bench": _bench, "ship": _ship, "corpus": _corpus,
    "corpus-detectors": _corpus_detectors, "reports": _reports}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
