"""What both studies' reports are made of: markdown and CSV tables, matplotlib figures
saved as PNG without a timestamp, and one self-contained HTML page.

    markdown    a markdown table
    csv_text    the same rows as CSV
    pyplot      matplotlib's pyplot on the Agg backend (imported on first use)
    save_png    a figure as PNG bytes written atomically (no "Software" metadata)
    PageTable, PageFigure  a page's sections, each headed by what it shows
    html_page   a page: its sections in order (long tables folded), then the provenance
"""

from __future__ import annotations

import csv
import html
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.files import write_atomic

Rows = list[list[str]]


def markdown(header: list[str], rows: Rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows]) + "\n"


def csv_text(header: list[str], rows: Rows) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def write_table(out: Path, stem: str, header: list[str], rows: Rows) -> None:
    """``<out>/<stem>.md`` and ``<stem>.csv`` of one table."""
    write_atomic(out / f"{stem}.md", markdown(header, rows).encode())
    write_atomic(out / f"{stem}.csv", csv_text(header, rows).encode())


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig: Any, path: Path) -> None:
    """Write ``fig`` as PNG and close it."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120, metadata={"Software": None})
    write_atomic(path, buffer.getvalue())
    pyplot().close(fig)


# A number as the pages show it (``numbers`` keeps each on one line; the browser check
# below counts those a line break cuts): not the digit of a name such as L2 or rot5.
NUMBER = re.compile(r"(?<![A-Za-z_])[-−]?\d+(?:[.,]\d+)*(?:[eE][+-]?\d+)?%?")
# Run at the end of every page: marks the page for the browser test (``data-overflow``,
# whether the page is wider than the window; ``data-ready``, that the page's script ran;
# on the root element ``data-split``, how many numbers in table cells a line break cuts).
MEASURE = ("<script>var d=document.documentElement;document.body.dataset.overflow="
           "d.scrollWidth>d.clientWidth?'yes':'no';var s=0;document.querySelectorAll('td')"
           ".forEach(function(c){var w=document.createTreeWalker(c,4),t,m,r;while((t=w."
           f"nextNode())){{var e=/{NUMBER.pattern}/g;while((m=e.exec(t.data))){{"
           "r=document.createRange();r.setStart(t,m.index);r.setEnd(t,m.index+m[0].length);"
           "if(r.getClientRects().length>1)s++;}}});d.dataset.split=s;"
           "document.body.dataset.ready='yes';</script>")
# A number in a cell never breaks (``numbers``: each in a span of class n); a word breaks
# only where the table would not fit the page otherwise.
STYLE = ("body{font-family:sans-serif;max-width:1100px;margin:auto;padding:0 8px}"
         "table{border-collapse:collapse;margin:1em 0;max-width:100%}td,th{border:1px solid "
         "#ccc;padding:3px 6px;font-size:13px;overflow-wrap:anywhere;word-break:break-word}"
         "span.n{white-space:nowrap}img{max-width:100%}p.note{color:#444}"
         "code{overflow-wrap:anywhere}p.nav{font-size:13px}summary{cursor:pointer;margin:.5em 0}")


def numbers(text: str) -> str:
    """``text`` escaped for HTML, each number in it (``NUMBER``) kept on one line."""
    parts, at = [], 0
    for found in NUMBER.finditer(text):
        parts += [html.escape(text[at:found.start()]),
                  f"<span class='n'>{html.escape(found.group())}</span>"]
        at = found.end()
    return "".join([*parts, html.escape(text[at:])])
# A table longer than this is folded (``<details>``), so the figures stay in view.
FOLD_ROWS = 25


@dataclass(frozen=True)
class PageTable:
    """A table of the page: what it shows (the heading), its header and rows of strings."""

    heading: str
    header: list[str]
    rows: Rows
    note: str = ""


@dataclass(frozen=True)
class PageFigure:
    """A figure of the page: what it shows (the heading) and its PNG file beside the page."""

    heading: str
    file: str
    note: str = ""


def _note(note: str) -> list[str]:
    return [f"<p class='note'>{html.escape(note)}</p>"] if note else []


def _table(table: PageTable) -> list[str]:
    cells = [f"<table><tr>{''.join(f'<th>{html.escape(h)}</th>' for h in table.header)}</tr>"]
    cells += ["<tr>" + "".join(f"<td>{numbers(c)}</td>" for c in row) + "</tr>"
              for row in table.rows]
    cells.append("</table>")
    if len(table.rows) > FOLD_ROWS:
        cells = [f"<details><summary>show the {len(table.rows)} rows</summary>", *cells,
                 "</details>"]
    return [f"<h2>{html.escape(table.heading)}</h2>", *_note(table.note), *cells]


def _figure(figure: PageFigure) -> list[str]:
    return [f"<h2>{html.escape(figure.heading)}</h2>", *_note(figure.note),
            f"<img src='{html.escape(figure.file)}' alt='{html.escape(figure.heading)}'>"]


def html_page(title: str, heading: str, provenance: dict[str, Any],
              sections: Sequence[PageTable | PageFigure]) -> str:
    """The HTML page: the sections in order (each headed by what it shows; a table of
    over FOLD_ROWS rows folded), then the provenance."""
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
             f"</title><style>{STYLE}</style></head><body>",
             f"<h1>{html.escape(heading)}</h1>"]
    for section in sections:
        parts += _table(section) if isinstance(section, PageTable) else _figure(section)
    parts.append("<h2>Provenance</h2><table>")
    for key, value in provenance.items():
        parts.append(f"<tr><th>{html.escape(key)}</th><td><code>{html.escape(str(value))}"
                     "</code></td></tr>")
    return "\n".join([*parts, f"</table>{MEASURE}</body></html>"]) + "\n"


# What each study's figures are decided under, as the claims page decides them.
RULES = {
    "drift": ("the drift protocol as the evidence's own copy records it "
              "(score/protocol.yaml); the claims page decides every number by "
              "claims/drift.yaml"),
    "sciml": ("the MR cards of kit/sciml/cards as the evidence's verdicts name them; the "
              "claims page decides every number by claims/sciml.yaml"),
}


def rules_shown(study: str, protocols: Path | None = None) -> str:
    """Which rule or revision a study's report figures use (``RULES``, or, for a study with
    frozen hypotheses, from ``kit/protocols/<study>.revisions.yaml``: the first commit, the
    revisions and whether any came after the study's evidence existed), in the claims
    page's terms."""
    if study in RULES:
        return RULES[study]
    from kit.files import read_yaml
    from kit.paths import ROOT

    record = (protocols or ROOT / "kit" / "protocols") / f"{study}.revisions.yaml"
    revisions = read_yaml(record)
    first, later = revisions["first_committed"]["commit"], revisions["revisions"]
    after = [r for r in later if r.get("evidence_existed")]
    head = f"kit/protocols/{study}.yaml, first committed in {first}"
    if not later:
        return f"{head} and never revised: the figures and the claims page use it"
    told = f"{'one revision' if len(later) == 1 else f'{len(later)} revisions'} ({record.name})"
    if not after:
        return (f"{head}; {told}, none after its evidence existed: the figures and the claims "
                "page use the protocol the evidence records")
    return (f"{head}; {told}, {len(after)} after its evidence existed: the claims page "
            "decides under the rules as first committed, the figures show the evidence as "
            "recorded")
