"""How big a piece of the kit may grow, measured with ``ast``: no module over 400 lines, no
function (nested ones included) over 60, every registered recompute function named by a
claim and every top-level function used somewhere. Each exception is named with its
reason; a new one has to be written here to pass."""

from __future__ import annotations

import ast
import re
from collections import Counter

from kit.claims.ledger import FUNCTIONS
from kit.paths import ROOT

MODULE_LINES, FUNCTION_LINES = 400, 60
LONG_MODULES = {
    # Copied as one file into both runtime images and run alone there (numpy, onnxruntime
    # and the standard library only): its protobuf and .npy header readers cannot move out.
    "kit/runtime/worker.py",
}
LONG_FUNCTIONS = {
    # mgn.py's bytes are part of every MeshGraphNet training cache key: splitting the
    # function would retrain every subject.
    ("kit/sciml/mgn.py", "build"),
}


def modules() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for p in sorted((ROOT / "kit").rglob("*.py"))}


def long_functions(source: str, limit: int) -> list[tuple[str, int]]:
    return [(node.name, node.end_lineno - node.lineno + 1)  # type: ignore[operator]
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.end_lineno - node.lineno + 1 > limit]  # type: ignore[operator]


def test_no_module_is_over_400_lines() -> None:
    long = {name for name, text in modules().items() if len(text.splitlines()) > MODULE_LINES}
    assert long == LONG_MODULES


def test_no_function_is_over_60_lines() -> None:
    long = {(name, function) for name, text in modules().items()
            for function, _ in long_functions(text, FUNCTION_LINES)}
    assert long == LONG_FUNCTIONS


def test_the_measure_sees_nested_functions() -> None:
    body = "\n".join(f"        x = {i}" for i in range(61))
    source = f"def outer():\n    def inner():\n{body}\n    return inner\n"
    assert [name for name, _ in long_functions(source, FUNCTION_LINES)] == ["outer", "inner"]


def test_every_recompute_function_is_named_by_a_claim() -> None:
    text = "".join(p.read_text() for p in sorted((ROOT / "claims").glob("*.yaml")))
    named = set(re.findall(r"function: ([a-z_]+\.[a-z_0-9]+)", text))
    assert sorted(set(FUNCTIONS) - named) == []
    assert sorted(named - set(FUNCTIONS)) == []


def test_every_top_level_function_is_used() -> None:
    sources = modules()
    used = "\n".join(sources.values()) + "\n".join(
        p.read_text() for p in sorted((ROOT / "tests").rglob("*.py"))) + (
        ROOT / "noxfile.py").read_text()
    words = Counter(re.findall(r"\w+", used))  # each whole word, as \bNAME\b finds it
    dead = [f"{name}:{node.name}" for name, text in sources.items()
            for node in ast.parse(text).body if isinstance(node, ast.FunctionDef)
            and words[node.name] < 2]
    assert dead == []
