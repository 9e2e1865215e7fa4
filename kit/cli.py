"""The command line's arguments: one argparse parser per ``python -m kit`` command (the
commands themselves are ``kit.__main__``'s). ``allow_abbrev=False`` everywhere: a mistyped
option must fail, not match a longer one."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

Add = Callable[..., argparse.ArgumentParser]


def _add_runtime_commands(add: Add) -> None:
    run = add("run", help="run one model on one input .npz under one runtime")
    run.add_argument("--runtime", required=True, choices=["ref", "cand"])
    run.add_argument("--model", required=True, type=Path)
    run.add_argument("--inputs", required=True, type=Path)
    run.add_argument("--output", required=True, type=Path)
    run.add_argument("--backend", choices=["docker", "venv"],
                     help="default: docker when a daemon answers, else venv")
    run.add_argument("--batch-size", type=int, default=64, metavar="N",
                     help="rows per onnxruntime call, 1 to 1048576 (2**20, "
                          "kit.runtime.exchange.MAX_BATCH_SIZE; default 64)")
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
        stage.add_argument("--models", choices=["train", "shipped"], default="train",
                           help="digits: train the models (default) or start from the shipped "
                                "ones (claims/drift/evidence/digits/fetch/models, sha256-checked; "
                                "fault then injects the shipped severities)")
        add_scale_options(stage)
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
    sweep.add_argument("--models", choices=["train", "shipped"], default="train",
                       help="train the digits models (default) or start from the shipped ones "
                            "and their training weights (claims/drift/weights/digits)")
    add_scale_options(sweep)
    poly = add("polygraphy", help="Polygraphy's default comparison on a finished drift run's "
                                  "fault matrix, beside the calibrated detectors")
    poly.add_argument("--run", type=Path, help="finished drift run (default runs/digits)")
    poly.add_argument("--out", type=Path,
                      help="JSON table to write (default runs/polygraphy-<run name>.json)")
    bench = add("bench", help="benchmark infer and the nested bootstrap")
    bench.add_argument("--run", type=Path, help="finished drift run (default runs/digits)")
    bench.add_argument("--sweep", type=Path, help="finished sweep folder: its time against "
                                                  "the 30-minute target too")
    bench.add_argument("--audit", type=Path, metavar="DIR",
                       help="only a finished audit's report folder: its time against its "
                            "floor (the two runtimes' own inference on the same inputs)")
    bench.add_argument("--vs-polygraphy", nargs="*", metavar="MODEL",
                       help="only the audit against Polygraphy by hand, side by side: "
                            "torch exports of MODEL (resnet18, the default; "
                            "mobilenet_v3_small, squeezenet1_1, efficientnet_b0, encoder), "
                            "1.20.1 to 1.29.0, median of 3 each, against 3x")
    bench.add_argument("--answer", nargs="?", const="A-052", metavar="ID",
                       help="only how fast verify answers one claim (default A-052): "
                            "verify --claim ID in fresh starts, against 2 s")


def add_scale_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=int, metavar="N",
                        help="Dask LocalCluster worker processes (default: one per core; "
                             "1: serial, in this process)")
    parser.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                        help="an existing Dask cluster whose workers have the kit and see "
                             "the run folder at the same path")


def _ship_arguments(ship: argparse.ArgumentParser) -> None:
    ship.add_argument("--run", type=Path, help="run folder (default runs/digits)")
    ship.add_argument("--into", type=Path, metavar="DIR",
                      help="ship into DIR/claims/... instead of the checkout (for verify "
                           "--evidence DIR); DIR is new, empty or one the kit made")
    ship.add_argument("--replay-record", type=Path, metavar="FILE",
                      help="instead of a run, add a replay record (the replay-record.json "
                           "reproduce-all writes) to the evidence: claims/replays/<machine>/")
    ship.add_argument("--recover", action="store_true",
                      help="only finish or roll back a ship a killed process left (every "
                           "ship does this first), and remove its temporaries")


def _add_claims_commands(add: Add) -> None:
    verify = add("verify", help="check every claim offline from shipped evidence")
    verify.add_argument("--json", type=Path, help="also write the outcome as JSON here")
    verify.add_argument("--replay", action="store_true",
                        help="rerun the pipeline (or --stages) into a fresh folder, compare bytes")
    verify.add_argument("--strict-findings", action="store_true",
                        help="also fail on a paper's direction reversed on a stand-in substrate")
    verify.add_argument("--deep", action="store_true",
                        help="also recount the localisation fields of the drift study's stored "
                             "bootstrap summaries (the layer sketches' bootstrap, about 20-30 s)")
    verify.add_argument("--expect-root", metavar="HEX",
                        help="fail unless the root digest over everything checked equals HEX "
                             "(the README publishes the shipped evidence's root)")
    verify.add_argument("--page", type=Path,
                        help="where to write the claims page (default runs/verify/index.html; "
                             "with --evidence the replay page, default runs/replay/index.html)")
    verify.add_argument("--claim", nargs="+", action="extend", default=[], metavar="ID",
                        help="recompute and print only these claims, in full (every "
                             "integrity check still runs; the claims page is left as it is)")
    verify.add_argument("--study", nargs="+", action="extend", default=[], metavar="NAME",
                        help="print only these studies' claims (drift, sciml, realdrift, "
                             "corpus)")
    verify.add_argument("--status", nargs="+", action="extend", default=[], metavar="STATUS",
                        help="print only claims with these statuses (quote two words: "
                             "'by design')")
    verify.add_argument("--evidence", type=Path, metavar="DIR",
                        help="recompute every claim from a fresh run shipped into DIR (ship "
                             "--into DIR): file verdicts and the status diff")
    verify.add_argument("--status-only", action="store_true",
                        help="with --evidence: files may differ (a retrain on another CPU); "
                             "the verdict is the status diff alone")
    verify.add_argument("--retrained", nargs="+", metavar="STUDY/SUBSTRATE",
                        help="with --evidence: these studies (sciml/kit, drift/digits, ...) "
                             "were retrained on another CPU: their files are judged against "
                             "the seed spread and their verdict is the status diff alone")
    verify.add_argument("--stages", nargs="+", help="stages to replay (default: all)")
    verify.add_argument("--compare", nargs=2, type=Path, metavar=("FIRST", "REPLAY"),
                        help="only compare two finished run folders (writes FIRST/replay.json)")
    verify.add_argument("--run", type=Path, help="first run folder (default runs/<substrate>)")
    verify.add_argument("--substrate", choices=["digits", "cifar100"])
    verify.add_argument("--backend", choices=["docker", "venv"])
    verify.add_argument("--protocol", type=Path,
                        help="protocol of the run to replay (default: the frozen one)")
    verify.add_argument("--models", choices=["train", "shipped"],
                        help="with --replay: where fetch takes the digits models (default "
                             "train; the first run's source); with --evidence: where the "
                             "fresh run's models came from, for the replay record")
    verify.add_argument("--small", action="store_true",
                        help="replay the small configuration "
                             "(kit.drift.protocol.write_small_protocol) "
                             "in runs/digits-small, running it first if it is not there")
    _ship_arguments(add("ship", help="copy a finished run's evidence into claims/"))
    reports = add("reports", help="render every study's report from the shipped evidence "
                                  "under claims/")
    reports.add_argument("--out", type=Path, help="report folder (default runs/reports)")
    archive = add("archive", help="the deposit for a permanent archive: git archive of the "
                  "committed tree, its root digest and sha256 (kit/claims/archive.py)")
    archive.add_argument("--out", type=Path, help="deposit folder (default runs/archive)")


def _add_sciml_commands(add: Add) -> None:
    sciml = add("sciml", help="run the SciML study")
    sciml.add_argument("--run", type=Path,
                       help="run folder (default runs/sciml, runs/sciml-resimulated or "
                            "runs/sciml-deepmind)")
    sciml.add_argument("--small", action="store_true",
                       help="the small configuration (kit.sciml.config.Config.tiny, minutes; "
                            "the kit's own MeshGraphNet, no PhysicsNeMo): none of its numbers "
                            "is a result")
    sciml.add_argument("--models", choices=["train", "shipped", "null"], default="train",
                       help="train every subject (or load it from the cache; default), "
                            "take every subject's checkpoint from the shipped evidence "
                            "(claims/sciml/evidence/kit/weights, sha256-checked), or run the "
                            "null subjects: every subject untrained, into runs/sciml-null")
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
    add_scale_options(corpus)
    study = add("corpus-detectors", help="the corpus's detector study: its CNN-op cases in the "
                                         "digits models (kit/protocols/corpus-detectors.yaml)")
    study.add_argument("--run", type=Path, help="run folder (default runs/corpus-detectors)")
    study.add_argument("--cases", nargs="+", metavar="CASE",
                       help="run only these cases (default: every case of the protocol)")
    study.add_argument("--protocol", type=Path,
                       help="drift protocol YAML for fetch and split (default: the frozen one)")
    study.add_argument("--study-protocol", type=Path, metavar="FILE",
                       help="the study's protocol (default: the frozen "
                            "kit/protocols/corpus-detectors.yaml)")
    study.add_argument("--models", choices=["train", "shipped"], default="train",
                       help="train the digits models (default) or start from the shipped "
                            "ones (claims/drift/evidence/digits/fetch/models)")
    study.add_argument("--backend", choices=["docker", "venv"])
    add_scale_options(study)


def parser(doc: str) -> argparse.ArgumentParser:
    """The whole command line; ``doc``: the commands' list (``kit.__main__``'s docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m kit", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="The kit's commands (each one also a nox session):\n"
                    + doc.split("\n", 2)[2].replace("``", ""), allow_abbrev=False)
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, **options: Any) -> argparse.ArgumentParser:
        # allow_abbrev=False: a mistyped option must fail, not match a longer one
        return sub.add_parser(name, allow_abbrev=False, **options)

    for adder in (_add_runtime_commands, _add_drift_commands, _add_claims_commands,
                  _add_sciml_commands, _add_corpus_commands, _add_reproduce_all, _add_audit):
        adder(add)
    return parser



def _add_reproduce_all(add: Add) -> None:
    _reproduce_all_arguments(add("reproduce-all", help="every study into runs/, shipped into "
                                                       "a fresh folder, the claims recomputed "
                                                       "from it"))


def _add_audit(add: Add) -> None:
    _audit_arguments(add("audit", help="does an onnxruntime upgrade change a model's outputs "
                                    "beyond clean drift, where first, and does a known "
                                    "defect touch it"))


def _reproduce_all_arguments(parser: argparse.ArgumentParser) -> None:
    from kit.reproduce.steps import STUDIES

    parser.add_argument("--only", nargs="+", metavar="STUDY",
                        help=f"only these studies ({', '.join(STUDIES)}; default all)")
    parser.add_argument("--small", action="store_true",
                        help="every study's small configuration (minutes), into runs/small; "
                             "nothing is compared with the shipped evidence")
    parser.add_argument("--models", choices=["auto", "shipped", "train"], default="auto",
                        help="every study's trained models (the digits models of the drift "
                             "study, the detector study and the sweep; the SciML subjects): "
                             "start from the shipped ones, retrain, or (auto, the default) "
                             "retrain only on the CPU that made the evidence")
    parser.add_argument("--without-physicsnemo", action="store_true",
                        help="leave out the PhysicsNeMo MeshGraphNet (its claims then change "
                             "status, and the verdict says so)")
    parser.add_argument("--runs", type=Path, metavar="DIR",
                        help="runs root (default runs/, or runs/small with --small)")
    parser.add_argument("--plan", action="store_true", help="print the plan and stop")
    parser.add_argument("--backend", choices=["docker", "venv"])
    add_scale_options(parser)


def _audit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", type=Path, help="the ONNX model to audit")
    parser.add_argument("--inputs", type=Path,
                        help=".npz with one array per model input, inputs along the first axis "
                             "(not needed with --screen-only)")
    parser.add_argument("--sets", action="store_true",
                        help="each array of --inputs carries one more leading axis, of input "
                             "sets, and the model takes one set at a time as it is: for a "
                             "model whose inputs share no first axis (a MatMul of (3, 4) and "
                             "(4, 5) audited on 16 sets: arrays (16, 3, 4) and (16, 4, 5))")
    parser.add_argument("--from", dest="source", required=True, metavar="RELEASE[/LEVEL]",
                        help="the release (and level; default enable_all) the model runs on")
    parser.add_argument("--to", dest="target", required=True, metavar="RELEASE[/LEVEL]",
                        help="the release (and level) it moves to")
    parser.add_argument("--out", type=Path, help="report folder (default runs/audit/<model>)")
    parser.add_argument("--screen-only", action="store_true",
                        help="the static screen alone: no runtime, seconds")
    parser.add_argument("--bisect", action="store_true",
                        help="when the move is beyond clean drift, find the first release "
                             "between FROM and TO that moves (about log2 of them in audits)")
    parser.add_argument("--envelope", action="store_true",
                        help="run the clean pairs even when the two sides agree bit for bit "
                             "(by default they run only when some output differs: a zero "
                             "difference is within every envelope)")
    parser.add_argument("--dial", action="store_true",
                        help="also how large a change the audit and Polygraphy's default each "
                             "see on this model: FROM's outputs moved by known sizes, judged "
                             "against the clean pairs (kit/audit/dial.py)")
    parser.add_argument("--backend", choices=["docker", "venv"])
    add_scale_options(parser)
