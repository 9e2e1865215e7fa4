"""Command line: ``python -m kit COMMAND``.

    run      one exchange: a model and an input .npz under one runtime -> an output .npz
    images   build the two runtime images and write manifests/images.json
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
    except KitError as exc:
        print(f"kit: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
