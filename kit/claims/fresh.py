"""Claims recomputed from a fresh run, beside the shipped ones (``verify --evidence DIR``).

A fresh run is shipped into a folder of its own (``python -m kit ship --run RUN --into
DIR``: ``DIR/claims/<study>/evidence/<substrate>``, the layout of the checkout). For every
substrate whose evidence is there:

1. every file of the shipped evidence folder is judged against the fresh one
   (``kit.tolerance``: identical, within tolerance, or differs naming the file, array and
   element); the run metadata (``machine.json``, the run manifest, timings) stays outside;
   the drift study's localisation ranks and the summaries computed from them are judged at
   the ties of their layer scores (``kit.drift.ties``), the corpus detector study's record
   through the arrays it is computed from (``kit.corpus.derived``), and the SciML study's
   detections and verdicts at their thresholds (``kit.sciml.margins``);
2. every claim is recomputed from the fresh evidence with the checkout's ledgers and
   rules, and its status and value set beside the shipped ones: the status diff.

The verdict: the reproduction holds when no status changes and no file differs. After a
retrain on another CPU the files may differ (``--status-only``): the verdict is then the
status diff alone, and the report says so. A claim whose status changed and a claim whose
value alone moved are listed apart, under a one-line count.

The report is the **replay record** of this machine (``DIR/replay-record.json``, schema
``replay-record.schema.json``): the CPU's model and every flag, the machine each study's
evidence was made on, per study and file the verdict and the largest absolute and relative
difference, and the status diff. ``python -m kit ship --replay-record FILE`` adds one to
the evidence (``claims/replays/``, under the root); the claims page shows every shipped
record as the matrix of CPUs the kit has replayed on. It is also drawn as a page
(``runs/replay/index.html``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kit.claims.ledger import Outcome, clear_cache, evaluate, load_ledger
from kit.errors import KitError
from kit.files import canonical_json, plain_files, read_json, sha256
from kit.owned import json_with, write_named_file
from kit.paths import ROOT
from kit.runfolder import MACHINE, SHIPPED_MANIFEST, UNHASHED
from kit.tolerance import RETRAINED, compare_folders, load_bounds, summary

RECORD = "replay-record.json"


def this_machine() -> dict[str, Any]:
    """The replaying machine: ``kit.machine``'s fingerprint and every CPU flag."""
    from kit.machine import cpu_flags, fingerprint

    return {**fingerprint(), "flags": cpu_flags()}


def machine_name(machine: dict[str, Any] | None) -> str:
    """``AMD EPYC (x86_64; avx2 avx512f ...)``, or that the evidence names none."""
    if not machine:
        return "a machine the evidence does not name"
    return f"{machine.get('cpu', '?')} ({machine.get('machine', '?')}; " \
           f"{' '.join(machine.get('isa', [])) or 'no listed ISA flags'})"


def fresh_report(fresh: Path, root: Path = ROOT, retrained: Iterable[str] = (),
                 models: dict[str, str] | None = None,
                 support: Iterable[str] = ()) -> dict[str, Any]:
    """Per study and substrate present in ``fresh`` (``study/substrate``): the file
    verdicts and the status diff against the shipped evidence under ``root``.
    ``retrained``: the ``study/substrate`` names (or ``*``) whose fresh run trained its own
    models on a CPU other than the evidence machine's: their files are judged against the
    seed spread (``kit.spread``) and their verdict is the status diff alone. ``models``:
    where each one's trained models came from (``*``: every one), for the record.
    ``support``: those shipped beside the others only to be recounted against (the drift
    run a sweep's Polygraphy fault matrix was computed from), not judged; every judged
    study's record names them."""
    if not (fresh / "claims").is_dir():
        raise KitError(f"{fresh}: no claims/ folder; write one with python -m kit ship "
                       f"--run RUN --into {fresh}")
    links = plain_files(fresh / "claims", "ship the run again into a new folder")[1]
    if links:  # never followed out of the fresh folder
        raise KitError(links[0] + (f" (and {len(links) - 1} more)" if len(links) > 1 else ""))
    bounds = load_bounds()
    chosen, helpers = set(retrained), sorted(support)
    studies: dict[str, Any] = {}
    for path in sorted((root / "claims").glob("*.yaml")):
        ledger = load_ledger(path)
        for name, substrate in ledger["substrates"].items():
            folder = substrate["evidence"]
            if not (fresh / folder).is_dir():
                continue
            where = f"{ledger['study']}/{name}"
            if where in helpers:
                continue
            again = "*" in chosen or where in chosen
            study = judge_study(fresh, root, ledger, name, bounds, again,
                                (models or {}).get(where, (models or {}).get("*")))
            if helpers:
                study["support"] = helpers
            study["holds"] = study_holds(study)
            studies[where] = study
    if not studies:
        raise KitError(f"{fresh}: holds no study's evidence under claims/ (expected "
                       "claims/<study>/evidence/<substrate>)")
    return {"machine": this_machine(), "studies": studies,
            "holds": all(s["holds"] for s in studies.values())}


def judge_study(fresh: Path, root: Path, ledger: dict[str, Any], name: str, bounds: Any,
                again: bool, models: str | None) -> dict[str, Any]:
    """One substrate of a ledger present in ``fresh``: its file verdicts (against the seed
    spread when ``again``: trained again on another CPU), its status diff and where its
    models came from (``models``)."""
    substrate = ledger["substrates"][name]
    folder = substrate["evidence"]
    verdicts = [*judged(fresh, root, folder, ledger["study"], bounds, again),
                *null_judged(fresh, root, substrate, ledger["study"], bounds, again)]
    if ledger["study"] == "drift" and not again:
        from kit.drift.ties import revise  # ranks at their ties

        verdicts = revise(verdicts, fresh / folder, root / folder, bounds)
    if ledger["study"] == "corpus" and name == "detectors" and not again:
        from kit.corpus.derived import revise as through_inputs

        verdicts = through_inputs(verdicts, fresh / folder, root / folder, bounds)
    if ledger["study"] == "sciml" and not again:
        from kit.sciml.margins import revise as at_thresholds

        verdicts = at_thresholds(verdicts, sides(fresh, root, substrate), bounds)
    made_on = root / folder / MACHINE
    diff = status_diff(ledger, name, root, fresh)
    return {"evidence_machine": read_json(made_on) if made_on.is_file() else None,
            "against": sha256(root / folder / SHIPPED_MANIFEST),
            "models": models,
            "status_only": again,
            "files": summary(verdicts),
            "verdicts": [v.__dict__ for v in verdicts if v.verdict != "identical"],
            "status_changes": [d for d in diff if d["fresh_status"] != d["shipped_status"]],
            "value_changes": [d for d in diff if d["fresh_status"] == d["shipped_status"]]}


def judged(fresh: Path, root: Path, folder: str, study: str, bounds: Any,
           again: bool) -> list[Any]:
    """Every file of the shipped evidence ``folder`` judged against the fresh one."""
    shipped_files = [p.relative_to(root / folder).as_posix()
                     for p in plain_files(root / folder)[0]]
    names = [n for n in shipped_files
             if n.split("/")[-1] not in (SHIPPED_MANIFEST, *UNHASHED)]
    return compare_folders(fresh / folder, root / folder, study, names, bounds,
                           retrained=again)


def sides(fresh: Path, root: Path, substrate: dict[str, Any]
          ) -> dict[str, tuple[Path, Path]]:
    """Per verdict prefix ('' and, with null evidence, 'null/'): the fresh and the shipped
    evidence folder."""
    found = {"": (fresh / substrate["evidence"], root / substrate["evidence"])}
    if substrate.get("null_evidence"):
        found["null/"] = (fresh / substrate["null_evidence"], root / substrate["null_evidence"])
    return found


def null_judged(fresh: Path, root: Path, substrate: dict[str, Any], study: str,
                bounds: Any, again: bool) -> list[Any]:
    """The files of a substrate's null evidence (its rows are decided against it too),
    judged as ``null/FILE``; a fresh folder without it is refused, naming the commands
    that make it."""
    from dataclasses import replace

    folder = substrate.get("null_evidence")
    if not folder:
        return []
    if not (fresh / folder).is_dir():
        raise KitError(f"{fresh / folder}: missing; every {study} row is decided against the "
                       f"null subjects too: run python -m kit {study} --models null, then "
                       f"python -m kit ship --run runs/{study}-null --into {fresh} "
                       f"(reproduce-all --only {study} does both)")
    return [replace(v, file=f"null/{v.file}")
            for v in judged(fresh, root, folder, study, bounds, again)]


def status_diff(ledger: dict[str, Any], substrate: str, root: Path, fresh: Path
                ) -> list[dict[str, str]]:
    """Every claim of one substrate whose status or value the fresh evidence changes."""
    def outcomes(where: Path) -> dict[str, Outcome]:
        clear_cache()
        problems: list[str] = []
        found = {o.claim: o for o in evaluate(ledger, where, problems)
                 if o.substrate == substrate}
        if problems:
            raise KitError(f"{where}: " + "; ".join(problems))
        return found

    shipped, found = outcomes(root), outcomes(fresh)
    return [{"claim": claim, "shipped_status": shipped[claim].status,
             "shipped_value": shipped[claim].recomputed, "fresh_status": o.status,
             "fresh_value": o.recomputed}
            for claim, o in found.items()
            if (o.status, o.recomputed) != (shipped[claim].status, shipped[claim].recomputed)]


def study_holds(study: dict[str, Any]) -> bool:
    """One study replays: no status changed and (unless it was retrained on another CPU,
    ``status_only``) no file differs."""
    return not study["status_changes"] and \
        (study["status_only"] or not study["files"]["counts"]["differs"])


def files_line(files: dict[str, Any]) -> str:
    """``896 identical, 1 within tolerance, 58 differ (largest differences: abs 9.5e-07,
    rel 0.0031)``: one study's file counts and figures."""
    counts = files["counts"]
    opaque = files.get("opaque", 0)
    again = counts.get(RETRAINED, 0)
    return (f"{counts['identical']} identical, {counts['within tolerance']} within tolerance, "
            + (f"{again} {RETRAINED}, " if again else "")
            + f"{counts['differs']} differ (largest differences: abs {files['max_abs']:.3g}, "
            f"rel {files['max_rel']:.3g}"
            + (f"; {opaque} opaque file(s) without figures" if opaque else "") + ")")


def status_line(study: dict[str, Any]) -> str:
    """``0 claims changed status, 19 changed value only``."""
    return (f"{len(study['status_changes'])} claims changed status, "
            f"{len(study['value_changes'])} changed value only")


def print_report(report: dict[str, Any]) -> None:
    print(f"replay: on {machine_name(report['machine'])}")
    for where, study in report["studies"].items():
        files = study["files"]
        print(f"replay: {where}: evidence made on {machine_name(study['evidence_machine'])}"
              + (f"; models {study['models']}" if study["models"] else ""))
        print(f"replay: {where}: files: {files_line(files)}")
        if study.get("support"):
            print(f"replay: {where}: recounted against {', '.join(study['support'])} "
                  "(shipped beside it, not judged)")
        if files["first_difference"]:
            first = files["first_difference"]
            print(f"replay: {where}: first difference: {first['file']}: {first['where']}")
        print(f"replay: {where}: claims: {status_line(study)}")
        for kind in ("status_changes", "value_changes"):
            for diff in study[kind]:
                print(f"replay: {where}: {'STATUS' if kind == 'status_changes' else 'value'}"
                      f" {diff['claim']}: shipped {diff['shipped_status']} "
                      f"({diff['shipped_value']}), fresh {diff['fresh_status']} "
                      f"({diff['fresh_value']})")
        if study["status_only"]:
            print(f"replay: {where}: retrained on another CPU: files are judged against the "
                  "seed spread, and the verdict is the status diff alone")
        print(f"replay: {where}: {'holds' if study['holds'] else 'FAILS'}")


def write_replay_page(report: dict[str, Any], path: Path, ok: bool) -> Path:
    """``runs/replay/index.html``: per study the file counts, the largest differences,
    every file that is not identical and the status diff."""
    from kit.reporting import PageTable, html_page

    def figure(x: float | None) -> str:
        return "opaque bytes" if x is None else f"{x:.3g}"

    sections = []
    for where, study in report["studies"].items():
        sections.append(PageTable(
            where, ["file", "verdict", "largest abs", "largest rel", "where"],
            [[v["file"], v["verdict"], figure(v["max_abs"]), figure(v["max_rel"]), v["where"]]
             for v in study["verdicts"]],
            note=f"{'holds' if study['holds'] else 'FAILS'}; evidence made on "
                 f"{machine_name(study['evidence_machine'])}; models "
                 f"{study['models'] or 'not recorded'}; "
                 + ("retrained on another CPU: the status diff decides; " if
                    study["status_only"] else "")
                 + (f"recounted against {', '.join(study['support'])} (not judged); "
                    if study.get("support") else "") + files_line(study["files"])))
        for kind, title in (("status_changes", "claims whose status changed"),
                            ("value_changes", "claims whose value alone changed")):
            sections.append(PageTable(
                f"{where}: {title}", ["claim", "shipped", "fresh"],
                [[d["claim"], f"{d['shipped_status']} ({d['shipped_value']})",
                  f"{d['fresh_status']} ({d['fresh_value']})"] for d in study[kind]],
                note=status_line(study)))
    page = html_page("Replay against the shipped evidence",
                     f"Replay against the shipped evidence: {'holds' if ok else 'FAILS'}",
                     {"replayed on": machine_name(report["machine"])},
                     sections)
    write_named_file(path, page.encode(), lambda data: PAGE_TITLE.encode() in data[:2048],
                     "the replay page's folder")
    return path


PAGE_TITLE = "<title>Replay against the shipped evidence</title>"


# The only file of that name ``verify --evidence`` replaces in the evidence folder.
replay_record = json_with({"holds", "machine"})


def verify_fresh(fresh: Path, status_only: bool = False, out: Path | None = None,
                 retrained: Iterable[str] = (), models: dict[str, str] | None = None,
                 support: Iterable[str] = ()) -> int:
    """``verify --evidence DIR``: the file verdicts and the status diff; exit 0 when the
    reproduction holds. ``status_only``: every study was retrained on another CPU
    (``retrained`` names some). The replay record goes to ``DIR/replay-record.json`` and
    the page to ``out`` (default ``runs/replay/index.html``)."""
    report = fresh_report(fresh, retrained=["*"] if status_only else retrained, models=models,
                          support=support)
    ok = report["holds"]
    print_report(report)
    write_named_file(fresh / RECORD, canonical_json(report), replay_record, "--evidence")
    page = write_replay_page(report, out or ROOT / "runs" / "replay" / "index.html", ok)
    from kit.claims.page import relink

    relink()  # the claims page links the replay, whichever command ran first
    print(f"replay: {'holds' if ok else 'FAILS'}; record {fresh / RECORD}, page {page}")
    return 0 if ok else 1
