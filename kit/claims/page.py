"""The claims page: one self-contained HTML file from verify's report.

``write_page(report, path)`` renders the report dict that ``verify`` returns (and writes as
JSON) as a static page: the root digest, ok or failed, any problems in red, a table of
counts per study and status, a legend saying what each status means, then every claim x
substrate as one table row, grouped by study and by the ledger's ``section`` in order of
first appearance. Each row's element id is ``<claim>-<substrate>`` (``#A-052-digits``), so a
reviewer can link to it; evidence files link relative to the page, by default from
``runs/verify/index.html`` to the repository root. Inline CSS only, no script, no external
resource; every text is escaped.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from kit.files import write_atomic

# Every status verify decides, in the order the counts table shows them, with its badge
# colours (background, text) and one sentence for the legend.
STATUSES: dict[str, tuple[str, str, str]] = {
    "reproduced": ("#1e7b34", "#ffffff",
                   "a measured value equal to the published value at its printed precision."),
    "by design": ("#2f6f73", "#ffffff",
                  "equal to the published value because the kit was built to the paper's "
                  "design (counts of mutants, trials, images; structural checks): never "
                  "counted as reproduced."),
    "direction reproduced": ("#9bd39b", "#10361a",
                             "on a stand-in substrate the finding the number supports holds "
                             "(the kit's effect is shown beside the paper's)."),
    "direction reversed": ("#f0902a", "#ffffff",
                           "on the stand-in substrate that finding does not hold."),
    "described": ("#8a8a8a", "#ffffff",
                  "the number describes the stand-in and has no paper-comparable meaning."),
    "consistent": ("#6f8796", "#ffffff",
                   "internal consistency only, never counted as a reproduction."),
    "hypothesis holds": ("#3b6fb6", "#ffffff",
                         "a hypothesis frozen before its study ran holds by its decision "
                         "rule (no paper value: the real-drift sweep)."),
    "hypothesis fails": ("#7a4fa3", "#ffffff",
                         "a hypothesis frozen before its study ran fails by its decision "
                         "rule: a finding, not an error."),
    "differs": ("#c62828", "#ffffff", "a rule failed where agreement was required."),
    "not run here": ("#e4e4e4", "#333333", "the evidence is absent; the row says why."),
}
UNKNOWN = ("#ffffff", "#000000")

CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1400px;color:#222}
h1{margin-bottom:.2em}code{font-size:12px;word-break:break-all}
table{border-collapse:collapse;margin:.6em 0 1.4em}
th,td{border:1px solid #ccc;padding:3px 7px;font-size:13px;vertical-align:top;text-align:left}
th{background:#f3f3f3}td.num{text-align:right}
.badge{display:inline-block;padding:1px 7px;border-radius:9px;font-size:12px;white-space:nowrap}
.verdict{font-size:18px;padding:2px 12px}
.problems{color:#b00020;border:2px solid #b00020;padding:.4em 1.6em;background:#fff3f3}
.note{font-size:11px;color:#555;margin-top:2px}
ul.legend{list-style:none;padding-left:0}ul.legend li{margin:.3em 0}
td.evidence a{display:block;font-size:12px}
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _badge(status: str, extra: str = "") -> str:
    background, color = STATUSES.get(status, UNKNOWN)[:2]
    return (f'<span class="badge{extra}" style="background:{background};color:{color}">'
            f"{_e(status)}</span>")


def _number(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def effect_text(effect: dict[str, Any] | None) -> str:
    """``kit vs paper (ratio x)``, or an empty string where the claim has no effect."""
    if not effect:
        return ""
    text = f"{_number(effect['kit'])} vs {_number(effect['paper'])}"
    if effect.get("ratio") is not None:
        text += f" (ratio {_number(effect['ratio'])}x)"
    return text


def _ordered(items: Iterable[str]) -> list[str]:
    """Distinct items in order of first appearance."""
    return list(dict.fromkeys(items))


def _header(report: dict[str, Any]) -> list[str]:
    verdict = "ok" if report.get("ok") else "failed"
    colour = "#1e7b34" if report.get("ok") else "#c62828"
    parts = ["<h1>Claims: what the kit reproduced</h1>",
             f"<p>Verdict: <span class=\"badge verdict\" style=\"background:{colour};"
             f"color:#fff\">{verdict}</span> &nbsp; root digest "
             f"<code>{_e(report.get('root', ''))}</code>"
             + (" &nbsp; (strict findings: a reversed direction fails)"
                if report.get("strict_findings") else "") + "</p>"]
    problems = report.get("problems") or []
    if problems:
        parts.append('<div class="problems"><h2>Problems</h2><ul>'
                     + "".join(f"<li>{_e(p)}</li>" for p in problems) + "</ul></div>")
    return parts


def _counts(report: dict[str, Any]) -> list[str]:
    counts: dict[str, dict[str, int]] = report.get("counts", {})
    statuses = _ordered([*STATUSES, *(s for c in counts.values() for s in c)])
    parts = ["<h2>Counts</h2><table><tr><th>study</th>"
             + "".join(f"<th>{_badge(s)}</th>" for s in statuses) + "<th>all</th></tr>"]
    for study, row in counts.items():
        parts.append(f"<tr><th>{_e(study)}</th>"
                     + "".join(f'<td class="num">{_e(row.get(s, 0))}</td>' for s in statuses)
                     + f'<td class="num">{_e(sum(row.values()))}</td></tr>')
    parts.append("</table>")
    return parts


def _legend() -> list[str]:
    return (['<h2>What each status means</h2><ul class="legend">']
            + [f"<li>{_badge(status)} {_e(sentence)}</li>"
               for status, (_, _, sentence) in STATUSES.items()]
            + ["</ul>"])


def _evidence(claim: dict[str, Any], root_href: str) -> str:
    folder = claim.get("evidence_folder", "")
    links = []
    for name in claim.get("evidence") or []:
        href = quote(f"{root_href}/{folder}/{name}", safe="/.-_~")
        links.append(f'<a href="{_e(href)}">{_e(name)}</a>')
    return "".join(links)


def _sources(claim: dict[str, Any]) -> str:
    found = claim.get("thresholds") or []
    return "".join(f'<div class="note">threshold from {_e(t)}</div>' for t in found)


COLUMNS = ("claim", "statement", "substrate", "published", "recomputed", "rule", "status",
           "kit vs paper", "evidence")


def _row(claim: dict[str, Any], root_href: str) -> str:
    anchor = f"{claim['claim']}-{claim['substrate']}"
    note = claim.get("note") or ""
    cells = [f'<a href="#{_e(anchor)}">{_e(claim["claim"])}</a>', _e(claim.get("statement", "")),
             _e(claim["substrate"]), _e(claim.get("published", "")),
             _e(claim.get("recomputed", "")), _e(claim.get("rule", "")) + _sources(claim),
             _badge(claim.get("status", "")) + (f'<div class="note">{_e(note)}</div>'
                                                if note else ""),
             _e(effect_text(claim.get("effect"))), _evidence(claim, root_href)]
    classes = [""] * (len(cells) - 1) + [' class="evidence"']
    return (f'<tr id="{_e(anchor)}">'
            + "".join(f"<td{c}>{cell}</td>" for c, cell in zip(classes, cells, strict=True))
            + "</tr>")


def _studies(report: dict[str, Any], root_href: str) -> list[str]:
    claims: list[dict[str, Any]] = report.get("claims", [])
    parts = []
    for study in _ordered(c["study"] for c in claims):
        mine = [c for c in claims if c["study"] == study]
        parts.append(f"<h2>Study: {_e(study)}</h2>")
        for section in _ordered(c.get("section", "") for c in mine):
            parts.append(f"<h3>{_e(section or '(no section)')}</h3><table><tr>"
                         + "".join(f"<th>{_e(c)}</th>" for c in COLUMNS) + "</tr>")
            parts += [_row(c, root_href) for c in mine if c.get("section", "") == section]
            parts.append("</table>")
    return parts


def page(report: dict[str, Any], root_href: str = "../..") -> str:
    """The page's HTML; ``root_href`` leads from the page to the repository root."""
    parts = ["<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
             "<title>Claims: what the kit reproduced</title>"
             f"<style>{CSS}</style></head><body>",
             *_header(report), *_counts(report), *_legend(), *_studies(report, root_href),
             "</body></html>"]
    return "\n".join(parts) + "\n"


def write_page(report: dict[str, Any], path: Path, root_href: str = "../..") -> Path:
    """Write the claims page for ``report`` (verify's report dict) to ``path``, atomically.

    Evidence links are ``<root_href>/<evidence_folder>/<file>``; the default suits
    ``runs/verify/index.html``. Returns ``path``.
    """
    write_atomic(path, page(report, root_href).encode())
    return path
