"""How one claim shows on the claims page (``kit.claims.page``): its status badge, the kit's
number in the paper's printed form, its evidence links, what a cell opens to (the rule,
the thresholds' sources, the note, the evidence and the command), its row, and the
paper's tables drawn from the claims' cells (whole, as printed, where
``claims/papers/tables.yaml`` transcribes them)."""

from __future__ import annotations

import html
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from kit.claims.page_style import STATUSES, TABLE_COLUMNS, UNKNOWN
from kit.claims.printed import printed
from kit.errors import KitError
from kit.papers import load_tables


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _badge(status: str, extra: str = "") -> str:
    background, color = STATUSES.get(status, UNKNOWN)[:2]
    return (f'<span class="badge{extra}" style="background:{background};color:{color}">'
            f"{_e(status)}</span>")


def _number(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def effect_text(effect: dict[str, Any] | None, status: str = "") -> str:
    """``kit vs paper (ratio x)``, or empty without an effect; no ratio on a ``described``
    row (the numbers measure different things) or a ``by design`` one."""
    if not effect:
        return ""
    text = f"{_number(effect['kit'])} vs {_number(effect['paper'])}"
    if effect.get("ratio") is not None and status not in ("described", "by design"):
        text += f" (ratio {_number(effect['ratio'])}x)"
    return text


def kit_number(claim: dict[str, Any]) -> str:
    """The kit's number in the paper's printed form (``kit.claims.printed``: the printed
    decimals and unit, a pair or k/n with the kit's second number, an interval as an
    interval), the full value on hover; else the recomputed text."""
    effect, shown = claim.get("effect") or {}, _e(claim.get("recomputed", ""))
    form = claim.get("printed") if "printed" in claim else printed(
        claim.get("published", ""), effect.get("paper"), effect.get("kit"),
        claim.get("halves"))
    if form is None:
        return shown
    full = effect.get("kit")
    title = repr(float(full)) if isinstance(full, (int, float)) and not isinstance(
        full, bool) else claim.get("recomputed", "")
    return f'<span title="{_e(title)}">{_e(form)}</span>'


def _ordered(items: Iterable[str]) -> list[str]:
    """Distinct items in order of first appearance."""
    return list(dict.fromkeys(items))


def _evidence(claim: dict[str, Any], page_dir: Path, root: Path) -> str:
    """Links, relative to the page's folder, to the evidence files that exist; a file the
    ledger names that is not shipped is named without a link."""
    folder = claim.get("evidence_folder", "")
    found = []
    for name in claim.get("evidence") or []:
        target = root / folder / name
        if target.is_file():
            href = quote(Path(os.path.relpath(target, page_dir)).as_posix(), safe="/.-_~")
            found.append(f'<a href="{_e(href)}">{_e(name)}</a>')
        else:
            found.append(f'<span class="note">{_e(name)} (not shipped)</span>')
    return "".join(found)


def _attrs(claim: dict[str, Any]) -> str:
    return (f'id="{_e(claim["claim"])}-{_e(claim["substrate"])}" class="claim" '
            f'data-claim="{_e(claim["claim"])}" data-study="{_e(claim["study"])}" '
            f'data-status="{_e(claim.get("status", ""))}"')


def _explain(claim: dict[str, Any], page_dir: Path, root: Path) -> str:
    """What a cell opens to (a click, Enter, or keyboard focus on its summary): the rule
    and what it compared, where each threshold comes from, the note, the evidence (linked)
    and the command that prints the same."""
    items = [("rule", _e(claim.get("rule", ""))),
             *(("threshold from", _e(t)) for t in claim.get("thresholds") or []),
             ("note", _e(claim.get("note") or "")),
             ("evidence", _evidence(claim, page_dir, root)),
             ("the same in a terminal",
              f"<code>python -m kit verify --claim {_e(claim['claim'])}</code>")]
    return '<dl class="explain">' + "".join(
        f"<dt>{name}</dt><dd>{text}</dd>" for name, text in items if text) + "</dl>"


def _status_cell(claim: dict[str, Any]) -> str:
    note = claim.get("note") or ""
    sources = "".join(f'<div class="note">threshold from {_e(t)}</div>'
                      for t in claim.get("thresholds") or [])
    why = "why" if claim.get("status") == "not run here" else "the rule's reason"
    command = f"<code>python -m kit verify --claim {_e(claim['claim'])}</code>"
    return (_badge(claim.get("status", "")) + sources
            + f'<details class="note"><summary>{why if note else "the command"}</summary>'
            + (f"{_e(note)}<br>" if note else "") + f"the same in a terminal: {command}"
            + "</details>")


COLUMNS = ("claim", "statement", "substrate", "paper printed", "kit", "rule", "status",
           "evidence")
COLGROUP = ('<colgroup><col class="id"><col><col class="sub"><col><col><col>'
            '<col class="st"><col class="ev"></colgroup>')


def _row(claim: dict[str, Any], page_dir: Path, root: Path) -> str:
    effect = effect_text(claim.get("effect"), claim.get("status", ""))
    cells = [f'<a href="#{_e(claim["claim"])}-{_e(claim["substrate"])}">'
             f'{_e(claim["claim"])}</a>', _e(claim.get("statement", "")),
             _e(claim["substrate"]), _e(claim.get("published", "")),
             kit_number(claim) + (f'<div class="note">{_e(effect)}</div>' if effect else ""),
             _e(claim.get("rule", "")), _status_cell(claim),
             _evidence(claim, page_dir, root)]
    classes = [""] * (len(cells) - 1) + [' class="evidence"']
    return (f"<tr {_attrs(claim)}>"
            + "".join(f"<td{c}>{cell}</td>" for c, cell in zip(classes, cells, strict=True))
            + "</tr>")


def _rows(claims: list[dict[str, Any]], page_dir: Path, root: Path) -> str:
    return (f"<table>{COLGROUP}<tr>" + "".join(f"<th>{_e(c)}</th>" for c in COLUMNS) + "</tr>"
            + "".join(_row(c, page_dir, root) for c in claims) + "</table>")


def _claim_number(claim: str) -> tuple[str, int, str]:
    prefix, _, rest = claim.partition("-")
    digits = "".join(ch for ch in rest if ch.isdigit())
    return prefix, int(digits or 0), rest


def _entries(claims: list[dict[str, Any]], page_dir: Path, root: Path) -> str:
    """One cell's claims: each claim's printed number, then per substrate the kit's (in the
    paper's printed form) with its status, opening to why (``_explain``)."""
    entries = []
    for claim in _ordered(c["claim"] for c in claims):
        mine = [c for c in claims if c["claim"] == claim]
        entries.append(f'<div class="note">{_e(claim)}: paper '
                       f'{_e(mine[0].get("published", ""))}</div>')
        entries += [f'<div {_attrs(c)}><details class="entry"><summary>'
                    f'{_e(c["substrate"] if c["substrate"] != "-" else "no substrate")}'
                    f": {kit_number(c)} {_badge(c.get('status', ''))}</summary>"
                    f"{_explain(c, page_dir, root)}</details></div>" for c in mine]
    return "".join(entries)


def _printed_table(name: str, printed: dict[str, Any], claims: list[dict[str, Any]],
                   page_dir: Path, root: Path) -> str:
    """A table as the paper printed it (``kit.papers``): every column and row label,
    each cell's printed text, the kit's numbers for that cell beneath it."""
    keys = printed.get("column_keys", {})
    parts = [f"<h4>{_e(name)}, as printed</h4><p class=\"note\">{_e(printed['caption'])}</p>"
             "<table><tr>" + "".join(f"<th>{_e(col)}</th>" for col in printed["columns"])
             + "</tr>"]
    for row in printed["rows"]:
        cells = [f"<th>{_e(row['label'])}</th>"]
        for column, text in zip(printed["columns"][1:], row["cells"], strict=True):
            here = [c for c in claims if c["cell"]["row"] in row["keys"]
                    and c["cell"]["column"] == keys.get(column, column)]
            cells.append(f'<td class="cell"><div class="printed">{_e(text)}</div>'
                         f"{_entries(here, page_dir, root)}</td>")
        parts.append(f"<tr>{''.join(cells)}</tr>")
    parts.append("</table>")
    return "".join(parts)


def _table(name: str, claims: list[dict[str, Any]], page_dir: Path, root: Path) -> str:
    """One printed table in the paper's rows and columns (rows in the inventory's order, which
    is the paper's; columns as ``TABLE_COLUMNS`` lists them): in each cell every claim's
    printed number and, per substrate, the kit's with its status. Drawn whole, as printed,
    when the transcription holds it (``_printed_table``)."""
    try:
        printed = load_tables(root).get((claims[0]["study"], name))
    except KitError:  # verify names the problem; the page falls back to the claims' cells
        printed = None
    if printed is not None:
        return _printed_table(name, printed, claims, page_dir, root)
    first: dict[str, str] = {}
    for c in sorted(claims, key=lambda c: _claim_number(c["claim"])):
        first.setdefault(c["cell"]["row"], c["claim"])
    order = TABLE_COLUMNS.get(name, ())
    found = _ordered(c["cell"]["column"] for c in claims)
    columns = [c for c in order if c in found] + [c for c in found if c not in order]
    parts = [f"<h4>{_e(name)}, in the paper's layout</h4><table><tr><th></th>"
             + "".join(f"<th>{_e(col)}</th>" for col in columns) + "</tr>"]
    for row in first:
        cells = ['<td class="cell">' + _entries(
            [c for c in claims if (c["cell"]["row"], c["cell"]["column"]) == (row, column)],
            page_dir, root) + "</td>" for column in columns]
        parts.append(f"<tr><th>{_e(row)}</th>{''.join(cells)}</tr>")
    parts.append("</table>")
    return "".join(parts)
