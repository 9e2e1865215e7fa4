"""The replay records the evidence ships: what each study gave on every CPU the kit has
been replayed on (``claims/replays/<machine>/<study>--<substrate>.json``).

``reproduce-all`` (and ``verify --evidence DIR``) writes the record of the machine it ran
on (``kit.claims.fresh``). ``python -m kit ship --replay-record FILE`` splits it per study,
checks each part against ``replay_record.schema.json`` and writes it under the machine's
folder (a later record of the same study on the same CPU replaces the earlier one), then
rewrites the manifests: the records are evidence, under the root like every other file of
``claims/``. verify validates every shipped record and the claims page draws the matrix
(``matrix``): one row per CPU, one column per study, what held on each.

A machine is named by its CPU model and the sha256 of its CPU flags (``kit.machine``):
two hosts that report the same model and flags pick the same kernels.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kit import schema
from kit.errors import KitError
from kit.files import canonical_json, read_json, sha256, write_atomic
from kit.paths import ROOT

REPLAYS = Path("claims") / "replays"
SCHEMA = "replay_record.schema.json"
# The fields of a whole record that every study's part carries with it.
SHARED = ("machine",)


def machine_id(machine: dict[str, Any]) -> str:
    """``intel-r-xeon-r-processor-1a2b3c4d5e6f``: the CPU model as a name, and the first 12
    hex digits of its flags' sha256."""
    model = re.sub(r"[^a-z0-9]+", "-", str(machine.get("cpu", "unknown")).lower()).strip("-")
    return f"{model or 'unknown'}-{str(machine.get('cpu_flags_sha256', ''))[:12]}"


def parts(record: dict[str, Any], source: Path) -> dict[str, dict[str, Any]]:
    """Each study's part of a whole record (``kit.claims.fresh``), schema-checked: the file
    name under ``claims/replays/<machine>/`` -> the part."""
    studies = record.get("studies") if isinstance(record, dict) else None
    if not isinstance(studies, dict) or not studies or \
            any(key not in record for key in SHARED):
        raise KitError(f"{source}: not a replay record (reproduce-all or verify --evidence "
                       "writes one: replay-record.json with the machine and its studies)")
    found = {}
    for where, study in sorted(studies.items()):
        part = {**{key: record[key] for key in SHARED}, **study, "study": where}
        schema.check(part, SCHEMA, f"{source} (study {where})")
        found[f"{where.replace('/', '--')}.json"] = part
    return found


def ship_record(source: Path, root: Path = ROOT) -> list[Path]:
    """Add a replay record to the evidence under ``root`` (module docstring); returns the
    files written. Under the ship's journal (``kit.claims.journal``): the machine's folder
    is staged whole (its earlier records and the new parts) and swapped in, then the
    manifests are written, so a ship killed at any moment leaves the earlier records or
    the new ones, never a mix, and the next ship or record finishes or rolls it back."""
    import shutil

    from kit.claims import journal
    from kit.claims.coverage import refuse_leftovers, write_manifests

    journal.recover(root, write_manifests)  # a killed ship's, or a killed record's, first
    refuse_leftovers(root)
    record = read_json(source, "give the replay-record.json that reproduce-all wrote")
    found = parts(record, source)
    folder = root / REPLAYS / machine_id(record["machine"])
    for top in (root / "claims", root / REPLAYS, folder):
        if top.is_symlink() or (top.exists() and not top.is_dir()):
            raise KitError(f"{top}: not a folder of the checkout (a link or a file); move "
                           "it away")
    folder.parent.mkdir(parents=True, exist_ok=True)

    def fill(staging: Path) -> None:
        for earlier in sorted(folder.iterdir()) if folder.is_dir() else []:
            if earlier.name not in found and earlier.is_file() and not earlier.is_symlink():
                shutil.copyfile(earlier, staging / earlier.name)  # kept as they were
        for name, part in found.items():
            write_atomic(staging / name, canonical_json(part))

    journal.replace(root, folder, write_manifests, fill)
    return [folder / name for name in found]


def load_records(root: Path = ROOT) -> tuple[list[dict[str, Any]], list[str]]:
    """Every shipped part (sorted by machine and study) and the problems with them: a part
    that breaks the schema, or that lies under another machine's folder or study's name."""
    records, problems = [], []
    top = root / REPLAYS
    for path in sorted(top.glob("*/*.json")) if top.is_dir() else []:
        try:
            part = read_json(path, "restore it from git")
        except KitError as exc:
            problems.append(str(exc))
            continue
        found = schema.problems(part, SCHEMA, path)
        if not found:
            expected = (machine_id(part["machine"]),
                        f"{part['study'].replace('/', '--')}.json")
            if (path.parent.name, path.name) != expected:
                found = [f"{path}: filed under the wrong name; its machine and study say "
                         f"{'/'.join(expected)}"]
        problems += found or recount(part, path)
        if not found:
            records.append({**part, "file": path.relative_to(root).as_posix()})
    return records, problems


def recount(part: dict[str, Any], path: Path) -> list[str]:
    """A record's summary against its own lists: the counts of files that are not
    identical against its verdicts, and its verdict against its counts and status diff."""
    counts = part["files"]["counts"]
    listed = {v: sum(1 for x in part["verdicts"] if x["verdict"] == v)
              for v in ("within tolerance", "retrained, within seed spread", "differs")}
    problems = [f"{path}: files/counts/{v} says {counts.get(v, 0)}, its verdicts list {n}"
                for v, n in listed.items() if counts.get(v, 0) != n]
    holds = not part["status_changes"] and (part["status_only"] or not listed["differs"])
    if part["holds"] != holds:
        problems.append(f"{path}: holds says {part['holds']}, its verdicts and status diff "
                        f"give {holds}")
    return problems


def earlier(part: dict[str, Any], root: Path = ROOT) -> str:
    """'' when the record compared the study's shipped evidence as it stands (the sha256 of
    its run manifest, ``against``); otherwise the words that say it compared an earlier
    run."""
    study, substrate = part["study"].split("/", 1)
    manifest = root / "claims" / study / "evidence" / substrate / "run-manifest.json"
    if manifest.is_file() and sha256(manifest) == part["against"]:
        return ""
    return (f" (against an earlier evidence run, run manifest {part['against'][:12]}; "
            "the shipped evidence has been re-made since)")


def cell(part: dict[str, Any], root: Path = ROOT) -> str:
    """One study on one CPU: ``holds: 953 identical, 2 within, 0 differ; 0 status changes``,
    and whether it compared an earlier run of the evidence (``earlier``)."""
    counts = part["files"]["counts"]
    verdict = "holds" if part["holds"] else "FAILS"
    kind = " (retrained: status diff decides)" if part["status_only"] else ""
    if part["evidence_machine"] and \
            machine_id(part["evidence_machine"]) == machine_id(part["machine"]):
        kind += " (the CPU that made this evidence)"
    kind += earlier(part, root)
    return (f"{verdict}{kind}: {counts['identical']} identical, "
            f"{counts['within tolerance']} within, {counts['differs']} differ; "
            f"{len(part['status_changes'])} status changes, "
            f"{len(part['value_changes'])} value changes")


# The substrates whose runs train or fetch models (kit.reproduce.command's MODEL_EVIDENCE
# steps, as JUDGED_AS names them; a test holds the two together).
TRAINED = ("corpus/detectors", "drift/digits", "realdrift/digits", "sciml/kit")


def _models(part: dict[str, Any]) -> str:
    """Where a part's models came from; a record that does not say (``verify --evidence``
    alone knows nothing of the run's models) says so for a substrate that has them."""
    if part["models"] is None and part["study"] in TRAINED:
        return "its models not named (judged by verify --evidence alone)"
    return {None: "no trained models", "shipped": "on the shipped weights",
            "train": "retrained here"}.get(part["models"], str(part["models"]))


def markdown(records: list[dict[str, Any]], root: Path = ROOT) -> str:
    """The matrix as the README prints it (between ``<!-- replays -->`` marks; the tests
    hold the README to the shipped records)."""
    header, rows = matrix(records, root)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def matrix(records: list[dict[str, Any]], root: Path = ROOT
           ) -> tuple[list[str], list[list[str]]]:
    """The CPUs the kit has replayed on, one row each (CPU, its ISA, the models), one
    column per study (each record against the evidence under ``root``): the header and
    the rows."""
    studies = sorted({r["study"] for r in records})
    rows: dict[str, dict[str, Any]] = {}
    for r in records:
        row = rows.setdefault(machine_id(r["machine"]), {"machine": r["machine"], "cells": {}})
        row["cells"][r["study"]] = r
    header = ["CPU", "ISA (kernel-picking flags)", *studies]
    table = []
    for key, row in sorted(rows.items()):
        machine = row["machine"]
        table.append([f"{machine['cpu']} ({key})", " ".join(machine.get("isa", [])),
                      *(cell(row["cells"][s], root) + "; " + _models(row["cells"][s])
                        if s in row["cells"] else "not replayed" for s in studies)])
    return header, table


MARKS = re.compile(r"<!-- replays -->\n.*?<!-- /replays -->", re.S)


def write_readme(readme: Path = ROOT / "README.md") -> Path:
    """Put the shipped records' matrix between the README's ``<!-- replays -->`` marks (a
    KitError when a record has a problem or the marks are missing)."""
    records, problems = load_records()
    if problems:
        raise KitError("; ".join(problems))
    text = readme.read_text(encoding="utf-8")
    if not MARKS.search(text):
        raise KitError(f"{readme}: no <!-- replays --> ... <!-- /replays --> marks")
    table = markdown(records)
    write_atomic(readme, MARKS.sub(lambda _: f"<!-- replays -->\n{table}\n<!-- /replays -->",
                                   text, count=1).encode())
    return readme


if __name__ == "__main__":  # python -m kit.claims.replays [--readme]: the README's matrix
    import sys

    if sys.argv[1:] == ["--readme"]:
        print(write_readme())
    else:
        print(markdown(load_records()[0]))
