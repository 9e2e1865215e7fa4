"""JSON Schema validation, once: every schema of ``kit/schemas`` is checked through here
(protocols, ledgers, MR cards, verdict ledgers, shipped records), so every violation reads
the same: ``FILE: FIELD/PATH: MESSAGE``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from kit.errors import KitError
from kit.files import read_json

SCHEMAS = Path(__file__).with_name("schemas")


def violations(instance: Any, schema: str) -> list[tuple[str, str]]:
    """(field path, message) of every violation of ``kit/schemas/<schema>``, in field
    order; ``(top)`` for the document itself."""
    validator = Draft202012Validator(read_json(SCHEMAS / schema))
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
    return [("/".join(str(p) for p in e.absolute_path) or "(top)", e.message) for e in errors]


def check(instance: Any, schema: str, shown: Path | str,
          error: type[KitError] = KitError) -> None:
    """Raise ``error`` naming ``shown``, the first violated field and how many more."""
    found = violations(instance, schema)
    if found:
        where, message = found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise error(f"{shown}: {where}: {message}{more}")


# At most this many schema violations of one file are listed (then how many more).
SHOWN_VIOLATIONS = 10


def problems(instance: Any, schema: str, shown: Path) -> list[str]:
    """Every violation of ``kit/schemas/<schema>`` by ``instance``, each naming ``shown``
    and the field (the first ``SHOWN_VIOLATIONS``, then how many more)."""
    found = violations(instance, schema)
    listed = [f"{shown}: {where}: {message} (schema {schema})"
              for where, message in found[:SHOWN_VIOLATIONS]]
    if len(found) > SHOWN_VIOLATIONS:
        listed.append(f"{shown}: and {len(found) - SHOWN_VIOLATIONS} more violations of "
                      f"schema {schema}")
    return listed
