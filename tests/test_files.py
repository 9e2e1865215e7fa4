"""The one boundary where user-facing files are read: each way a file can be wrong gives
one FileFormatError naming the file (and the fix where there is one), never a traceback
of a lower-level error; YAML alias bombs are refused before anything walks them."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml

from kit import files
from kit.errors import FileFormatError, KitError
from kit.files import write_npz


def billion_laughs(levels: int = 9) -> str:
    """The classic alias bomb: each level aliases the one below nine times (9**levels
    scalars from a file of a few hundred bytes)."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]"
              for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def nothing_walked() -> Iterator[list[object]]:
    """Within the block, every YAML document built and every schema consulted is recorded
    (and not done) in the list yielded: a bomb refused in time leaves it empty."""
    from kit import schema

    walked: list[object] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(yaml.constructor.BaseConstructor, "construct_document",
                      lambda *args: walked.append(args))
        patch.setattr(schema, "violations", lambda *args: walked.append(args) or [])
        yield walked


def test_the_error_names_the_file_and_is_a_kit_error(tmp_path: Path) -> None:
    found = files.error(tmp_path / "x.json", "broken", "restore it")
    assert isinstance(found, KitError)
    assert str(found) == f"{tmp_path / 'x.json'}: broken; restore it"
    assert str(files.error(tmp_path / "x.json", "broken")) == f"{tmp_path / 'x.json'}: broken"


def test_a_missing_or_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(FileFormatError, match=r"nope\.json: missing; restore it from git$"):
        files.read_json(tmp_path / "nope.json", "restore it from git")
    with pytest.raises(FileFormatError, match=r": cannot be read \(Is a directory\)"):
        files.read_text(tmp_path)
    with pytest.raises(FileFormatError, match=r"nope\.bin: cannot be read"):
        files.sha256(tmp_path / "nope.bin")


def test_a_byte_that_is_not_utf8_is_located(tmp_path: Path) -> None:
    path = tmp_path / "ledger.yaml"
    path.write_bytes(b"study: drift\nsource: caf\xe9\n")
    for read in (files.read_text, files.read_json, files.read_yaml):
        with pytest.raises(FileFormatError, match=r"ledger\.yaml: not UTF-8 text \(byte 0xe9 "
                                                  r"at offset 24, line 2\)"):
            read(path)


def test_json_is_utf8_only_and_malformed_json_is_located(tmp_path: Path) -> None:
    path = tmp_path / "record.json"
    path.write_bytes('{"a": 1}'.encode("utf-16"))  # json.loads(bytes) would guess UTF-16
    with pytest.raises(FileFormatError, match="not UTF-8"):
        files.read_json(path)
    path.write_text('{"a": 1,\n "b": }')
    with pytest.raises(FileFormatError, match=r"record\.json: not valid JSON \(Expecting value"
                                              r": line 2 column 7"):
        files.read_json(path)
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(FileFormatError, match="nested too deeply"):
        files.read_json(path)
    path.write_text('{"a": [1, 2.5, "x"]}')
    assert files.read_json(path) == {"a": [1, 2.5, "x"]}


def test_malformed_yaml_is_located(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("a: [1, 2\nb: 3\n")
    with pytest.raises(FileFormatError, match=r"p\.yaml: not valid YAML \(.*line 2, column 2"):
        files.read_yaml(path)
    path.write_text("--- 1\n--- 2\n")
    with pytest.raises(FileFormatError, match="expected a single document"):
        files.read_yaml(path)
    path.write_text("a: !!python/object:os.system ls\n")
    with pytest.raises(FileFormatError, match="not valid YAML"):
        files.read_yaml(path)
    path.write_text("")
    assert files.read_yaml(path) is None


def test_a_billion_laughs_is_refused_before_anything_is_built(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(billion_laughs())
    assert path.stat().st_size < 2048

    built: list[object] = []
    monkeypatch.setattr(yaml.constructor.BaseConstructor, "construct_document",
                        lambda *args: built.append(args))
    with pytest.raises(FileFormatError, match=r"bomb\.yaml: a YAML alias \(\*\) repeats the "
                                              r"anchored \(&\) node at line 1"):
        files.read_yaml(path)
    with pytest.raises(FileFormatError, match=r"bomb\.yaml: YAML aliases expand the file's "
                                              r"\d+ nodes to 4\d{8} .*an alias bomb"):
        files.read_yaml(path, aliases=True)
    assert not built


def test_flat_aliases_pass_only_where_allowed_and_recursive_ones_never(tmp_path: Path) -> None:
    path = tmp_path / "ledger.yaml"
    path.write_text("a: &e [x.npz, y.npz]\nb: *e\nc: *e\nd: [1, 2, 3, 4, 5, 6, 7, 8]\n")
    assert files.read_yaml(path, aliases=True)["c"] == ["x.npz", "y.npz"]
    with pytest.raises(FileFormatError, match="anchors and aliases are refused"):
        files.read_yaml(path)
    path.write_text("a: &a [1, *a]\n")
    with pytest.raises(FileFormatError, match="recursive YAML alias"):
        files.read_yaml(path, aliases=True)
    path.write_text("a: [1, [2, 3]]\nb: {c: d}\n")
    assert files.read_yaml(path) == {"a": [1, [2, 3]], "b": {"c": "d"}}


def test_the_shipped_yaml_reads_as_before() -> None:
    """The ledgers (flat aliases from yaml.safe_dump), the protocol and every MR card give
    what PyYAML's own safe loader gives."""
    import yaml

    from kit.paths import ROOT

    for path in sorted((ROOT / "claims").glob("*.yaml")):
        assert files.read_yaml(path, aliases=True) == yaml.safe_load(path.read_text())
    for path in [ROOT / "kit/protocols/drift.yaml",
                 *sorted((ROOT / "kit/sciml/cards").glob("*.yaml"))]:
        assert files.read_yaml(path) == yaml.safe_load(path.read_text())


def test_npz_archives_damaged_pickled_or_not_npz(tmp_path: Path) -> None:
    path = tmp_path / "table.npz"
    write_npz(path, {"a": np.arange(5), "b": np.ones(3, np.float32)})
    found = files.load_npz(path)
    assert sorted(found) == ["a", "b"]
    assert found["a"].tolist() == [0, 1, 2, 3, 4]
    data = bytearray(path.read_bytes())
    damaged = tmp_path / "damaged.npz"
    damaged.write_bytes(bytes(data[: len(data) // 2]))
    with pytest.raises(FileFormatError, match=r"damaged\.npz: not a readable \.npz archive"):
        files.load_npz(damaged)
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, a=np.array([{"x": 1}], dtype=object))
    with pytest.raises(FileFormatError, match=r"pickled\.npz: member 'a\.npy' holds Python"):
        files.load_npz(pickled)
    raw = tmp_path / "raw.npz"
    raw.write_bytes(b"\x80\x04not a zip at all")
    with pytest.raises(FileFormatError, match=r"raw\.npz: not a readable \.npz archive"):
        files.load_npz(raw)
    single = tmp_path / "single.npz"
    with open(single, "wb") as handle:
        np.save(handle, np.arange(3))
    with pytest.raises(FileFormatError, match=r"single\.npz: not a readable \.npz archive"):
        files.load_npz(single)
    with pytest.raises(FileFormatError, match=r"none\.npz: missing"):
        files.load_npz(tmp_path / "none.npz")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file without read permission")
def test_a_file_without_read_permission(tmp_path: Path) -> None:
    path = tmp_path / "locked.json"
    path.write_text("{}")
    path.chmod(0)
    with pytest.raises(FileFormatError, match=r"locked\.json: cannot be read"):
        files.read_json(path)


def test_plain_files_names_every_link_and_never_enters_a_linked_folder(tmp_path: Path) -> None:
    base = tmp_path / "claims"
    (base / "a" / "b").mkdir(parents=True)
    (base / "a" / "b" / "x.json").write_text("{}")
    (base / "top.yaml").write_text("a: 1\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "extra.npz").write_bytes(b"")
    (base / "a" / "linked").symlink_to(outside)
    (base / "alias.yaml").symlink_to(base / "top.yaml")
    os.mkfifo(base / "pipe")
    found, problems = files.plain_files(base, "keep plain files")
    assert found == [base / "a" / "b" / "x.json", base / "top.yaml"]
    assert problems == [  # folder by folder from the top
        f"{base / 'alias.yaml'}: a symbolic link (to {base / 'top.yaml'}); keep plain files",
        f"{base / 'pipe'}: neither a file nor a folder; keep plain files",
        f"{base / 'a' / 'linked'}: a symbolic link (to {outside}); keep plain files"]
    (tmp_path / "link").symlink_to(base)
    assert files.plain_files(tmp_path / "link") == (
        [], [f"{tmp_path / 'link'}: a symbolic link (to {base})"])
    assert files.plain_files(tmp_path / "none")[1][0].startswith(
        f"{tmp_path / 'none'}: cannot be listed (No such file or directory)")


def test_a_key_written_twice_in_one_mapping_is_refused_naming_both_lines(tmp_path: Path) -> None:
    """YAML keeps the last of two equal keys silently: a protocol saying two things."""
    path = tmp_path / "protocol.yaml"
    path.write_text("seeds:\n  split: 1\n  bootstrap: 2\n  split: 3\n")
    with pytest.raises(KitError, match=r"the key 'split' appears twice in one mapping "
                                       r"\(lines 2 and 4\)"):
        files.read_yaml(path)
    path.write_text("seeds:\n  split: 1\nother:\n  split: 3\n")  # one per mapping: fine
    assert files.read_yaml(path) == {"seeds": {"split": 1}, "other": {"split": 3}}


def test_a_json_key_written_twice_in_one_object_is_refused(tmp_path: Path) -> None:
    """JSON keeps the last of two equal keys silently, as YAML does: a record saying two
    things (a reader sees the first, the kit would use the second)."""
    path = tmp_path / "state.json"
    path.write_text('{"steps": {"drift": {"done": false, "done": true}}}')
    with pytest.raises(KitError, match=rf"{path}: the key 'done' appears twice in one object"):
        files.read_json(path)
    path.write_text('{"a": {"done": false}, "b": {"done": true}}')  # one per object: fine
    assert files.read_json(path) == {"a": {"done": False}, "b": {"done": True}}


def test_an_integer_past_pythons_digit_limit_is_refused_naming_the_file(tmp_path: Path) -> None:
    """Python converts an integer literal of at most 4300 digits and raises ValueError past
    it, in the JSON parser and in the YAML constructor alike: one error naming the file."""
    long = "1" * 5000
    path = tmp_path / "state.json"
    path.write_text(f'{{"wall_s": {long}}}')
    with pytest.raises(FileFormatError, match=rf"{path}: not readable as JSON \(an integer "
                                              r"literal of more than 4300 digits"):
        files.read_json(path)
    path = tmp_path / "protocol.yaml"
    path.write_text(f"seeds:\n  split: {long}\n")
    with pytest.raises(FileFormatError, match=rf"{path}: not readable as YAML \(an integer "
                                              r"literal of more than 4300 digits"):
        files.read_yaml(path)
    path.write_text(f"seeds:\n  split: {'1' * 4300}\n")  # at the limit: read
    assert files.read_yaml(path) == {"seeds": {"split": int("1" * 4300)}}


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    """The process's umask set to ``mask`` for the block, restored after."""
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.parametrize(("mask", "mode"), [(0o077, 0o600), (0o022, 0o644), (0o002, 0o664)])
def test_write_atomic_gives_a_new_file_the_umasks_mode_and_a_replaced_one_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mask: int, mode: int) -> None:
    """A new file gets the mode the user's umask gives (it was 0644 whatever the umask); a
    user's 0600 output stays 0600 when the kit replaces it, a 0644 one 0644; the temporary
    carries the kit's one name (``.NAME.kit<pid>-<random>.tmp``) beside it."""
    from kit.files import TEMPORARY, write_atomic

    mine, theirs = tmp_path / "out.npz", tmp_path / "shared.npz"
    for path, kept in ((mine, 0o600), (theirs, 0o644)):
        path.write_bytes(b"old")
        os.chmod(path, kept)
    with umask(mask):
        write_atomic(mine, b"new")
        write_atomic(theirs, b"new")
        write_atomic(tmp_path / "fresh.json", b"{}")
        write_npz(tmp_path / "fresh.npz", {"x": np.zeros(2)})
        write_atomic(tmp_path / "shared.json", b"{}", 0o644)  # what a container reads
    assert mine.read_bytes() == b"new"
    assert mine.stat().st_mode & 0o7777 == 0o600
    assert theirs.stat().st_mode & 0o7777 == 0o644
    assert (tmp_path / "fresh.json").stat().st_mode & 0o7777 == mode
    assert (tmp_path / "fresh.npz").stat().st_mode & 0o7777 == mode
    assert (tmp_path / "shared.json").stat().st_mode & 0o7777 == 0o644
    seen = []
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: seen.append(Path(a).name) or real(a, b))
    write_atomic(tmp_path / "x.json", b"{}")
    assert TEMPORARY.fullmatch(seen[0])
    assert f".x.json.kit{os.getpid()}-" in seen[0]


@pytest.mark.parametrize("proc", [True, False])
def test_the_umask_is_read_without_changing_it_and_elsewhere_restored(
        monkeypatch: pytest.MonkeyPatch, proc: bool) -> None:
    """On Linux from ``/proc/self/status`` (``os.umask`` never called); where that has no
    ``Umask:`` line, set and restored at once."""
    import builtins

    real_open, real_umask = builtins.open, os.umask
    calls: list[int] = []

    def no_status(file: object, *args: object, **kwargs: object) -> object:
        if file == "/proc/self/status":
            raise FileNotFoundError(file)
        return real_open(file, *args, **kwargs)  # type: ignore[call-overload]

    with umask(0o027):
        monkeypatch.setattr(os, "umask", lambda mask: calls.append(mask) or real_umask(mask))
        if not proc:
            monkeypatch.setattr(builtins, "open", no_status)
        assert files.umask() == 0o027
        monkeypatch.undo()
        assert real_umask(0o027) == 0o027  # left as it was
    assert calls == ([] if proc else [0o077, 0o027])


def test_an_npz_declaring_a_pebibyte_is_refused_before_any_allocation(tmp_path: Path) -> None:
    """A header that declares 2**46 rows (numpy would try to allocate 1 PiB) is refused by
    the cap ``kit run`` applies, naming the file."""
    import io
    import zipfile

    from kit.files import load_npz

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False,
                                                  "shape": (2 ** 46, 4)})
    path = tmp_path / "inputs.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x.npy", header.getvalue() + b"\0" * 16)
    with pytest.raises(KitError, match=rf"{path}: member 'x.npy' declares \(70368744177664, 4\)"):
        load_npz(path)


def test_inside_hashed_once_a_file_is_read_once_until_it_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hashlib

    from kit import files

    path = tmp_path / "a.bin"
    path.write_bytes(b"first")
    opened: list[str] = []
    real = open

    def counting(name: object, *args: object, **kwargs: object) -> object:
        opened.append(str(name))
        return real(name, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(files, "open", counting, raising=False)
    with files.hashed_once():
        assert files.sha256(path) == hashlib.sha256(b"first").hexdigest()
        assert files.sha256(path) == hashlib.sha256(b"first").hexdigest()
        assert opened == [str(path)]
        before = path.stat().st_mtime_ns
        path.write_bytes(b"other")  # the same size; its times move (by a tick at least)
        os.utime(path, ns=(before + 10**7, before + 10**7))
        assert files.sha256(path) == hashlib.sha256(b"other").hexdigest()
        assert len(opened) == 2
    files.sha256(path)
    files.sha256(path)
    assert len(opened) == 4  # outside the block every call reads


@pytest.mark.parametrize("pid", [0, -1, 10**10, 1 << 22 | 1, 2**63])
def test_a_pid_no_process_can_have_is_never_alive_and_its_temporary_is_stale(pid: int) -> None:
    """``os.kill`` takes 0 and a negative pid for a process group and overflows past a C
    int: such a pid names no process, and a temporary that carries one is a dead writer's."""
    from kit.files import alive, stale

    assert not alive(pid)
    if pid > 0:
        assert stale(f".x.kit{pid}-abcdefgh.tmp") == (len(str(pid)) <= 10)
    assert alive(os.getpid())
