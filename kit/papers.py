"""What the papers printed, as the kit holds it, read with no study's code, so that the
studies' reports (below ``kit.claims`` in the import order) show the paper beside the kit
from the same files verify decides on.

The claim ledgers (``claims/<study>.yaml``, ``read_ledger``): schema-checked and each claim
id once; ``kit.claims.ledger.load_ledger`` adds the binding of every recompute function.

The papers' printed tables, whole (``claims/papers/tables.yaml``, schema
``printed_tables.schema.json``, under the evidence root): every column header and row
label as printed and each cell's printed text, transcribed from each paper's text, with
the ledger's row keys and column names that place the kit's numbers in them. The claims
page draws each table a ledger's ``cell.table`` names in this form, the kit's numbers
beneath the printed ones; a printed row no claim reaches is drawn with its printed text
alone, so the table reads as the paper printed it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kit import schema
from kit.errors import KitError
from kit.files import read_yaml
from kit.paths import ROOT

FILE = Path("claims") / "papers" / "tables.yaml"


def read_ledger(path: Path) -> dict[str, Any]:
    """A claim ledger, read and validated: its schema and no claim id twice (KitError naming
    the file otherwise). Flat YAML aliases are kept (``yaml.safe_dump`` writes a shared list
    as one), bombs refused (``kit.files.read_yaml``)."""
    ledger = read_yaml(path, aliases=True)
    schema.check(ledger, "claim_ledger.schema.json", path)
    ids = [c["id"] for c in ledger["claims"]]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise KitError(f"{path}: duplicate claim ids {duplicates}")
    return ledger  # type: ignore[no-any-return]


def load_tables(root: Path = ROOT) -> dict[tuple[str, str], dict[str, Any]]:
    """Every printed table by (study, table name), checked: its schema, each row's cell
    count, and no row key twice in one table (KitError naming the file otherwise)."""
    path = root / FILE
    record = read_yaml(path)
    schema.check(record, "printed_tables.schema.json", path)
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for table in record["tables"]:
        where = f"{path}: {table['study']} {table['table']!r}"
        keys = [key for row in table["rows"] for key in row["keys"]]
        if len(set(keys)) != len(keys):
            raise KitError(f"{where}: a row key is listed twice")
        for row in table["rows"]:
            if len(row["cells"]) != len(table["columns"]) - 1:
                raise KitError(f"{where}: row {row['label']!r} has {len(row['cells'])} cells "
                               f"for {len(table['columns']) - 1} columns")
        if (table["study"], table["table"]) in found:
            raise KitError(f"{where}: transcribed twice")
        found[(table["study"], table["table"])] = table
    return found


def problems(root: Path, ledgers: list[dict[str, Any]]) -> list[str]:
    """verify's check: the file validates, and every cell a ledger claim names lies in
    its printed table (a row key and a column the transcription holds)."""
    cells = any(c.get("cell") for ledger in ledgers for c in ledger["claims"])
    if not cells and not (root / FILE).exists():
        return []  # a checkout whose ledgers place nothing in a printed table
    try:
        tables = load_tables(root)
    except KitError as exc:
        return [str(exc)]
    found = []
    for ledger in ledgers:
        for claim in ledger["claims"]:
            cell = claim.get("cell")
            if not cell:
                continue
            table = tables.get((ledger["study"], cell["table"]))
            columns = {table.get("column_keys", {}).get(c, c) for c in table["columns"]} \
                if table else set()
            keys = {k for row in table["rows"] for k in row["keys"]} if table else set()
            if cell["row"] not in keys or cell["column"] not in columns:
                found.append(f"{root / FILE}: {claim['id']}'s cell ({cell['table']}, "
                             f"{cell['row']}, {cell['column']}) is in no printed table's "
                             "row and column")
    return found
