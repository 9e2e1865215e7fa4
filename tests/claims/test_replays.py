"""The replay records the evidence ships (``kit.claims.replays``): a record written by a
replay is split per study, schema-checked and filed under its machine by ``ship
--replay-record``; verify validates every shipped record and the claims page draws the
matrix of CPUs; a record that is not one, or is filed under another machine, is refused."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from kit.claims.coverage import LEFT, check_manifests
from kit.claims.fresh import RECORD, verify_fresh
from kit.claims.page import page
from kit.claims.replays import REPLAYS, load_records, machine_id, matrix, ship_record
from kit.errors import KitError
from kit.paths import ROOT
from tests.conftest import dead_pid

CORPUS = "claims/corpus/evidence/kit"


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The committed claims and manifests: what ship --replay-record writes into."""
    root = tmp_path / "checkout"
    for name in ("claims", "manifests"):
        shutil.copytree(ROOT / name, root / name)
    shutil.rmtree(root / REPLAYS, ignore_errors=True)
    return root


@pytest.fixture
def record(tmp_path: Path) -> Path:
    """The replay record of this machine for the corpus, replayed as shipped."""
    fresh = tmp_path / "fresh"
    shutil.copytree(ROOT / CORPUS, fresh / CORPUS)
    assert verify_fresh(fresh, out=tmp_path / "page.html", models={}) == 0
    return fresh / RECORD


def test_a_record_ships_under_its_machine_and_is_drawn(checkout: Path, record: Path) -> None:
    written = ship_record(record, checkout)
    machine = json.loads(record.read_text())["machine"]
    assert [p.relative_to(checkout).as_posix() for p in written] == [
        f"claims/replays/{machine_id(machine)}/corpus--kit.json"]
    assert check_manifests(checkout) == []  # listed in the evidence manifest: under the root
    records, problems = load_records(checkout)
    assert problems == []
    assert [r["study"] for r in records] == ["corpus/kit"]
    header, rows = matrix(records, checkout)
    assert header == ["CPU", "ISA (kernel-picking flags)", "corpus/kit"]
    assert rows[0][0].startswith(machine["cpu"])
    counts = records[0]["files"]["counts"]
    # "(the CPU that made this evidence)" where this machine made it
    assert re.match(rf"holds( \(the CPU that made this evidence\))?: {counts['identical']} "
                    "identical, 0 within, 0 differ; 0 status changes, 0 value changes",
                    rows[0][2]), rows[0][2]
    html = page({"ok": True, "replays": {"header": header, "rows": rows}}, checkout)
    assert 'id="replays"' in html
    assert f"{counts['identical']} identical, 0 within" in html
    # shipping the same study from the same CPU again replaces its part, nothing more
    ship_record(record, checkout)
    assert len(list((checkout / REPLAYS).rglob("*.json"))) == 1


def test_a_record_of_an_earlier_evidence_run_says_so(checkout: Path, record: Path) -> None:
    """A record compared the run manifest it names (``against``); once the study's evidence
    is re-made (another run manifest), the matrix says the record is of an earlier run."""
    ship_record(record, checkout)
    records, _ = load_records(checkout)
    assert "earlier evidence run" not in matrix(records, checkout)[1][0][2]
    manifest = checkout / CORPUS / "run-manifest.json"
    listing = json.loads(manifest.read_text())
    listing["re-made"] = True
    manifest.write_text(json.dumps(listing))
    row = matrix(records, checkout)[1][0]
    assert f"against an earlier evidence run, run manifest {records[0]['against'][:12]}" \
        in row[2], row


def test_a_record_that_is_not_one_is_refused(checkout: Path, record: Path,
                                             tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"studies": {}}))
    with pytest.raises(KitError, match="not a replay record"):
        ship_record(bad, checkout)
    broken = json.loads(record.read_text())
    broken["studies"]["corpus/kit"]["files"]["counts"]["differs"] = -1
    bad.write_text(json.dumps(broken))
    with pytest.raises(KitError, match="study corpus/kit"):
        ship_record(bad, checkout)
    assert not (checkout / REPLAYS).exists()


def test_a_record_filed_under_another_machine_is_a_problem(checkout: Path, record: Path
                                                           ) -> None:
    [written] = ship_record(record, checkout)
    moved = written.parent.with_name("another-cpu-000000000000")
    written.parent.rename(moved)
    records, problems = load_records(checkout)
    assert records == []
    assert "filed under the wrong name" in problems[0]


def test_every_shipped_record_validates_and_its_verdict_is_recounted(
        checkout: Path, record: Path) -> None:
    """The shipped records validate and each verdict follows from its own lists; a record
    whose verdict or counts were edited alone is a problem naming it."""
    records, problems = load_records()
    assert problems == []
    assert records
    ship_record(record, checkout)
    [part] = (checkout / REPLAYS).rglob("*.json")
    data = json.loads(part.read_text())
    data["files"]["counts"]["differs"] = 1
    part.write_text(json.dumps(data))
    found = load_records(checkout)[1]
    assert "files/counts/differs says 1, its verdicts list 0" in found[0]
    assert "holds says True, its verdicts and status diff give" not in found[0]
    data["files"]["counts"]["differs"] = 0
    data["holds"] = False
    part.write_text(json.dumps(data))
    assert "holds says False, its verdicts and status diff give True" in \
        load_records(checkout)[1][0]


def test_a_killed_commands_leftover_is_named_then_removed_and_a_live_ones_refused(
        checkout: Path, record: Path) -> None:
    """A staging folder a SIGKILLed ship left under claims/ is named by verify's checks and
    never hashed in; the next ship removes it (its writer is gone). A live writer's
    temporary is refused by name, nothing written."""
    evidence = checkout / "claims" / "drift" / "evidence"
    killed = evidence / f".digits.kit{dead_pid()}-k1ll3d_x.tmp"
    killed.mkdir()
    (killed / "score.json").write_text("{}")
    assert f"{killed}: {LEFT}" in check_manifests(checkout)
    live = evidence / f".digits.kit{os.getpid()}-l1v3abcd.tmp"
    live.mkdir()
    before = (checkout / "manifests" / "evidence.json").read_bytes()
    with pytest.raises(KitError, match=r"\.digits\.kit[0-9]+-l1v3abcd\.tmp: left by a kit"):
        ship_record(record, checkout)
    assert (checkout / "manifests" / "evidence.json").read_bytes() == before
    assert not (checkout / REPLAYS).exists()  # refused before anything was written
    assert not killed.exists()  # the killed writer's, removed
    live.rmdir()
    ship_record(record, checkout)
    assert check_manifests(checkout) == []


def test_fresh_evidence_holding_a_link_is_refused_before_any_file_is_read(
        tmp_path: Path) -> None:
    """``verify --evidence DIR`` never follows a link out of DIR, even to the same bytes."""
    fresh = tmp_path / "fresh"
    shutil.copytree(ROOT / CORPUS, fresh / CORPUS)
    victim = sorted((fresh / CORPUS).rglob("*.json"))[0]
    outside = tmp_path / "outside.json"
    outside.write_bytes(victim.read_bytes())
    victim.unlink()
    victim.symlink_to(outside)
    with pytest.raises(KitError, match=rf"{victim.name}: a symbolic link \(to {outside}\)"):
        verify_fresh(fresh, out=tmp_path / "page.html", models={})
    assert not (fresh / RECORD).exists()


def test_a_schema_replaced_by_a_same_content_link_is_a_failed_check(checkout: Path,
                                                                   tmp_path: Path) -> None:
    schemas = checkout / "kit" / "schemas"
    schemas.mkdir(parents=True)
    outside = tmp_path / "claim_ledger.schema.json"
    outside.write_bytes((ROOT / "kit" / "schemas" / "claim_ledger.schema.json").read_bytes())
    (schemas / "claim_ledger.schema.json").symlink_to(outside)
    (checkout / "locks").mkdir()
    (checkout / "locks" / "ref.lock").symlink_to(ROOT / "locks" / "ref.lock")
    found = [p for p in check_manifests(checkout) if "symbolic link" in p]
    assert [p.split(":")[0] for p in found] == [str(schemas / "claim_ledger.schema.json"),
                                                 str(checkout / "locks" / "ref.lock")]


def test_the_sciml_null_is_judged_beside_its_study_and_its_absence_named(
        tmp_path: Path) -> None:
    """Every SciML row is decided against the null subjects too, so a fresh SciML folder
    without them is refused with the commands that make them, and their files are judged
    as ``null/FILE`` (kit.claims.fresh.null_judged)."""
    import yaml

    from kit.claims.fresh import null_judged
    from kit.tolerance import load_bounds

    spec = yaml.safe_load((ROOT / "claims" / "sciml.yaml").read_text())["substrates"]["kit"]
    null = spec["null_evidence"]
    fresh = tmp_path / "fresh"
    with pytest.raises(KitError, match=r"missing; every sciml row is decided against the "
                                       r"null subjects too: run python -m kit sciml --models "
                                       r"null"):
        null_judged(fresh, ROOT, spec, "sciml", load_bounds(), False)
    shutil.copytree(ROOT / null, fresh / null)
    assert {v.verdict for v in null_judged(fresh, ROOT, spec, "sciml", load_bounds(),
                                           False)} == {"identical"}
    record = json.loads((fresh / null / "fno.json").read_text())
    (fresh / null / "fno.json").write_text(json.dumps({**record, "moved": 1}))
    moved = [v for v in null_judged(fresh, ROOT, spec, "sciml", load_bounds(), False)
             if v.verdict != "identical"]
    assert [(v.file, v.verdict) for v in moved] == [("null/fno.json", "differs")]


def test_a_record_that_does_not_name_its_models_says_so_where_there_are_models() -> None:
    """verify --evidence alone records no models: the matrix must not read "no trained
    models" for a substrate whose runs train or fetch them (kit.claims.replays.TRAINED,
    held to reproduce-all's steps)."""
    from kit.claims.replays import TRAINED, _models
    from kit.reproduce.command import JUDGED_AS, MODEL_EVIDENCE

    assert set(TRAINED) == {JUDGED_AS[step] for step in MODEL_EVIDENCE}
    assert _models({"models": None, "study": "sciml/kit"}).startswith("its models not named")
    assert _models({"models": None, "study": "corpus/kit"}) == "no trained models"
    assert _models({"models": "shipped", "study": "sciml/kit"}) == "on the shipped weights"


def test_a_users_files_at_the_records_and_the_pages_names_are_refused_and_kept(
        tmp_path: Path, record: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``verify --evidence DIR`` replaces its own record and page, nothing of the user's:
    a file of that name the kit did not write is refused by name and left as it was."""
    import kit.claims.fresh

    fresh, report = record.parent, json.loads(record.read_text())
    monkeypatch.setattr(kit.claims.fresh, "fresh_report", lambda *a, **k: report)  # as made
    assert verify_fresh(fresh, out=tmp_path / "page.html", models={}) == 0  # its own: again
    record.write_text("my notes\n")
    with pytest.raises(KitError, match=rf"{record}: a file the kit did not write"):
        verify_fresh(fresh, out=tmp_path / "page.html", models={})
    assert record.read_text() == "my notes\n"
    record.unlink()
    page = tmp_path / "mine.html"
    page.write_text("<title>my page</title>\n")
    with pytest.raises(KitError, match=rf"{page}: a file the kit did not write"):
        verify_fresh(fresh, out=page, models={})
    assert page.read_text() == "<title>my page</title>\n"
