"""``python -m kit verify``: check every ledger, schema, manifest and claim offline.

1. Schemas: every ledger (``claims/*.yaml``), the shipped evidence records
   (``score/score.json``), the protocol copies, the manifests and the SciML MR cards.
2. Manifests: ``manifests/evidence.json`` lists the sha256 of every file under ``claims/``
   (ledgers and shipped evidence): each must match, and a file present but not listed is
   refused. ``manifests/locks.json`` pins the lock files and ``manifests/assets.json`` the
   upstream assets (equal to ``kit.assets``).
3. Claims: recomputed from the raw per-case evidence and decided by their rules.
4. ``--replay``: rerun the pipeline (or named stages) and compare bytes.

Exit 0 only when every check passes and every claim that applies to present evidence
holds. A claim's ``finding`` (the paper's direction where it did not reproduce on a
stand-in substrate, ``kit.claims``) is printed and counted; with ``strict_findings`` a
reversed finding fails the run as well. ``ship`` copies a finished run's evidence into
``claims/<study>/evidence/`` and rewrites the manifests.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from kit import assets
from kit.claims import Outcome, clear_cache, evaluate, load_ledger
from kit.errors import KitError
from kit.protocol import load_protocol
from kit.runtimes import ROOT
from kit.stages.common import MANIFEST, REPLAY
from kit.worker import canonical_json, sha256_file, write_atomic

SCHEMAS = Path(__file__).with_name("schemas")
EVIDENCE_MANIFEST = Path("manifests/evidence.json")
LOCKS_MANIFEST = Path("manifests/locks.json")
ASSETS_MANIFEST = Path("manifests/assets.json")
SHIPPED = ("score/protocol.yaml", "fetch/fetch.json", "split/split.json", "fault/fault.json",
           "fault/severity.json",
           "score/score.json", "score/summary.json", "score/layers.npz",
           "score/clean-logits.npz", "bootstrap/bootstrap.json", "bootstrap/summary.json",
           "sensitivity/sensitivity.json", "sensitivity/summary.json")


def _validate(instance: Any, schema: str, shown: Path) -> None:
    validator = Draft202012Validator(json.loads((SCHEMAS / schema).read_text()))
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
    if errors:
        where = "/".join(str(p) for p in errors[0].absolute_path) or "(top)"
        raise KitError(f"{shown}: {where}: {errors[0].message} (schema {schema})")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise KitError(f"{path}: cannot read as JSON ({exc})") from exc


def asset_pins() -> dict[str, Any]:
    """The upstream pins of ``kit.assets`` as a manifest."""
    pins = [assets.CIFAR100, *assets.CHECKPOINTS.values()]
    return {"assets": {a.name: {"url": a.url, "sha256": a.sha256,
                                "sha256_prefix": a.sha256_prefix, "size": a.size}
                       for a in pins},
            "members": dict(sorted(assets.CIFAR100_MEMBERS.items()))}


def evidence_files(root: Path) -> list[Path]:
    """Every file under ``claims/`` (ledgers and shipped evidence, not the README), sorted."""
    return sorted(p for p in (root / "claims").rglob("*")
                  if p.is_file() and p.name != "README.md")


def lock_files(root: Path) -> list[Path]:
    """The lock files and their ``.in`` sources, sorted."""
    return sorted(p for p in (root / "locks").glob("*") if p.suffix in (".lock", ".in"))


# Each sha256 manifest and the files it must list, exactly.
LISTED = {EVIDENCE_MANIFEST: evidence_files, LOCKS_MANIFEST: lock_files}


def write_manifests(root: Path = ROOT) -> None:
    """Rewrite the evidence, lock and asset manifests from what is on disk."""
    for manifest, files in LISTED.items():
        listed = {p.relative_to(root).as_posix(): sha256_file(p) for p in files(root)}
        write_atomic(root / manifest, canonical_json({"files": listed}))
    write_atomic(root / ASSETS_MANIFEST, canonical_json(asset_pins()))


def check_manifests(root: Path) -> list[str]:
    """Problems with the manifests (empty when every entry checks out)."""
    problems = []
    for manifest, files in LISTED.items():
        path = root / manifest
        if not path.is_file():
            problems.append(f"{path}: manifest missing")
            continue
        listed = _read_json(path)
        _validate(listed, "manifest.schema.json", path)
        for name, digest in sorted(listed["files"].items()):
            target = root / name
            if not target.is_file():
                problems.append(f"{target}: listed in {manifest} but missing")
            elif sha256_file(target) != digest:
                problems.append(f"{target}: sha256 differs from {manifest}")
        present = {p.relative_to(root).as_posix() for p in files(root)}
        problems += [f"{root / n}: present but not listed in {manifest}"
                     for n in sorted(present - set(listed["files"]))]
    path = root / ASSETS_MANIFEST
    if not path.is_file():
        problems.append(f"{path}: manifest missing")
    elif _read_json(path) != asset_pins():
        problems.append(f"{path}: differs from the pins in kit/assets.py")
    return problems


def check_schemas(root: Path, ledgers: list[dict[str, Any]]) -> list[str]:
    """Validate every evidence record and protocol copy the ledgers point at, and the
    SciML MR cards; raises KitError on the first violation."""
    checked = []
    for ledger in ledgers:
        for substrate in ledger["substrates"].values():
            folder = root / substrate["evidence"]
            if ledger["study"] == "sciml":
                verdicts = folder / "ledger.json"
                if verdicts.is_file():
                    _validate(_read_json(verdicts), "verdict_ledger.schema.json", verdicts)
                    checked.append(str(verdicts))
                continue
            record = folder / "score" / "score.json"
            if not record.is_file():
                continue
            _validate(_read_json(record), "score_record.schema.json", record)
            load_protocol(folder / "score" / "protocol.yaml")
            checked += [str(record), str(folder / "score" / "protocol.yaml")]
    from kit.sciml.cards import load_cards

    load_cards()
    checked.append("kit/sciml/cards")
    return checked


def check_trajectories(root: Path) -> list[str]:
    """Problems with the trajectories the shipped MeshGraphNet evidence names (empty when
    each was read from ``claims/sciml/trajectories`` with the sha256 its index lists)."""
    record = root / "claims" / "sciml" / "evidence" / "kit" / "mgn.json"
    if not record.is_file():
        return []
    index_path = root / "claims" / "sciml" / "trajectories" / "trajectories.json"
    index = _read_json(index_path)["trajectories"] if index_path.is_file() else {}
    used = _read_json(record).get("trajectories")
    if not isinstance(used, dict) or not used:
        return [f"{record}: names no trajectories; ship a run of the current kit"]
    problems = []
    for tag, entry in sorted(used.items()):
        name = entry.get("pinned")
        listed = index.get(name, {}).get("sha256") if name else None
        if name is None:
            problems.append(f"{record}: trajectory {tag} was not read from "
                            f"{index_path.parent} (simulated in that run); ship a run of the "
                            "pinned trajectories")
        elif listed != entry.get("sha256"):
            problems.append(f"{record}: trajectory {tag} ({name}) has sha256 "
                            f"{entry.get('sha256')}, {index_path} lists {listed}")
    return problems


SCIML_SHIPPED = ("ledger.json", "operator_floor.json", "fv_balance.json", "fno.json", "mgn.json",
                 "mgn_faults.json", "second_task.json", "unified.json",
                 "pinn.json")


def ship(run: Path, study: str = "drift", root: Path = ROOT) -> Path:
    """Copy a finished run's evidence into ``claims/<study>/evidence/<substrate>``
    (a SciML run folder, recognised by its ``ledger.json``, goes to ``claims/sciml``)."""
    if (run / "ledger.json").is_file() and not (run / "fetch").is_dir():
        return _ship_files(run, root / "claims" / "sciml" / "evidence" / "kit",
                           list(SCIML_SHIPPED), root)
    substrate = str(_read_json(run / "fetch" / "fetch.json")["substrate"])
    target = root / "claims" / study / "evidence" / substrate
    record = _read_json(run / "score" / "score.json")
    names = list(SHIPPED) + [d["path"] for d in record["tables"].values()]
    return _ship_files(run, target, names, root)


def _ship_files(run: Path, target: Path, names: list[str], root: Path) -> Path:
    staging = target.with_name(target.name + ".tmp")
    if staging.exists():
        shutil.rmtree(staging)
    for name in names:
        if not (run / name).is_file():
            raise KitError(f"{run / name}: missing; run every stage before shipping")
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(run / name, staging / name)
    shutil.copyfile(run / MANIFEST, staging / "run-manifest.json")
    if (run / REPLAY).is_file():
        shutil.copyfile(run / REPLAY, staging / "replay.json")
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    write_manifests(root)
    return target


def print_outcomes(outcomes: list[Outcome]) -> None:
    width = max(len(o.recomputed) for o in outcomes) if outcomes else 10
    print(f"{'claim':<8} {'substrate':<9} {'published':<28} {'recomputed':<{min(width, 30)}} "
          "status      rule")
    for o in outcomes:
        print(f"{o.claim:<8} {o.substrate:<9} {o.published[:28]:<28} "
              f"{o.recomputed[:30]:<{min(width, 30)}} {o.status:<11} {o.rule}"
              + (f" ({o.note})" if o.note else "")
              + (f" [paper's direction {o.finding}]" if o.finding else ""))


def verify(root: Path = ROOT, json_out: Path | None = None,
           strict_findings: bool = False) -> int:
    """Every check; returns the exit code."""
    start = time.monotonic()
    clear_cache()
    ledger_paths = sorted((root / "claims").glob("*.yaml"))
    if not ledger_paths:
        print(f"verify: no ledger in {root / 'claims'}", file=sys.stderr)
        return 1
    problems: list[str] = []
    ledgers = []
    for path in ledger_paths:
        try:
            ledgers.append(load_ledger(path))
        except KitError as exc:
            problems.append(str(exc))
    problems += check_manifests(root)
    problems += check_trajectories(root)
    try:
        check_schemas(root, ledgers)
    except KitError as exc:
        problems.append(str(exc))
    outcomes: list[Outcome] = []
    for ledger in ledgers:
        try:
            outcomes += evaluate(ledger, root, problems)
        except KitError as exc:
            problems.append(str(exc))
    print_outcomes(outcomes)
    counts = {s: sum(1 for o in outcomes if o.status == s)
              for s in ("holds", "differs", "not run here")}
    for problem in problems:
        print(f"verify: FAIL {problem}", file=sys.stderr)
    reversed_ = [f"{o.claim}/{o.substrate}" for o in outcomes
                 if o.finding.startswith("reversed")]
    ok = not problems and counts["differs"] == 0 and not (strict_findings and reversed_)
    if reversed_:
        print(f"verify: the paper's direction does not reproduce on the stand-in substrate for "
              f"{len(reversed_)} claims (decided by the kit's own interval or record instead"
              f"{'; counted as failures: --strict-findings' if strict_findings else ''}): "
              + ", ".join(reversed_))
    print(f"verify: {len(outcomes)} claim checks: {counts['holds']} hold, {counts['differs']} "
          f"differ, {counts['not run here']} not run here; {len(reversed_)} paper findings "
          f"reversed on a stand-in; {len(problems)} failed checks; "
          f"{time.monotonic() - start:.1f} s; {'OK' if ok else 'FAILED'}")
    if json_out is not None:
        write_atomic(json_out, canonical_json({
            "ok": ok, "problems": problems, "counts": counts, "findings_reversed": reversed_,
            "strict_findings": strict_findings, "claims": [o.as_dict() for o in outcomes]}))
    return 0 if ok else 1
