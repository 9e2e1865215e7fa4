"""One definition of where the kit lives; the runtime declarations import no builder."""

from __future__ import annotations

import ast
import subprocess
import sys

from kit.paths import ROOT


def test_root_and_the_cache_folder_are_defined_once() -> None:
    defined = []
    for path in sorted((ROOT / "kit").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
            if (isinstance(node, ast.Assign) and "ROOT" in names) or \
                    (isinstance(node, ast.FunctionDef) and node.name == "cache_dir"):
                defined.append(path.relative_to(ROOT).as_posix())
    assert defined == ["kit/paths.py", "kit/paths.py"]


def test_the_runtimes_do_not_import_the_environment_builder() -> None:
    """kit.runtime.runtimes reads locks through kit.locks; kit.runtime.venvs imports
    kit.runtime.runtimes, never the other way round (the cycle runtimes <-> venvs is gone)."""
    proc = subprocess.run([sys.executable, "-c", "import sys, kit.runtime.runtimes; "
                           "print('kit.runtime.venvs' in sys.modules)"],
                          capture_output=True, text=True,
                          check=True)
    assert proc.stdout.strip() == "False"
