"""One schema checker for every kit schema: the same message everywhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit import schema
from kit.errors import ConfigError, KitError
from kit.schema import SCHEMAS, check, violations


def test_violations_name_each_field_in_order() -> None:
    found = violations({"files": {"b": "x", "a": 1, "c": "0" * 64}}, "manifest.schema.json")
    assert [where for where, _ in found] == ["files/a", "files/b"]
    assert violations({"files": {}}, "manifest.schema.json") == []
    assert violations([], "manifest.schema.json")[0][0] == "(top)"


def test_check_names_the_file_the_first_field_and_how_many_more() -> None:
    with pytest.raises(ConfigError, match=r"^m\.json: files/a: 1 is not of type 'string' "
                                          r"\(and 1 more\)$"):
        check({"files": {"a": 1, "b": 2}}, "manifest.schema.json", "m.json", ConfigError)
    check({"files": {"a": "0" * 64}}, "manifest.schema.json", "m.json")


def test_a_schema_that_is_no_json_schema_is_an_error_naming_its_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A schema edited to an invalid type is a KitError naming the schema file (verify
    lists it as a failed check), never jsonschema's SchemaError traceback."""
    folder = tmp_path / "schemas"
    folder.mkdir()
    broken = json.loads((SCHEMAS / "manifest.schema.json").read_text())
    broken["type"] = "objekt"
    (folder / "manifest.schema.json").write_text(json.dumps(broken))
    monkeypatch.setattr(schema, "SCHEMAS", folder)
    with pytest.raises(KitError, match=rf"^{folder}/manifest\.schema\.json: not a valid JSON "
                                       r"Schema \(.*objekt.* at type\); restore it from git"):
        violations({"files": {}}, "manifest.schema.json")
    (folder / "manifest.schema.json").write_text("{")
    with pytest.raises(KitError, match=r"manifest\.schema\.json"):
        violations({"files": {}}, "manifest.schema.json")
