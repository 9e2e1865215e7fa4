"""The package layout's dependency rule, read from every import of every module (function-
local imports included):

    kit.runtime   imports nothing of kit.drift, kit.sciml or kit.claims
    kit.drift     imports kit.runtime, never kit.sciml
    kit.sciml     imports kit.runtime, never kit.drift
    kit.corpus    imports kit.runtime and kit.drift (Polygraphy's wrapper), never kit.sciml
    kit.claims    imports the studies' recompute registries, never kit.runtime; no
                  registry (kit.STUDY.recompute*) imports kit.claims
    kit.reproduce runs every study's command (reproduce-all); no part imports it
    kit.audit     imports kit.runtime, kit.drift and kit.corpus, never kit.sciml or
                  kit.claims; no part imports it
    kit.cli       the command line's parser, beside kit.__main__
    shared        kit.errors, kit.files, kit.paths, kit.schema, kit.runfolder, kit.runlock,
                  kit.reporting, kit.stats, kit.tolerance, kit.machine, kit.heartbeat,
                  kit.spread, kit.values (what a recompute function returns, below both
                  the studies' recompute modules and the claims), kit.owned (the rule
                  for the folders the kit writes), kit.locks (the lock files' pins, which
                  the environments and verify's interpreter check both read), kit.procs
                  (a child the kit starts dies with its starter), kit.papers (what the
                  papers printed: the ledgers and printed tables, which the studies'
                  reports show and the claims decide on):
                  nothing of the studies or the claims, and of kit.runtime only the
                  edges named in SHARED_RUNTIME

and the worker, which runs alone in the runtime images, imports numpy, onnxruntime and the
standard library only.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KIT = ROOT / "kit"
PARTS = ("runtime", "drift", "sciml", "corpus", "claims", "reproduce", "audit")
SHARED = ("kit.errors", "kit.files", "kit.paths", "kit.schema", "kit.runfolder", "kit.runlock",
          "kit.reporting", "kit.stats", "kit.tolerance", "kit.machine", "kit.heartbeat",
          "kit.spread", "kit.values", "kit.owned", "kit.locks", "kit.procs", "kit.papers")
# What each part must never import.
NOT_IMPORTED = ("reproduce", "audit")  # the command line's alone
FORBIDDEN = {"runtime": ("drift", "sciml", "corpus", "claims", *NOT_IMPORTED),
             "drift": ("sciml", "corpus", *NOT_IMPORTED),
             "sciml": ("drift", "corpus", *NOT_IMPORTED),
             "corpus": ("sciml", *NOT_IMPORTED), "claims": ("runtime", *NOT_IMPORTED),
             "reproduce": ("audit",), "audit": ("sciml", "claims", "reproduce")}
# The studies' recompute registries, which the claims import: none imports the claims back.
RECOMPUTE = re.compile(r"^kit\.(drift|sciml|corpus)\.recompute")
# The shared modules' only edge into kit.runtime: the file library re-exports the worker's
# deterministic writers (one definition of the bytes both sides write).
SHARED_RUNTIME = {("kit.files", "kit.runtime.worker")}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def kit_imports(path: Path) -> set[str]:
    """Every ``kit`` module ``path`` imports (``from kit.x import y`` names ``kit.x.y``
    when that is a module, else ``kit.x``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "kit"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] == "kit":
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                is_module = (ROOT / Path(*sub.split("."))).with_suffix(".py").is_file() or \
                    (ROOT / Path(*sub.split("."))).is_dir()
                found.add(sub if is_module else node.module)
    return found


MODULES = {module_name(p): p for p in sorted(KIT.rglob("*.py"))}


def part_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in PARTS else None


def violations() -> list[str]:
    found = []
    for module, path in MODULES.items():
        part = part_of(module)
        for target in sorted(kit_imports(path)):
            other = part_of(target)
            if part and other in FORBIDDEN[part]:
                found.append(f"{module} imports {target}")
            if RECOMPUTE.match(module) and other == "claims":  # grading sits above them
                found.append(f"{module} (a recompute registry) imports {target}")
            if module in SHARED and other and (other != "runtime" or
                                               (module, target) not in SHARED_RUNTIME):
                found.append(f"{module} (shared) imports {target}")
    return found


def test_every_module_sits_in_a_part_or_is_shared() -> None:
    top = sorted(m for m in MODULES if m.count(".") == 1 and part_of(m) is None)
    assert top == sorted([*SHARED, "kit.__main__", "kit.cli"])


def test_the_packages_keep_the_dependency_rule() -> None:
    assert violations() == []


def test_the_rule_catches_a_study_importing_the_other(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The check itself can fail: a SciML module that imports the drift study, and a claims
    module that imports a backend, are both named."""
    sciml = tmp_path / "kit" / "sciml"
    claims = tmp_path / "kit" / "claims"
    for folder in (sciml, claims, tmp_path / "kit" / "drift", tmp_path / "kit" / "runtime"):
        folder.mkdir(parents=True)
    (tmp_path / "kit" / "drift" / "bootstrap.py").write_text("")
    (tmp_path / "kit" / "runtime" / "backends.py").write_text("")
    (sciml / "bad.py").write_text("def f():\n    from kit.drift import bootstrap\n")
    (claims / "bad.py").write_text("import kit.runtime.backends\n")
    (claims / "values.py").write_text("")
    (sciml / "recompute_bad.py").write_text("from kit.claims import values\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "MODULES",
                        {module_name(p): p for p in sorted((tmp_path / "kit").rglob("*.py"))})
    assert violations() == ["kit.claims.bad imports kit.runtime.backends",
                            "kit.sciml.bad imports kit.drift.bootstrap",
                            "kit.sciml.recompute_bad (a recompute registry) imports "
                            "kit.claims.values"]


def test_offline_verify_loads_no_runtime_but_the_writers() -> None:
    """Importing the claim layer loads no backend, exchange or environment code and no
    onnxruntime: of kit.runtime only the worker's writers, through kit.files."""
    code = ("import sys, kit.claims.verify, kit.claims.ledger\n"
            "print(sorted(m for m in sys.modules if m.startswith(('kit.runtime.', 'onnx'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, check=True)
    assert proc.stdout == "['kit.runtime.worker']\n"


def test_the_worker_imports_numpy_onnxruntime_and_the_standard_library_only() -> None:
    tree = ast.parse((KIT / "runtime" / "worker.py").read_text())
    roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
             for a in n.names}
    roots |= {n.module.split(".")[0] for n in ast.walk(tree)
              if isinstance(n, ast.ImportFrom) and n.module}
    assert roots - set(sys.stdlib_module_names) == {"numpy", "onnxruntime"}


def _docstring_names(folder: Path) -> str:
    return "\n".join(ast.get_docstring(ast.parse(p.read_text())) or ""
                     for p in sorted(folder.rglob("test_*.py")))


def test_every_module_has_a_test_file_or_is_named_by_one() -> None:
    tests = ROOT / "tests"
    own = {p.stem.removeprefix("test_") for p in tests.rglob("test_*.py")}
    named = _docstring_names(tests)
    orphans = []
    for path in sorted((ROOT / "kit").rglob("*.py")):
        if path.name == "__init__.py" or path.stem in own:
            continue
        dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        if not re.search(rf"(``|\b){re.escape(dotted)}(``|\b)", named) \
                and str(path.relative_to(ROOT)) not in named:
            orphans.append(dotted)
    assert orphans == []
