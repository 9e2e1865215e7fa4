"""The papers' printed tables (``kit.papers``): the shipped transcription validates
and places every ledger cell; a cell in no printed row, a row of the wrong width and a key
listed twice are named; the claims page draws a transcribed table whole, every printed
column and row label with the kit's numbers beneath."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from kit.claims.ledger import load_ledger
from kit.claims.page import write_page
from kit.errors import KitError
from kit.papers import FILE, load_tables, problems
from kit.paths import ROOT

LEDGERS = [load_ledger(ROOT / "claims" / f"{study}.yaml") for study in ("drift", "sciml")]


def test_the_shipped_transcription_places_every_ledger_cell() -> None:
    tables = load_tables()
    named = {(ledger["study"], c["cell"]["table"]) for ledger in LEDGERS
             for c in ledger["claims"] if c.get("cell")}
    assert named <= set(tables)
    assert tables[("sciml", "Section 5.2 MR-card-to-verdict map")]["columns"] == [
        "MR card", "Rubric decision", "Runtime verdict", "Interpretation boundary"]
    assert tables[("drift", "Table 2")]["columns"][1] == "Inputs used"
    assert "5°, bilinear" in [r["label"] for r in tables[("drift", "Table 4")]["rows"]]
    assert problems(ROOT, LEDGERS) == []


def _copy(tmp_path: Path) -> tuple[Path, dict[str, object]]:
    (tmp_path / FILE).parent.mkdir(parents=True)
    shutil.copy(ROOT / FILE, tmp_path / FILE)
    return tmp_path, yaml.safe_load((tmp_path / FILE).read_text())


def test_a_cell_in_no_printed_row_or_a_bad_row_is_named(tmp_path: Path) -> None:
    root, record = _copy(tmp_path)
    table = record["tables"][0]  # type: ignore[index]
    table["rows"][0]["keys"] = []
    (root / FILE).write_text(yaml.safe_dump(record))
    found = problems(root, LEDGERS)
    assert found
    assert all("is in no printed table's row and column" in p for p in found)
    table["rows"][0]["cells"] = table["rows"][0]["cells"][:-1]
    (root / FILE).write_text(yaml.safe_dump(record))
    with pytest.raises(KitError, match="has 3 cells for 4 columns"):
        load_tables(root)
    table["rows"][0]["cells"].append("x")
    table["rows"][1]["keys"] = list(table["rows"][2]["keys"])
    (root / FILE).write_text(yaml.safe_dump(record))
    with pytest.raises(KitError, match="a row key is listed twice"):
        load_tables(root)


def test_the_page_draws_a_transcribed_table_whole(tmp_path: Path) -> None:
    claim = {"claim": "B-016", "study": "sciml", "substrate": "kit", "status": "by design",
             "section": "Section 5.2", "statement": "s", "published": "pass sanity",
             "recomputed": "0", "rule": "r", "note": "", "effect": None, "evidence": [],
             "evidence_folder": "", "thresholds": [],
             "cell": {"table": "Section 5.2 MR-card-to-verdict map",
                      "row": "Node permutation equivariance", "column": "Runtime verdict"}}
    report = {"ok": True, "problems": [], "claims": [claim], "counts": {}, "root": "0" * 64}
    text = write_page(report, tmp_path / "page.html", ROOT).read_text()
    assert "Section 5.2 MR-card-to-verdict map, as printed" in text
    for printed in ("Interpretation boundary", "Retained as representation MR",
                    "PointMLP cylinder workflow", "Supports one executable representation"):
        assert printed in text
