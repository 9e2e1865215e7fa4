"""``python -m kit verify``: check every ledger, schema, manifest and claim offline.

1. Schemas: every ledger (``claims/*.yaml``), the shipped evidence records
   (``score/score.json``), the protocol copies, the manifests and the SciML MR cards.
2. Manifests: ``manifests/evidence.json`` lists the sha256 of every file under ``claims/``
   (ledgers, shipped evidence, pinned trajectories; only ``claims/README.md`` is exempt):
   each must match, and a file present but not listed is refused. ``manifests/locks.json``
   pins the lock files and ``manifests/assets.json`` the upstream assets (equal to
   ``kit.drift.assets``); ``manifests/`` holds these three and its README, nothing else. A
   symbolic link anywhere under ``claims/`` or ``manifests/`` (a linked folder too) is
   refused (``kit/claims/coverage.py``, which also computes the root digest). The pinned
   trajectories are hashed against their own index as well.
3. Claims: recomputed from the raw per-case evidence and decided by their rules.
4. ``--replay``: rerun the pipeline (or named stages) and compare bytes.

Every file is read through ``kit.files`` (a file that is not UTF-8, not JSON or YAML, or
not an .npz is a problem naming it), and every check collects its problems instead of
stopping at the first: verify lists them all and still decides every claim whose ledger
and evidence can be read. Exit 0 only when every check passes and every claim that
applies to present evidence holds. A claim's ``finding`` (the paper's direction where it
did not reproduce on a stand-in substrate, ``kit.claims.ledger``) is printed and counted; with
``strict_findings`` a reversed finding fails the run as well. Shipping a run's evidence
is ``kit.claims.ship``; this module only checks.
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
import time
from pathlib import Path
from typing import Any

from kit.claims.coverage import (
    RESTORE,
    check_manifests,
    collect,
    hash_problems,
    read_record,
    relative,
)
from kit.claims.ledger import STATUSES, Outcome, clear_cache, evaluate, load_ledger
from kit.claims.records import check_schemas
from kit.claims.show import failure_reason, print_rows, print_summary
from kit.errors import KitError
from kit.files import canonical_json, hashed_once, plain_files, sha256
from kit.owned import json_with, write_named_file
from kit.paths import ROOT
from kit.runfolder import SHIPPED_MANIFEST, UNHASHED
from kit.schema import problems as schema_problems


def check_trajectories(root: Path) -> list[str]:
    """Problems with the pinned trajectories (each file hashed against the sha256 its
    index lists, ``kit.sciml.pinned.pinned_problems``) and with those the shipped
    MeshGraphNet evidence names (each read from ``claims/sciml/trajectories`` with the
    sha256 its index lists)."""
    from kit.sciml.pinned import INDEX, pinned_problems, read_index

    folder = root / "claims" / "sciml" / "trajectories"
    problems = pinned_problems(folder)
    record = root / "claims" / "sciml" / "evidence" / "kit" / "mgn.json"
    if not record.is_file():
        return problems
    try:
        listed: dict[str, Any] = read_index(folder)["trajectories"]
    except KitError:  # pinned_problems names the index
        listed = {}
    return problems + collect(_used_trajectories, record, folder / INDEX, listed)


def _used_trajectories(record: Path, index_path: Path, index: dict[str, Any]) -> list[str]:
    used = read_record(record).get("trajectories")
    if not isinstance(used, dict) or not used:
        return [f"{record}: names no trajectories; ship a run of the current kit"]
    problems = []
    for tag, entry in sorted(used.items()):
        name = entry.get("pinned") if isinstance(entry, dict) else None
        listed = index.get(name, {}).get("sha256") if isinstance(name, str) else None
        if name is None:
            problems.append(f"{record}: trajectory {tag} was not read from "
                            f"{index_path.parent} (simulated in that run); ship a run of the "
                            "pinned trajectories")
        elif listed != entry.get("sha256"):
            problems.append(f"{record}: trajectory {tag} ({name}) has sha256 "
                            f"{entry.get('sha256')}, {index_path} lists {listed}")
    return problems


def run_manifest_problems(root: Path) -> list[str]:
    """Every shipped run file must be the one its shipped ``run-manifest.json`` lists, and
    a shipped ``replay.json`` must name that manifest's sha256 (what the replay compared)."""
    problems = []
    for manifest in sorted((root / "claims").glob("*/evidence/*/run-manifest.json")):
        problems += collect(_shipped_run_problems, manifest)
    return problems


def _shipped_run_problems(manifest: Path) -> list[str]:
    folder = manifest.parent
    listed = read_record(manifest).get("files")
    if not isinstance(listed, dict):
        return [f"{manifest}: no 'files' mapping; {RESTORE}"]
    problems = []
    for path in plain_files(folder)[0]:  # a link is refused by coverage_problems
        name = relative(path, folder)
        if name in (SHIPPED_MANIFEST, *UNHASHED):
            continue
        if name not in listed:
            problems.append(f"{path}: shipped but not in {manifest}")
        else:
            problems += hash_problems(path, listed[name], manifest)
    replay = folder / "replay.json"
    if replay.is_file() and read_record(replay).get("first_manifest_sha256") != \
            sha256(manifest, RESTORE):
        problems.append(f"{replay}: compared another run manifest than {manifest}")
    return problems


def training_weights_problems(root: Path) -> list[str]:
    """The digits models' training weights ship (``claims/drift/weights/digits/<model>.pt``)
    with the sha256 every shipped digits fetch record names for that model (the real-drift
    sweep's export with BatchNormalization kept starts from them, ``sweep --models
    shipped``); a weights file no record names is refused too."""
    folder = root / "claims" / "drift" / "weights" / "digits"
    named: set[str] = set()
    problems = []
    for record in sorted((root / "claims").glob("*/evidence/digits/fetch/fetch.json")):
        problems += collect(_weights_of, record, folder, named)
    if folder.is_dir():
        problems += [f"{path}: training weights no shipped fetch record names; {RESTORE}"
                     for path in sorted(folder.iterdir()) if path.name not in named]
    return problems


def _weights_of(record: Path, folder: Path, named: set[str]) -> list[str]:
    from kit.runfolder import plain_name

    models = read_record(record).get("models")
    problems = []
    for name, entry in sorted(models.items() if isinstance(models, dict) else []):
        digest = entry.get("weights_sha256") if isinstance(entry, dict) else None
        path = folder / f"{plain_name(name, record, 'a models key', segments=1)}.pt"
        named.add(path.name)
        if not path.is_file() or path.is_symlink():
            problems.append(f"{path}: missing; {record} names model {name}'s training "
                            f"weights (sha256 {digest}): ship them ({RESTORE})")
        elif sha256(path) != digest:
            problems.append(f"{path}: sha256 {sha256(path)}, but {record} names {digest} "
                            f"for {name}'s training weights; {RESTORE}")
    return problems


def paper_pin_problems(root: Path, ledgers: list[dict[str, Any]]) -> list[str]:
    """Evidence shipped for the paper's substrate must come from the pinned upstream
    assets (``kit/drift/assets.py``): a run under another pins file (``--asset-pins``, e.g. the
    tests' synthetic stand-ins) cannot reproduce the paper, so it is refused there."""
    problems = []
    for ledger in ledgers:
        for name, substrate in ledger["substrates"].items():
            record = root / substrate["evidence"] / "fetch" / "fetch.json"
            if substrate["paper"] and record.is_file():
                problems += collect(_pin_problems, record, name)
    return problems


def _pin_problems(record: Path, substrate: str) -> list[str]:
    pins = read_record(record).get("asset_pins")
    if pins == {"source": "kit/drift/assets.py"}:
        return []
    return [f"{record}: the {substrate} evidence was fetched under other asset pins than "
            f"kit/drift/assets.py ({pins}); "
            "only the pinned upstream assets can reproduce the paper"]


def link_kit_answers(ledgers: list[dict[str, Any]], outcomes: list[Outcome],
                     problems: list[str]) -> list[Outcome]:
    """A claim left not run here that another ledger's claim answers on the kit's own
    material (``kit_answer``) shows that claim's recomputed value, is ``described`` (a count
    of other material) and names the answer and its status in its note; a pointer to a
    claim no ledger holds is a failed check."""
    found = {(o.study, o.claim): o for o in outcomes}
    answers = {(ledger["study"], claim["id"]): claim["kit_answer"] for ledger in ledgers
               for claim in ledger["claims"] if "kit_answer" in claim}
    linked = []
    for outcome in outcomes:
        answer = answers.get((outcome.study, outcome.claim))
        if answer is None or outcome.status != "not run here":
            linked.append(outcome)
            continue
        target = found.get((answer["study"], answer["claim"]))
        if target is None:
            problems.append(f"claims/{outcome.study}.yaml: {outcome.claim}'s kit_answer names "
                            f"{answer['study']} {answer['claim']}, which no ledger holds")
            linked.append(outcome)
            continue
        note = (f"{outcome.note}; answered on the kit's own material by {answer['study']} "
                f"{answer['claim']} = {target.recomputed} ({target.status}): {answer['scope']}")
        # the kit computed a count for this row, on other material: it describes that
        # material (never a reproduction of the paper's number), and it is shown
        linked.append(dataclasses.replace(
            outcome, note=note, status="described", recomputed=target.recomputed,
            rule=f"describe: {answer['study']} {answer['claim']} on the kit's own material"))
    return linked


@dataclasses.dataclass(frozen=True)
class Selection:
    """Which claim checks verify prints (``--claim``, ``--study``, ``--status``). With
    claims named, only those (and the claims that answer them) are recomputed, an answer
    in a second or two, and the counts and the exit status cover them and every integrity
    check; otherwise everything is recomputed and only the printing is selected."""

    claims: tuple[str, ...] = ()
    studies: tuple[str, ...] = ()
    statuses: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.claims or self.studies or self.statuses)

    def chosen(self, outcomes: list[Outcome]) -> list[Outcome]:
        """The selected checks; a claim, study or status that selects nothing is an error
        naming what there is."""
        for asked, known, what in ((self.claims, {o.claim for o in outcomes}, "claim"),
                                   (self.studies, {o.study for o in outcomes}, "study"),
                                   (self.statuses, set(STATUSES), "status")):
            unknown = sorted(set(asked) - known)
            if unknown:
                shown = sorted(known) if len(known) < 20 else f"{len(known)} of them"
                near = sorted({m for u in unknown
                               for m in difflib.get_close_matches(u, sorted(known), n=3)})
                hint = f"; did you mean {', '.join(near)}?" if near else ""
                raise KitError(f"verify: no {what} {', '.join(unknown)} in the ledgers "
                               f"(known: {shown}){hint}")
        return [o for o in outcomes
                if (not self.claims or o.claim in self.claims)
                and (not self.studies or o.study in self.studies)
                and (not self.statuses or o.status in self.statuses)]


# What a run for named claims leaves to the full run: checks that read only other claims'
# inputs (the integrity checks of every file, the roots and the interpreter still run).
LEFT_TO_FULL = ("left to a run without --claim: the recount of the stored bootstrap summaries "
                "(no claim reads them), the schema checks of the records and MR cards of "
                "the studies no named claim belongs to, and the papers' own arithmetic of "
                "the rows not named")


LEFT_TO_DEEP = ("the localisation fields of the drift study's stored bootstrap summaries, "
                "the detector study's per-image Polygraphy verdicts and the sweep's "
                "Polygraphy alarms on the drift cells are recounted only with --deep (the "
                "layer sketches' bootstrap, about 20-30 s on 2 cores; Polygraphy again on "
                "every host's logits, about 25 s, and on the drift cells, about 15 s)")


def selection_lines(select: Selection | None, shown: int, checked: int, deep: bool
                    ) -> list[str]:
    """What a run selected and what it left out: ``LEFT_TO_FULL`` for named claims,
    ``LEFT_TO_DEEP`` for a full run without ``deep``."""
    lines = [f"{shown} of {checked} claim checks selected"] if select else []
    if select and select.claims:
        return [*lines, LEFT_TO_FULL]
    return lines if deep else [*lines, LEFT_TO_DEEP]


def count_statuses(outcomes: list[Outcome]) -> dict[str, dict[str, int]]:
    """Per study, how many claim checks have each status (every status listed)."""
    studies = sorted({o.study for o in outcomes})
    return {study: {s: sum(1 for o in outcomes if o.study == study and o.status == s)
                    for s in STATUSES} for study in studies}


def evaluate_all(root: Path, ledger_paths: list[Path], problems: list[str],
                 only: tuple[str, ...] = (), deep: bool = False) -> list[Outcome]:
    """Loads every ledger, runs the file and schema checks and recomputes every claim (or
    ``only`` those, and the claims that answer them); what fails is appended to
    ``problems``."""
    ledgers = []
    for path in ledger_paths:
        try:
            ledgers.append(load_ledger(path))
        except KitError as exc:
            problems.append(str(exc))
    for check in (check_manifests, run_manifest_problems, check_trajectories,
                  training_weights_problems):
        problems += collect(check, root)
    if only:  # a named claim no ledger holds: refused, with the nearest ids
        Selection(claims=only).chosen([Outcome(c["id"], "", "", "", "", "", "", "", "")
                                       for ledger in ledgers for c in ledger["claims"]])
    wanted = set(only) | {c["kit_answer"]["claim"] for ledger in ledgers
                          for c in ledger["claims"] if c["id"] in only and "kit_answer" in c}
    read = [ledger for ledger in ledgers  # the studies whose records a named claim reads
            if not only or any(c["id"] in wanted for c in ledger["claims"])]
    problems += collect(check_schemas, root, read,
                        "none" if only else "deep" if deep else "summaries")
    problems += collect(paper_pin_problems, root, ledgers)
    outcomes: list[Outcome] = []
    for ledger in ledgers:
        try:
            chosen = ledger if not only else {
                **ledger, "claims": [c for c in ledger["claims"] if c["id"] in wanted]}
            outcomes += evaluate(chosen, root, problems)
        except KitError as exc:
            problems.append(str(exc))
    return link_kit_answers(ledgers, outcomes, problems)


def verify(root: Path = ROOT, json_out: Path | None = None, strict_findings: bool = False,
           expect_root: str | None = None, page: Path | None = None,
           select: Selection | None = None, interpreter: bool = False,
           deep: bool = False) -> int:
    """Every check (``interpreter``, as the command line asks: the interpreter's
    distributions too, ``kit.claims.installed``); returns the exit code (0 only with no
    ``differs`` and no failed check;
    with ``strict_findings`` also none ``direction reversed``; with ``expect_root`` the
    combined root must equal it). The summary and any failure print first, then the
    claim checks (only the ``select``ed ones, in full when claims are named), then the
    verdict line again. Each file is read once (``kit.files.hashed_once``)."""
    with hashed_once():
        return _verify(root, json_out, strict_findings, expect_root, page, select,
                       interpreter, deep)


def _verify(root: Path, json_out: Path | None, strict_findings: bool,
            expect_root: str | None, page: Path | None, select: Selection | None,
            interpreter: bool, deep: bool) -> int:
    start = time.monotonic()
    clear_cache()
    ledger_paths = sorted((root / "claims").glob("*.yaml"))
    if not ledger_paths:
        print(f"verify: no ledger in {root / 'claims'}", file=sys.stderr)
        return 1
    from kit.claims.arithmetic import attach
    from kit.claims.isolation import environment, root_checks

    problems: list[str] = environment()
    # an answer in a second: with claims named, only those are recomputed
    outcomes = evaluate_all(root, ledger_paths, problems, select.claims if select else (),
                            deep)
    outcomes, arithmetic = attach(outcomes, root, problems, select.claims if select else ())
    try:
        shown = (select or Selection()).chosen(outcomes)
    except KitError as exc:  # a ledger that did not load holds none of its claims
        raise KitError(f"{exc}; failed checks: {'; '.join(problems)}" if problems
                       else str(exc)) from exc
    found_roots, replays = root_checks(root, expect_root, page is not None, problems,
                                      interpreter)
    digest = found_roots["combined"]
    counts = count_statuses(outcomes)
    reversed_ = [f"{o.claim}/{o.substrate}" for o in outcomes if o.status == "direction reversed"]
    differing = [f"{o.claim}/{o.substrate}" for o in outcomes if o.status == "differs"]
    ok = not problems and not differing and not (strict_findings and reversed_)
    report = {"ok": ok, "root": digest, "roots": found_roots,
              "strict_findings": strict_findings,
              "replays": replays, "arithmetic": arithmetic,
              "problems": problems, "counts": counts,
              "claims": [o.as_dict() for o in outcomes]}
    validate_report(report)
    verdict = (f"verify: {len(outcomes)} claim checks, {len(problems)} failed checks, "
               f"{time.monotonic() - start:.1f} s; root {digest}; {'OK' if ok else 'FAILED'}")
    print_summary(verdict, report, reversed_, differing)
    if json_out is not None:
        write_named_file(json_out, canonical_json(report), verify_report, "--json")
    if page is not None:
        from kit.claims.page import write_page

        print(f"verify: claims page {write_page(report, page, root)}")
    for line in selection_lines(select, len(shown), len(outcomes), deep):
        print(f"verify: {line}")
    print_rows(shown, bool(select and select.claims))
    # a failing run's last line says why, not only hundreds of lines above it
    print(verdict if ok else f"{verdict} because "
          f"{failure_reason(problems, differing, reversed_ if strict_findings else [])}")
    return 0 if ok else 1


# The only file ``--json`` replaces: a report verify wrote (every field its schema requires).
verify_report = json_with({"ok", "root", "roots", "claims", "counts"})


def validate_report(report: dict[str, Any]) -> None:
    """verify's own output against ``kit/schemas/verify_report.schema.json``."""
    problems = schema_problems(report, "verify_report.schema.json", Path("verify report"))
    if problems:
        raise KitError("; ".join(problems))
