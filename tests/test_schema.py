"""One schema checker for every kit schema: the same message everywhere."""

from __future__ import annotations

import pytest

from kit.errors import ConfigError
from kit.schema import check, violations


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
