"""Environments from locks: the stamp that decides reuse, and the lock parser."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kit.errors import ConfigError, EnvironmentFailed
from kit.runtime import venvs

HASH = "0" * 64


def _lock(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_lock_parser_joins_continuations_and_ignores_comments(tmp_path: Path) -> None:
    lock = _lock(tmp_path / "a.lock",
                 f"# header\nnumpy==2.1.3 \\\n    --hash=sha256:{HASH} \\\n"
                 f"    --hash=sha256:{'1' * 64}\n    # via x\nsix==1.16.0 --hash=sha256:{HASH}\n")
    assert venvs.lock_requirements(lock) == {"numpy==2.1.3": [HASH, "1" * 64],
                                             "six==1.16.0": [HASH]}


def test_lock_parser_refuses_ranges_and_empty_locks(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not pinned with =="):
        venvs.lock_requirements(_lock(tmp_path / "b.lock", f"numpy>=2 --hash=sha256:{HASH}\n"))
    with pytest.raises(ConfigError, match="no pinned requirement"):
        venvs.lock_requirements(_lock(tmp_path / "c.lock", "# nothing\n"))


def test_a_lock_that_is_not_utf8_names_the_file(tmp_path: Path) -> None:
    lock = tmp_path / "d.lock"
    lock.write_bytes(b"numpy==2.1.3 \xff --hash=sha256:" + HASH.encode() + b"\n")
    for read in (venvs.lock_requirements, lambda p: venvs.split_lock(p, ("numpy",))):
        with pytest.raises(ConfigError, match=r"d\.lock: cannot read the lock file.*utf-8"):
            read(lock)


def test_environment_is_current_only_for_its_own_lock(tmp_path: Path) -> None:
    lock = _lock(tmp_path / "a.lock", f"six==1.16.0 --hash=sha256:{HASH}\n")
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").write_text("")
    assert not venvs.is_current(env, lock)
    (env / venvs.STAMP).write_text(venvs._stamp_value(lock, None))
    assert venvs.is_current(env, lock)
    assert not venvs.is_current(env, lock, editable=tmp_path)
    lock.write_text(f"six==1.17.0 --hash=sha256:{HASH}\n")
    assert not venvs.is_current(env, lock)


def test_a_hash_mismatch_fails_the_install_and_leaves_no_stamp(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lock = _lock(tmp_path / "bad.lock", f"six==1.16.0 --hash=sha256:{HASH}\n")
    env = tmp_path / "env"
    with pytest.raises(EnvironmentFailed, match=r"installing .*bad\.lock"):
        venvs.ensure_venv(env, lock)
    assert not (env / venvs.STAMP).exists()
    # the build says what it is doing while it runs (stderr; stdout stays the path)
    said = capsys.readouterr()
    assert said.out == ""
    assert f"venvs: building {env} from {lock}: creating the environment\n" in said.err
    assert f"venvs: building {env}: installing 1 hash-checked packages (" in said.err


def test_an_environment_never_rebuilds_itself(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    lock = _lock(tmp_path / "a.lock", f"six==1.16.0 --hash=sha256:{HASH}\n")
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").write_text("")
    monkeypatch.setattr(sys, "prefix", str(env))
    with pytest.raises(EnvironmentFailed, match="runs from it, so it cannot rebuild itself"):
        venvs.ensure_venv(env, lock)
    assert (env / "bin" / "python").exists()


def test_split_lock_separates_the_packages_built_against_torch(tmp_path: Path) -> None:
    from kit.locks import lock_requirements
    from kit.runtime.venvs import PHYSICSNEMO_LOCK, split_lock

    rest, later = split_lock(PHYSICSNEMO_LOCK, ("torch-scatter",))
    (tmp_path / "rest.txt").write_text(rest)
    (tmp_path / "later.txt").write_text(later)
    first = lock_requirements(tmp_path / "rest.txt")
    second = lock_requirements(tmp_path / "later.txt")
    assert list(second) == ["torch-scatter==2.1.2"]
    assert "torch==2.14.1" in first
    assert "torch-scatter==2.1.2" not in first
    assert len(first) + 1 == len(lock_requirements(PHYSICSNEMO_LOCK))
    # both keep the lock's index options
    assert later.splitlines()[0] == rest.splitlines()[0]


def test_the_verify_environment_is_named_in_the_no_rebuild_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lock = _lock(tmp_path / "a.lock", f"six==1.16.0 --hash=sha256:{HASH}\n")
    monkeypatch.setattr(sys, "prefix", str(venvs.VERIFY_VENV))
    monkeypatch.setattr(venvs, "is_current", lambda *_a, **_k: False)
    with pytest.raises(EnvironmentFailed, match=r"run `python3 -m kit\.runtime\.venvs verify`"):
        venvs.ensure_venv(venvs.VERIFY_VENV, lock)


def test_python_m_kit_venvs_verify_builds_from_the_verify_lock_with_the_kit(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[tuple[Path, Path, Path | None, bool]] = []

    def record(path: Path, lock: Path, editable: Path | None = None,
               compile_bytecode: bool = True) -> Path:
        calls.append((path, lock, editable, compile_bytecode))
        return venvs.venv_python(path)

    monkeypatch.setattr(venvs, "ensure_venv", record)
    assert venvs.main(["verify"]) == 0
    assert calls == [(venvs.ROOT / ".venv-verify", venvs.ROOT / "locks" / "verify.lock",
                      venvs.ROOT, False)]
    assert capsys.readouterr().out == f"{venvs.ROOT / '.venv-verify' / 'bin' / 'python'}\n"
    assert venvs.main(["verifi"]) == 2
    assert "tools|verify|ref|cand|physicsnemo" in capsys.readouterr().err


# What the verify command must not import (its import chain stays clear of them); the
# reviewer's lock (locks/verify.lock) holds none of them but matplotlib and pillow, which
# the reports (python -m kit reports) draw with.
HEAVY = ("torch", "onnx", "onnxruntime", "matplotlib", "PIL", "nox", "pytest", "phi",
         "neuralop", "skfem")


def test_verify_imports_no_torch_onnx_matplotlib_or_pillow() -> None:
    code = ("import sys\nimport kit.__main__, kit.claims.verify, kit.claims.ledger\n"
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=venvs.ROOT, check=True)
    assert proc.stdout == "[]\n", proc.stdout


def test_the_verify_lock_pins_the_tools_lock_versions_and_hashes() -> None:
    tools = venvs.lock_requirements(venvs.TOOLS_LOCK)
    verify = venvs.lock_requirements(venvs.VERIFY_LOCK)
    assert {"numpy", "scipy", "scikit-learn", "pyyaml", "jsonschema", "matplotlib"} <= \
        {pin.split("==")[0] for pin in verify}
    assert not {pin.split("==")[0] for pin in verify} & \
        {"torch", "onnx", "onnxruntime", "nox", "pytest"}
    assert sorted(set(verify) - set(tools)) == []
    for pin, hashes in verify.items():
        assert set(hashes) <= set(tools[pin]), pin
