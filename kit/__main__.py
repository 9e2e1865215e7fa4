"""Command line: ``python -m kit COMMAND``.

    run        one exchange: a model and an input .npz under one runtime -> an output .npz
    images     build the two runtime images and write manifests/images.json
    stage      one drift stage (fetch split fault infer score bootstrap sensitivity report)
    reproduce  the drift stages in order, then the run manifest check
    verify     every ledger, schema, manifest and claim, offline (--replay: rerun and compare)
    ship       copy a finished run's evidence into claims/ and rewrite the manifests
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kit.errors import KitError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m kit", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run one model on one input .npz under one runtime")
    run.add_argument("--runtime", required=True, choices=["ref", "cand"])
    run.add_argument("--model", required=True, type=Path)
    run.add_argument("--inputs", required=True, type=Path)
    run.add_argument("--output", required=True, type=Path)
    run.add_argument("--backend", choices=["docker", "venv"],
                     help="default: docker when a daemon answers, else venv")
    run.add_argument("--batch-size", type=int, default=64)
    images = sub.add_parser("images", help="build the runtime images (needs a Docker daemon)")
    images.add_argument("--base", help="base image (default: python:3.11-slim-bookworm, "
                                       "else a debootstrap base)")
    images.add_argument("--runtime", action="append", choices=["ref", "cand"],
                        help="build only this runtime (repeatable)")
    for command, help_text in (("stage", "run one drift stage"),
                               ("reproduce", "run the drift stages in order")):
        stage = sub.add_parser(command, help=help_text)
        if command == "stage":
            stage.add_argument("name", choices=["fetch", "split", "fault", "infer", "score",
                                                "bootstrap", "sensitivity", "report"])
        stage.add_argument("--substrate", choices=["digits", "cifar100"],
                           help="default: the protocol's (digits)")
        stage.add_argument("--run", type=Path, help="run folder (default runs/<substrate>)")
        stage.add_argument("--assets", type=Path, help="mirror folder of the pinned assets")
        stage.add_argument("--backend", choices=["docker", "venv"])
        stage.add_argument("--protocol", type=Path, help="protocol YAML (default: the frozen one)")
    verify = sub.add_parser("verify", help="check every claim offline from shipped evidence")
    verify.add_argument("--json", type=Path, help="also write the outcome as JSON here")
    verify.add_argument("--replay", action="store_true",
                        help="rerun the pipeline (or --stages) into a fresh folder, compare bytes")
    verify.add_argument("--strict-findings", action="store_true",
                        help="also fail on a paper's direction reversed on a stand-in substrate")
    verify.add_argument("--stages", nargs="+", help="stages to replay (default: all)")
    verify.add_argument("--compare", nargs=2, type=Path, metavar=("FIRST", "REPLAY"),
                        help="only compare two finished run folders (writes FIRST/replay.json)")
    verify.add_argument("--run", type=Path, help="first run folder (default runs/<substrate>)")
    verify.add_argument("--substrate", choices=["digits", "cifar100"])
    verify.add_argument("--backend", choices=["docker", "venv"])
    verify.add_argument("--protocol", type=Path,
                        help="protocol of the run to replay (default: the frozen one)")
    verify.add_argument("--small", action="store_true",
                        help="replay the small configuration (kit.protocol.write_small_protocol) "
                             "in runs/digits-small, running it first if it is not there")
    ship = sub.add_parser("ship", help="copy a finished run's evidence into claims/")
    ship.add_argument("--run", type=Path, help="run folder (default runs/digits)")
    return parser


def _replay(args: argparse.Namespace) -> int:
    from kit.protocol import PROTOCOL, load_protocol, write_small_protocol
    from kit.replay import prepare
    from kit.stages.common import MANIFEST, default_run
    from kit.stages.pipeline import STAGES, reproduce

    protocol = args.protocol or PROTOCOL
    substrate = args.substrate or load_protocol(protocol)["substrate_default"]
    first = args.run or default_run(substrate).root
    if args.small:
        first = args.run or first.with_name(first.name + "-small")
        protocol = write_small_protocol(first.with_name(first.name + "-protocol.yaml"))
    stages = tuple(args.stages or STAGES)
    unknown = sorted(set(stages) - set(STAGES))
    if unknown:
        raise KitError(f"unknown stages {unknown}; stages: {STAGES}")
    options = {"substrate": substrate, "backend": args.backend, "protocol_file": protocol}
    if args.small and not (first / MANIFEST).is_file():
        print(f"replay: no first run in {first}; running the small configuration there first")
        reproduce(run_dir=first, **options)
    target = first.with_name(first.name + "-replay")
    prepare(first, target, stages, STAGES)
    ordered = tuple(s for s in STAGES if s in stages)
    reproduce(ordered, run_dir=target, **options)
    return _report_replay(first, target)


def _report_replay(first: Path, target: Path) -> int:
    from kit.replay import compare_runs, write_report

    report = compare_runs(first, target)
    path = write_report(first, report)
    print(json.dumps({k: v for k, v in report.items() if k != "differing"}, indent=1))
    print(f"replay: {report['compared']} hashed files compared, "
          f"{'identical' if report['identical'] else 'DIFFERENT'}; report {path}")
    return 0 if report["identical"] else 1


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "run":
            from kit.exchange import exchange

            out = exchange(args.runtime, args.model, args.inputs, args.output,
                           args.backend, args.batch_size)
            print(out)
        elif args.command == "images":
            from kit.images import build_images

            build_images(args.base, args.runtime)
        elif args.command in ("stage", "reproduce"):
            from kit.protocol import PROTOCOL
            from kit.stages.pipeline import reproduce, run_stage

            options = {"substrate": args.substrate, "run_dir": args.run, "assets": args.assets,
                       "backend": args.backend, "protocol_file": args.protocol or PROTOCOL}
            if args.command == "stage":
                run_stage(args.name, **options)
            else:
                print(reproduce(**options))
        elif args.command == "verify":
            if args.compare:
                return _report_replay(*args.compare)
            if args.replay:
                return _replay(args)
            from kit.verify import verify

            return verify(json_out=args.json, strict_findings=args.strict_findings)
        elif args.command == "ship":
            from kit.stages.common import default_run
            from kit.verify import ship

            print(ship(args.run or default_run("digits").root))
    except KitError as exc:
        print(f"kit: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
