"""The claims page: one self-contained HTML file from verify's report, shaped like the papers.

``write_page(report, path, root)``: a header (verdict, roots, problems), a table of contents,
the counts, a legend, filters by study and status and a search by claim id (plain
JavaScript, no external resource: it works from ``file://``; ``?status=differs``,
``?study=drift``, ``?claim=A-05`` preset them, and the page marks ``data-ready`` and
``data-overflow`` on its body for the browser test); then each paper in its own order of
sections (``SECTION_ORDER``) and the studies beyond the papers. A number printed in a paper's
table (the ledger's ``cell``) sits in that table, in the paper's rows and columns; the rest
are rows, ``not run here`` folded per section. Each claim x substrate has one element id
(``#A-052-digits``); the kit's number is shown at the paper's printed precision (full value
on hover); evidence links are relative to the page and only to files that exist.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from kit.claims.page_cells import (
    _badge,
    _e,
    _ordered,
    _rows,
    _table,
)
from kit.claims.page_style import (
    CSS,
    SCRIPT,
    SECTION_ORDER,
    STATUSES,
    STUDY_ORDER,
    STUDY_TITLES,
)
from kit.files import write_atomic
from kit.owned import write_named_file
from kit.paths import ROOT


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60]


def ordered_sections(study: str, sections: Iterable[str]) -> list[str]:
    """A study's sections in its paper's order (``SECTION_ORDER``), then the rest."""
    order = SECTION_ORDER.get(study, ())
    found = _ordered(sections)

    def key(section: str) -> tuple[int, int]:
        ranks = [i for i, prefix in enumerate(order) if section.startswith(prefix)]
        # the longest matching prefix wins: "Section 5.10" is not "Section 5.1"
        best = max(ranks, key=lambda i: len(order[i])) if ranks else len(order)
        return best, found.index(section)

    return sorted(found, key=key)


def _header(report: dict[str, Any]) -> list[str]:
    verdict = "ok" if report.get("ok") else "failed"
    colour = "#1e7b34" if report.get("ok") else "#c62828"
    roots = report.get("roots") or {}
    parts = ["<h1>Claims: what the kit reproduced</h1>",
             f"<p>Verdict: <span class=\"badge verdict\" style=\"background:{colour};"
             f"color:#fff\">{verdict}</span> &nbsp; root "
             f"<code>{_e(report.get('root', ''))}</code>"
             + (" &nbsp; (strict findings: a reversed direction fails)"
                if report.get("strict_findings") else "") + "</p>"]
    if roots:
        parts.append(f"<p class=\"note\">evidence root <code>{_e(roots.get('evidence'))}"
                     f"</code>; code root <code>{_e(roots.get('code'))}</code></p>")
    problems = report.get("problems") or []
    if problems:
        parts.append('<div class="problems"><h2>Problems</h2><ul>'
                     + "".join(f"<li>{_e(p)}</li>" for p in problems) + "</ul></div>")
    return parts


# Pages other commands write beside the claims page, linked when present.
DEFAULT_PAGE = Path("runs") / "verify" / "index.html"
LINKS = ("<!--kit:linked-->", "<!--/kit:linked-->")  # what relink rewrites
# The page's mark: ``verify --page FILE`` replaces a file only when it carries it.
GENERATOR = '<meta name="generator" content="python -m kit verify">'
LINKED = (("runs/reports/index.html", "every study's report (python -m kit reports)"),
          ("runs/replay/index.html", "the last replay against the shipped evidence"))


def _linked(page_dir: Path, root: Path) -> list[str]:
    """Links to the kit's other pages that exist, between markers ``relink`` rewrites."""
    found = [(os.path.relpath(root / name, page_dir), text) for name, text in LINKED
             if (root / name).is_file()]
    return [LINKS[0] + " · ".join(f'<a href="{_e(quote(Path(h).as_posix()))}">{_e(t)}</a>'
                                  for h, t in found) + LINKS[1]]


def relink(root: Path = ROOT) -> None:
    """Link the kit's default claims page to the pages that exist now (``kit reports``
    and a replay call it after writing theirs), so the page links the reports whichever
    command ran first; a page the kit did not write, or none, is left alone."""
    path = root / DEFAULT_PAGE
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return
    start, end = text.find(LINKS[0]), text.find(LINKS[1])
    if GENERATOR not in text[:1024] or start < 0 or end < start:
        return
    fresh = "".join(_linked(path.resolve().parent, root.resolve()))
    write_atomic(path, (text[:start] + fresh + text[end + len(LINKS[1]):]).encode())


def _studies_in(report: dict[str, Any]) -> list[str]:
    present = _ordered(c["study"] for c in report.get("claims", []))
    return [s for s in STUDY_ORDER if s in present] + [s for s in present
                                                       if s not in STUDY_ORDER]


def _counts(report: dict[str, Any]) -> list[str]:
    counts: dict[str, dict[str, int]] = report.get("counts", {})
    statuses = _ordered([*STATUSES, *(s for c in counts.values() for s in c)])
    parts = ['<h2 id="counts">Counts</h2><table class="counts"><tr><th>study</th>'
             + "".join(f"<th>{_badge(s)}</th>" for s in statuses) + "<th>all</th></tr>"]
    for study in [s for s in STUDY_ORDER if s in counts] + [s for s in counts
                                                            if s not in STUDY_ORDER]:
        row = counts[study]
        parts.append(f"<tr><th>{_e(study)}</th>"
                     + "".join(f'<td class="num">{_e(row.get(s, 0))}</td>' for s in statuses)
                     + f'<td class="num">{_e(sum(row.values()))}</td></tr>')
    parts.append("</table>")
    return parts


def _replays(report: dict[str, Any]) -> list[str]:
    """The matrix of CPUs the kit has replayed on (``kit.claims.replays``)."""
    replays = report.get("replays") or {"header": [], "rows": []}
    parts = ['<h2 id="replays">Where the kit has replayed</h2>',
             '<p class="note">Each row is one CPU on which reproduce-all ran a study and '
             "compared it with the shipped evidence (claims/replays/, under the root); each "
             "cell is that study's verdict there: files identical, within their measured "
             "tolerance, or differing, and the claims whose status or value changed.</p>"]
    if not replays["rows"]:
        return [*parts, "<p>No replay record is shipped.</p>"]
    parts.append('<table class="replays"><tr>'
                 + "".join(f"<th>{_e(h)}</th>" for h in replays["header"]) + "</tr>")
    parts += ["<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>"
              for row in replays["rows"]]
    return [*parts, "</table>"]


def _arithmetic(report: dict[str, Any]) -> list[str]:
    """Every place a paper disagrees with itself (``kit.claims.arithmetic``), both lines."""
    checks = report.get("arithmetic") or []
    wrong = [c for c in checks if not c["consistent"]]
    parts = ['<h2 id="arithmetic">Where the papers disagree with themselves</h2>',
             f'<p class="note">{len(checks)} printed numbers that follow from other printed '
             "numbers of the same paper were recomputed from those printed inputs, within "
             "their printed rounding (claims/papers/arithmetic.yaml); "
             f"{len(wrong)} disagree. A ledger row a check names is graded on the numbers, "
             "not on the prose, and its note says so.</p>"]
    if not wrong:
        return parts
    parts.append('<table class="replays"><tr><th>check</th><th>paper, line</th><th>printed'
                 "</th><th>its printed inputs (lines)</th><th>they give</th><th>row</th></tr>")
    parts += [f"<tr><td>{_e(c['id'])}</td><td>{_e(c['paper'])}, {_e(c['line'])}</td>"
              f"<td>{_e(c['printed'])} ({_e(c['expected'])})</td><td>{_e(c['inputs'])}</td>"
              f"<td class=\"num\">{_e(c['recomputed'])}</td><td>{_e(c['claim'] or '-')}</td>"
              "</tr>" for c in wrong]
    return [*parts, "</table>"]


def _legend() -> list[str]:
    return (['<h2 id="legend">What each status means</h2><ul class="legend">']
            + [f"<li>{_badge(status)} {_e(sentence)}</li>"
               for status, (_, _, sentence) in STATUSES.items()]
            + ["</ul>"])


def _toc(report: dict[str, Any]) -> list[str]:
    claims = report.get("claims", [])
    parts = ['<nav class="toc"><h2>Contents</h2><ul>',
             '<li><a href="#counts">Counts</a> · <a href="#legend">Statuses</a> · '
             '<a href="#replays">Replays by CPU</a> · '
             '<a href="#arithmetic">The papers against themselves</a></li>']
    for study in _studies_in(report):
        mine = [c for c in claims if c["study"] == study]
        parts.append(f'<li><a href="#study-{study}">{_e(STUDY_TITLES.get(study, study))}</a>'
                     "<ul>")
        for section in ordered_sections(study, (c.get("section", "") for c in mine)):
            parts.append(f'<li><a href="#{_section_id(study, section)}">'
                         f"{_e(section or '(no section)')}</a></li>")
        parts.append("</ul></li>")
    parts.append("</ul></nav>")
    return parts


def _section_id(study: str, section: str) -> str:
    return f"s-{study}-{_slug(section) or 'none'}"


def _filters(report: dict[str, Any]) -> list[str]:
    boxes = [f'<label><input type="checkbox" data-kind="study" value="{_e(s)}" checked> '
             f"{_e(s)}</label>" for s in _studies_in(report)]
    boxes.append(" &nbsp; ")
    boxes += [f'<label><input type="checkbox" data-kind="status" value="{_e(s)}" checked> '
              f"{_badge(s)}</label>" for s in STATUSES]
    total = len(report.get("claims", []))
    return ['<div class="filters">', *boxes,
            '<label> claim id <input id="claim-search" type="search" size="8" '
            'placeholder="A-052"></label>',
            f'<span class="note"><span id="shown">{total}</span> of {total} claim checks '
            'shown</span> <span id="no-match" class="note hidden">: no claim check matches '
            "the filters</span></div>"]


def _section(study: str, section: str, claims: list[dict[str, Any]], page_dir: Path,
             root: Path) -> list[str]:
    parts = [f'<h3 id="{_section_id(study, section)}">{_e(section or "(no section)")}</h3>']
    in_tables = [c for c in claims if c.get("cell")]
    for table in _ordered(c["cell"]["table"] for c in in_tables):
        parts.append(_table(table, [c for c in in_tables if c["cell"]["table"] == table],
                            page_dir, root))
    rest = [c for c in claims if not c.get("cell")]
    ran = [c for c in rest if c.get("status") != "not run here"]
    folded = [c for c in rest if c.get("status") == "not run here"]
    if ran:
        parts.append(_rows(ran, page_dir, root))
    if folded:
        parts.append(f'<details class="folded"><summary>{len(folded)} not run here'
                     f"</summary>{_rows(folded, page_dir, root)}</details>")
    return parts


def _studies(report: dict[str, Any], page_dir: Path, root: Path) -> list[str]:
    claims: list[dict[str, Any]] = report.get("claims", [])
    parts = []
    for study in _studies_in(report):
        mine = [c for c in claims if c["study"] == study]
        parts.append(f'<h2 id="study-{study}">{_e(STUDY_TITLES.get(study, study))}</h2>')
        for section in ordered_sections(study, (c.get("section", "") for c in mine)):
            parts += _section(study, section, [c for c in mine
                                               if c.get("section", "") == section],
                              page_dir, root)
    return parts


def page(report: dict[str, Any], page_dir: Path, root: Path = ROOT) -> str:
    """The page's HTML; evidence links lead from ``page_dir`` to the files under ``root``."""
    parts = ["<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">", GENERATOR,
             "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
             "<title>Claims: what the kit reproduced</title>"
             f"<style>{CSS}</style></head><body>",
             *_header(report), *_linked(page_dir, root), *_toc(report), *_counts(report),
             *_replays(report), *_arithmetic(report), *_legend(), *_filters(report),
             *_studies(report, page_dir, root),
             f"<script>{SCRIPT}</script></body></html>"]
    return "\n".join(parts) + "\n"


def write_page(report: dict[str, Any], path: Path, root: Path = ROOT) -> Path:
    """Write the claims page for ``report`` (verify's report dict) to ``path``, atomically;
    evidence links are relative to ``path``'s folder. Returns ``path``."""
    page_dir = path.resolve().parent
    data = page(report, page_dir, root.resolve()).encode()
    if path.resolve() == (root / DEFAULT_PAGE).resolve():  # the kit's own folder
        write_atomic(path, data)
    else:  # a file the user named
        write_named_file(path, data, lambda old: GENERATOR.encode() in old[:1024], "--page")
    return path
