"""JSON Schema validation, once: every schema of ``kit/schemas`` is checked through here
(protocols, ledgers, MR cards, verdict ledgers, shipped records), so every violation reads
the same: ``FILE: FIELD/PATH: MESSAGE``."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from kit.errors import KitError
from kit.files import parse_json, read_bytes

SCHEMAS = Path(__file__).with_name("schemas")
RESTORE_SCHEMA = "restore it from git (the root digest covers every schema)"


def violations(instance: Any, schema: str) -> list[tuple[str, str]]:
    """(field path, message) of every violation of ``kit/schemas/<schema>``, in field
    order; ``(top)`` for the document itself."""
    validator = _validator(SCHEMAS / schema, read_bytes(SCHEMAS / schema, RESTORE_SCHEMA))
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


@functools.lru_cache(maxsize=64)
def _validator(path: Path, data: bytes) -> Draft202012Validator:
    """The validator of one schema file's bytes, once; a schema that is no valid JSON
    Schema is a KitError naming its file (an integrity failure, never a traceback)."""
    document = parse_json(data, path, RESTORE_SCHEMA)
    try:
        Draft202012Validator.check_schema(document)
    except SchemaError as exc:
        where = "/".join(map(str, exc.absolute_path)) or "(top)"
        raise KitError(f"{path}: not a valid JSON Schema ({exc.message} at {where}); "
                       f"{RESTORE_SCHEMA}") from exc
    return Draft202012Validator(document)


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
