"""Command line: ``python -m kit COMMAND``.

    run        one exchange: a model and an input .npz under one runtime -> an output .npz
    images     build the two runtime images and write manifests/images.json
    stage      one drift stage (fetch split fault infer score bootstrap sensitivity report)
    reproduce  the drift stages in order, then the run manifest check
"""

from __future__ import annotations

import argparse
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
    return parser


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
    except KitError as exc:
        print(f"kit: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
