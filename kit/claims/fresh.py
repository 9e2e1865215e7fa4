"""Claims recomputed from a fresh run, beside the shipped ones (``verify --evidence DIR``).

A fresh run is shipped into a folder of its own (``python -m kit ship --run RUN --into
DIR``: ``DIR/claims/<study>/evidence/<substrate>``, the layout of the checkout). For every
substrate whose evidence is there:

1. every file of the shipped evidence folder is judged against the fresh one
   (``kit.tolerance``: identical, within tolerance, or differs naming the file, array and
   element); the run metadata (``machine.json``, the run manifest, timings) stays outside;
2. every claim is recomputed from the fresh evidence with the checkout's ledgers and
   rules, and its status and value set beside the shipped ones: the status diff.

The verdict: the reproduction holds when no status changes and no file differs. After a
retrain on another CPU the files may differ (``--status-only``): the verdict is then the
status diff alone, and the report says so. The report is written as JSON and as a page
(``runs/replay/index.html``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kit.claims.ledger import Outcome, clear_cache, evaluate, load_ledger
from kit.errors import KitError
from kit.files import canonical_json, plain_files, write_atomic
from kit.paths import ROOT
from kit.runfolder import SHIPPED_MANIFEST, UNHASHED
from kit.tolerance import compare_folders, load_bounds, summary


def fresh_report(fresh: Path, root: Path = ROOT) -> dict[str, Any]:
    """Per study and substrate present in ``fresh``: the file verdicts and the status
    diff against the shipped evidence under ``root``."""
    if not (fresh / "claims").is_dir():
        raise KitError(f"{fresh}: no claims/ folder; write one with python -m kit ship "
                       f"--run RUN --into {fresh}")
    bounds = load_bounds()
    studies: dict[str, Any] = {}
    for path in sorted((root / "claims").glob("*.yaml")):
        ledger = load_ledger(path)
        for name, substrate in ledger["substrates"].items():
            folder = substrate["evidence"]
            if not (fresh / folder).is_dir():
                continue
            shipped_files = [p.relative_to(root / folder).as_posix()
                             for p in plain_files(root / folder)[0]]
            names = [n for n in shipped_files
                     if n.split("/")[-1] not in (SHIPPED_MANIFEST, *UNHASHED)]
            verdicts = compare_folders(fresh / folder, root / folder, ledger["study"], names,
                                       bounds)
            studies[f"{ledger['study']}/{name}"] = {
                "files": summary(verdicts),
                "verdicts": [v.__dict__ for v in verdicts if v.verdict != "identical"],
                "status_diff": status_diff(ledger, name, root, fresh)}
    if not studies:
        raise KitError(f"{fresh}: holds no study's evidence under claims/ (expected "
                       "claims/<study>/evidence/<substrate>)")
    return {"studies": studies}


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


def verdict(report: dict[str, Any], status_only: bool) -> bool:
    """The reproduction holds: no status changed and (unless ``status_only``) no file
    differs."""
    studies = report["studies"].values()
    changed = any(d["fresh_status"] != d["shipped_status"]
                  for s in studies for d in s["status_diff"])
    differing = any(s["files"]["counts"]["differs"] for s in studies)
    return not changed and (status_only or not differing)


def print_report(report: dict[str, Any], status_only: bool) -> None:
    for where, study in report["studies"].items():
        counts, files = study["files"]["counts"], study["files"]
        print(f"replay: {where}: {counts['identical']} identical, "
              f"{counts['within tolerance']} within tolerance, {counts['differs']} differ "
              f"(largest differences: abs {files['max_abs']:.3g}, rel {files['max_rel']:.3g})")
        if files["first_difference"]:
            first = files["first_difference"]
            print(f"replay: {where}: first difference: {first['file']}: {first['where']}")
        for diff in study["status_diff"]:
            print(f"replay: {where}: {diff['claim']}: shipped {diff['shipped_status']} "
                  f"({diff['shipped_value']}), fresh {diff['fresh_status']} "
                  f"({diff['fresh_value']})")
    if status_only:
        print("replay: files may differ (--status-only: after a retrain on another CPU); "
              "the verdict is the status diff alone")


def write_replay_page(report: dict[str, Any], path: Path, ok: bool) -> Path:
    """``runs/replay/index.html``: per study the file counts, the largest differences,
    every file that is not identical and the status diff."""
    from kit.reporting import PageTable, html_page

    sections = []
    for where, study in report["studies"].items():
        files = study["files"]
        sections.append(PageTable(
            where, ["file", "verdict", "where"],
            [[v["file"], v["verdict"], v["where"]] for v in study["verdicts"]],
            note=", ".join(f"{n} {k}" for k, n in files["counts"].items())
            + f"; largest differences: abs {files['max_abs']:.3g}, rel {files['max_rel']:.3g}"))
        sections.append(PageTable(
            f"{where}: status diff", ["claim", "shipped", "fresh"],
            [[d["claim"], f"{d['shipped_status']} ({d['shipped_value']})",
              f"{d['fresh_status']} ({d['fresh_value']})"] for d in study["status_diff"]]))
    page = html_page("Replay against the shipped evidence",
                     f"Replay against the shipped evidence: {'holds' if ok else 'FAILS'}",
                     {"files may differ (--status-only)": report.get("status_only", False)},
                     sections)
    write_atomic(path, page.encode())
    return path


def verify_fresh(fresh: Path, status_only: bool = False, out: Path | None = None) -> int:
    """``verify --evidence DIR``: the file verdicts and the status diff; exit 0 when the
    reproduction holds. The report goes to ``DIR/replay-verdict.json`` and the page to
    ``out`` (default ``runs/replay/index.html``)."""
    report = fresh_report(fresh)
    ok = verdict(report, status_only)
    report["holds"], report["status_only"] = ok, status_only
    print_report(report, status_only)
    write_atomic(fresh / "replay-verdict.json", canonical_json(report))
    page = write_replay_page(report, out or ROOT / "runs" / "replay" / "index.html", ok)
    print(f"replay: {'holds' if ok else 'FAILS'}; report {fresh / 'replay-verdict.json'}, "
          f"page {page}")
    return 0 if ok else 1
