"""The audit's report: ``audit.json``, the record, and ``index.html``, the page that shows
it (the outputs, which side is right, where the model first moves, the dial, the bisection
and the static screen)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kit.files import canonical_json, write_atomic


def _g(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _measured(record: dict[str, Any]) -> list[Any]:
    """The page's sections of a measured audit: the outputs, which side is right and where
    the model first moves."""
    from kit.reporting import PageTable

    sections = []
    pairs = record.get("clean_pairs", [])
    sections.append(PageTable(
        "Outputs", ["output", "max abs", "max rel (where from is not 0)", "bit-identical",
                    "flips", "Polygraphy",
                    "tau", "audited alarm share", "unstable clean pairs"],
        [[n + (f" ({r['compared_as']})" if r.get("compared_as") else ""), _g(r["max_abs"]),
          "none: from is 0 everywhere" if r.get("max_rel_none") else _g(r["max_rel"]),
          f"{r['identical_share']:.0%}",
          str(r["flips"]), r["polygraphy_verdict"] + ("" if r["polygraphy_fails"] is None
                                     else f" ({r['polygraphy_fails']}"
                                     + (f"; {r['polygraphy_note']})" if r.get("polygraphy_note")
                                        else ")")),
          _g(r["tau"]), f"{r['audited_rate']:.0%}",
          "; ".join(pairs[i] for i in r["unstable"]) or "none"]
         for n, r in record["outputs"].items()], note=record["why"]))
    oracle = record.get("oracle") or {}
    sections.append(PageTable(
        "Which side is right (onnx.reference)", ["output", "from's error", "to's error",
                                                 "nearer the reference"],
        [[n, _g(r["from_error"]), _g(r["to_error"]), r["closer"] + (
            f" (the specification's shape {r['spec_shape']}; from {r['shapes']['from']}, "
            f"to {r['shapes']['to']})" if r.get("spec_shape") else "")]
         for n, r in oracle.get("outputs", {}).items()],
        note=(f"the reference implementation on the last {oracle.get('inputs')} inputs, "
              f"{oracle.get('precision')}") if oracle.get("ran") else
        oracle.get("why", "not run")))
    moving = record.get("first_moving")
    sections.append(PageTable(
        "Where it first moves", ["node", "op", "inputs", "alarm share",
                                 "unexposed nodes upstream (the move may start there)"],
        [[moving["node"] + (f" ({moving['compared_as']})" if moving.get("compared_as") else ""),
          moving["op"], moving["inputs"], f"{moving['audited_rate']:.0%}",
          moving.get("upstream") or "none"]]
        if moving else [], note="" if moving else
        "not run: the outputs stay within clean drift (the instrumented copy runs only "
        "beyond it)" if record.get("exposed") is None else
        record.get("unlocalised", "no instrumented node leaves its clean envelope")))
    return sections


def write_report(out: Path, record: dict[str, Any]) -> None:
    """``audit.json`` and ``index.html`` (each written whole, then renamed into place)."""
    from kit.reporting import PageTable, html_page

    write_atomic(out / "audit.json", canonical_json(record))
    sides = {k: f"{v['release']}/{v['level']}" for k, v in record["sides"].items()}
    sections = _measured(record) if record.get("outputs") else []
    if record.get("dial"):
        from kit.audit.dial import dial_table

        sections.append(dial_table(record["dial"]))
    found = record.get("bisect")
    if found:
        moving = found.get("first_moving") or {}
        sections.append(PageTable(
            "Which release moved (--bisect)", ["release", "verdict", "why"],
            [[row["release"], row["verdict"], row["why"]] for row in found["visited"]],
            note=f"first release beyond clean drift: {found['first_release']} "
                 f"({found['audits']} audits over {found['releases_between']} releases); "
                 f"first node there: {moving.get('node', '-')} ({moving.get('op', '-')}); "
                 "known cases whose status changes there: "
                 f"{', '.join(found['known_cases_changing_there']) or 'none'}"))
    sections.append(PageTable(
        "Known defects (static screen)", ["case", "issue", "nodes", "from", "to", "fixed in",
                                          "decides"],
        [[r["case"], str(r["issue"]), str(r["nodes"]), r["from"], r["to"], str(r["fixed_in"]),
          "yes" if r["decides"] else f"advisory: {r['advisory']}"] for r in record["screen"]]))
    name = Path(record["model"]).name
    page = html_page(f"audit {name}", f"{name}: {record['verdict']}",
                     {"model": record["model"], "inputs": record["inputs"] + (
                         f" ({record['inputs_n']} input sets, each fed as the model takes "
                         "it: --sets)" if record.get("sets") else "") + (
                         f" ({record['nonfinite_inputs']} NaN or infinite values, fed as "
                         "given)" if record.get("nonfinite_inputs") else ""), **sides,
                      "why": record["why"], "protocol version": record["protocol_version"]},
                     sections)
    write_atomic(out / "index.html", page.encode())
