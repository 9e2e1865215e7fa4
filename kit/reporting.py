"""What both studies' reports are made of: markdown and CSV tables, matplotlib figures
saved as PNG without a timestamp, and one self-contained HTML page.

    markdown    a markdown table
    csv_text    the same rows as CSV
    pyplot      matplotlib's pyplot on the Agg backend (imported on first use)
    save_png    a figure as PNG bytes written atomically (no "Software" metadata)
    html_page   a page: a heading, a provenance table, every table, every figure
"""

from __future__ import annotations

import csv
import html
import io
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


STYLE = ("body{font-family:sans-serif;max-width:1100px;margin:auto}"
         "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;"
         "padding:3px 8px;font-size:13px}")


def html_page(title: str, heading: str, provenance: dict[str, Any],
              found: dict[str, tuple[list[str], Rows]], figure_names: list[str]) -> str:
    """The HTML page: provenance, every table, every figure (by file name, beside it)."""
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
             f"</title><style>{STYLE}</style></head><body>",
             f"<h1>{html.escape(heading)}</h1><h2>Provenance</h2><table>"]
    for key, value in provenance.items():
        parts.append(f"<tr><th>{html.escape(key)}</th><td><code>{html.escape(str(value))}"
                     "</code></td></tr>")
    parts.append("</table>")
    for name, (header, rows) in found.items():
        parts.append(f"<h2>{html.escape(name)}</h2><table><tr>"
                     + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>")
        parts += ["<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                  for row in rows]
        parts.append("</table>")
    parts += [f"<h2>{html.escape(n)}</h2><img src='{html.escape(n)}' style='max-width:100%'>"
              for n in figure_names]
    return "\n".join([*parts, "</body></html>"]) + "\n"
