"""Every study's report rendered from the shipped evidence under ``claims/``
(``python -m kit reports --out DIR``, ``nox -s reports``), in the reviewer's environment
(``.venv-verify``: numpy, scipy, scikit-learn, pyyaml, jsonschema and matplotlib; no onnx,
no torch):

    DIR/drift/       the drift paper's Tables 1-4 and figures (claims/drift/evidence/digits)
    DIR/sciml/       the SciML report (claims/sciml/evidence/kit)
    DIR/sweep/       the real-drift sweep's drift map and alarm table
                     (claims/realdrift/evidence/digits)
    DIR/corpus/      the real-defect corpus (claims/corpus/evidence/kit)
    DIR/detectors/   the corpus's detector study (claims/corpus/evidence/detectors)
    DIR/index.html   a page linking them

Each report is the one its study writes after a run, drawn by the same function. ``DIR``
follows the kit's rule for the folders it writes (``kit.owned``): every report is
rendered into a temporary folder inside ``DIR`` and moved into place only once all are
written, so a failure (a missing evidence folder, a missing module) leaves ``DIR`` as it
was (a new ``DIR`` is not left behind); an existing ``DIR`` is used only when it is empty
or the kit's own earlier output, where only what the kit wrote is replaced: a file a user
added is kept, and the folder's mode too.
"""

from __future__ import annotations

import html
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kit.claims.page import DEFAULT_PAGE, relink
from kit.errors import KitError
from kit.files import read_json, sha256, write_atomic
from kit.owned import publish, staged, written
from kit.paths import ROOT
from kit.reporting import MEASURE, STYLE, pyplot, rules_shown
from kit.runfolder import SHIPPED_MANIFEST


@dataclass(frozen=True)
class Report:
    """One report: its folder under DIR, what it shows, and the shipped evidence it reads."""

    name: str
    title: str
    evidence: str  # relative to the checkout
    render: Callable[[Path, Path], Path]  # (evidence, out) -> the page


def _drift(evidence: Path, out: Path) -> Path:
    from kit.claims.ledger import load_ledger
    from kit.drift import report
    from kit.runfolder import Run

    run = Run(evidence)
    provenance = {"evidence": evidence.relative_to(ROOT),
                  "substrate": run.record("fetch")["substrate"],
                  "run manifest sha256": sha256(evidence / SHIPPED_MANIFEST),
                  "rules": rules_shown("drift")}
    if (evidence / "machine.json").is_file():
        provenance.update({f"machine {k}": v for k, v in
                           read_json(evidence / "machine.json").items()})
    from kit.papers import load_tables

    printed = {f"table{name.split()[-1]}": (table["columns"],
                                            [[row["label"], *row["cells"]]
                                             for row in table["rows"]])
               for (study, name), table in load_tables(ROOT).items()
               if study == "drift" and name.startswith("Table ")}
    report.write_report(run, out, report.paper_values(load_ledger(ROOT / "claims" /
                                                                  "drift.yaml")), provenance,
                        printed)
    return out / "index.html"


def _sciml(evidence: Path, out: Path) -> Path:
    from kit.sciml.report import write_report

    return write_report(evidence, out)


def _sweep(evidence: Path, out: Path) -> Path:
    from kit.drift.sweep_report import write_report

    return write_report(evidence, out)


def _corpus(evidence: Path, out: Path) -> Path:
    from kit.corpus.report import write_report

    return write_report(evidence, out)


def _detectors(evidence: Path, out: Path) -> Path:
    from kit.corpus.detector_report import write_detector_report

    return write_detector_report(evidence, out)


REPORTS = (
    Report("drift", "Drift study: the paper's Tables 1-4, detection, localisation and "
           "rotation figures (digits substrate)", "claims/drift/evidence/digits", _drift),
    Report("sciml", "SciML study: verdicts, the admissibility gate, the fault catalogue and "
           "the operator floor", "claims/sciml/evidence/kit", _sciml),
    Report("sweep", "Real-drift sweep: the drift map across onnxruntime releases and "
           "optimisation levels, clean alarm rates", "claims/realdrift/evidence/digits", _sweep),
    Report("corpus", "Real-defect corpus: named onnxruntime CPU defects under every release",
           "claims/corpus/evidence/kit", _corpus),
    Report("detectors", "The corpus's detector study: real defects in the digits models at "
           "matched FPR", "claims/corpus/evidence/detectors", _detectors),
)


def _check_target(out: Path) -> None:
    claims = (ROOT / "claims").resolve()
    if out.resolve().is_relative_to(claims):
        raise KitError(f"{out}: reports are never written under {claims} (verify accounts "
                       "for every file there); name another folder with --out")
    written(out)  # a folder the kit did not write, and not empty: refused by name


def navigation(page: Path, out: Path) -> str:
    """The line atop a page of ``out`` (``page`` where it will stand): relative links to
    the reports' index and to the claims page ``python -m kit verify`` writes, where
    ``out`` is inside the checkout (the default, ``runs/reports``); elsewhere the claims
    page is named, not linked: a link out of ``out`` would spell the local path."""
    links = [] if page == out / "index.html" else [
        f"<a href='{html.escape(os.path.relpath(out / 'index.html', page.parent))}'>"
        "all reports</a>"]
    said = "<small>(<code>python -m kit verify</code> writes it)</small>"
    if out.resolve().is_relative_to(ROOT.resolve()):
        claims = Path(os.path.relpath(ROOT.resolve() / DEFAULT_PAGE, page.parent.resolve()))
        links.append(f"<a href='{html.escape(claims.as_posix())}'>the claims page</a> {said}")
    else:
        links.append(f"the claims page: <code>{DEFAULT_PAGE.as_posix()}</code> in the "
                     f"checkout {said}")
    return f"<p class='nav'>{' · '.join(links)}</p>"


def with_navigation(rendered: Path, page: Path, out: Path) -> None:
    """Put ``navigation`` atop the page rendered at ``rendered`` (to stand at ``page``)."""
    text = rendered.read_text(encoding="utf-8")
    write_atomic(rendered, text.replace("<body>", "<body>" + navigation(page, out), 1)
                 .encode())


def index_page(pages: dict[Report, Path], out: Path, final: Path | None = None) -> str:
    """The page linking every report (relative links; ``pages`` rendered under ``out``,
    which will stand at ``final``)."""
    items = "".join(f"<li><a href='{html.escape(page.relative_to(out).as_posix())}'>"
                    f"{html.escape(report.title)}</a> <small>from <code>"
                    f"{html.escape(report.evidence)}</code></small></li>"
                    for report, page in pages.items())
    nav = navigation((final or out) / "index.html", final or out)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>Reports from the "
            f"shipped evidence</title><style>{STYLE}</style></head><body><h1>Reports from "
            f"the shipped evidence</h1>{nav}<p>Each report is drawn from the evidence under "
            f"<code>claims/</code> that <code>python -m kit verify</code> checks; the "
            f"paper's values, where a figure shows them, are read from the claim ledgers."
            f"</p><ul>{items}</ul>{MEASURE}</body></html>\n")


def write_reports(out: Path) -> Path:
    """Render every report of ``REPORTS`` into ``out`` (replaced whole, or not at all);
    returns ``out / "index.html"``."""
    _check_target(out)
    missing = [r.evidence for r in REPORTS if not (ROOT / r.evidence).is_dir()]
    if missing:
        raise KitError(f"{', '.join(missing)}: missing; the reports read the shipped evidence "
                       "of a complete checkout (git checkout -- claims)")
    pyplot()  # matplotlib first: a missing module fails before any folder is made
    with staged(out) as staging:
        pages = {r: r.render(ROOT / r.evidence, staging / r.name) for r in REPORTS}
        for page in pages.values():  # links back, from where each page will stand
            with_navigation(page, out / page.relative_to(staging), out)
        write_atomic(staging / "index.html", index_page(pages, staging, out).encode())
        publish(staging, out, "python -m kit reports", commit="index.html")
    relink()  # the claims page links the reports, whichever command ran first
    return out / "index.html"
