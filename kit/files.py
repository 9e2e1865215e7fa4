"""The one boundary where the kit reads user-facing files.

Ledgers, manifests, protocols (the frozen one, a user's ``--protocol``, the shipped
copies), MR cards, shipped records and tables, run folders: every reader here maps what
can go wrong with the file to one ``FileFormatError`` whose message is ``FILE: WHAT``
and, where the caller knows one, ``; FIX``, so that no traceback reaches a user.

    read_bytes  the bytes (OSError: missing, a folder, unreadable)
    read_text   strict UTF-8 (the offset and line of the first byte that is not)
    read_json   JSON over read_text (never another encoding guessed from the bytes);
                decode_text and parse_json do the same for bytes already read
    read_yaml   YAML over read_text with the safe loader, alias bombs refused
    load_npz    every array of an .npz archive, no pickles (zip and numpy errors);
                check_npz refuses one from its headers alone (the worker's size cap)
    sha256      the hex sha256 of the bytes
    plain_files every plain file under a folder, each symbolic link (a linked folder
                too, not entered) and anything else named as a problem
    replace_folder  a complete folder renamed over another (ship, reports)

The writers (``canonical_json``, ``npz_bytes``, ``write_atomic``, ``write_npz``: sorted
keys, fixed zip timestamps, a temporary name renamed into place, a new file given the mode
the umask gives and a replaced one its own, ``file_mode``) are the worker's own,
re-exported here: the worker runs alone in the runtime images, so the bytes it writes and
the bytes the kit writes come from one definition. It is the one module of
``kit.runtime`` the file library imports (``tests/test_layout.py``).

YAML anchors and aliases (``&a`` / ``*a``): a 2 KB "billion laughs" file composes in
microseconds (an alias shares its node), and then every walk over it (a schema check, a
dump) visits 10^9 nodes. ``read_yaml`` composes the file, counts its nodes with and
without alias expansion (a linear walk over the shared graph) and refuses, before
anything is constructed, any alias at all (the default), or, with ``aliases=True``,
aliases that add more nodes than the file writes out (``ALIAS_GROWTH``) and recursive
ones. The shipped ledgers need ``aliases=True``: ``yaml.safe_dump`` wrote their shared
``evidence`` lists and ``compute`` specs as flat aliases.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from kit.errors import FileFormatError, KitError
from kit.runtime.worker import PID_MAX as PID_MAX
from kit.runtime.worker import TEMPORARY as TEMPORARY
from kit.runtime.worker import JobError, npz_headers
from kit.runtime.worker import alive as alive
from kit.runtime.worker import canonical_json as canonical_json
from kit.runtime.worker import file_mode as file_mode
from kit.runtime.worker import npz_bytes as npz_bytes
from kit.runtime.worker import stale as stale
from kit.runtime.worker import temporary_prefix as temporary_prefix
from kit.runtime.worker import umask as umask
from kit.runtime.worker import write_atomic as write_atomic
from kit.runtime.worker import write_npz as write_npz

Array = np.ndarray[Any, Any]
CHUNK = 1 << 20
# With aliases allowed, the expanded document may hold at most this many times the nodes
# the file writes out (a flat alias of a small list or mapping stays far below it).
ALIAS_GROWTH = 2
# libyaml's safe loader when PyYAML has it (the ledgers are large), else the Python one
SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def error(path: Path, what: str, fix: str | None = None) -> FileFormatError:
    """The error for ``path``: ``PATH: WHAT`` and ``; FIX`` where there is one."""
    return FileFormatError(f"{path}: {what}" + (f"; {fix}" if fix else ""))


def read_bytes(path: Path, fix: str | None = None) -> bytes:
    """The bytes of ``path``; FileFormatError when it is missing or cannot be read."""
    try:
        return path.read_bytes()
    except FileNotFoundError as exc:
        raise error(path, "missing", fix) from exc
    except OSError as exc:
        raise error(path, f"cannot be read ({exc.strerror or exc})", fix) from exc


def read_text(path: Path, fix: str | None = None) -> str:
    """``path`` decoded as strict UTF-8; the error names the first byte that is not."""
    return decode_text(read_bytes(path, fix), path, fix)


def decode_text(data: bytes, path: Path, fix: str | None = None) -> str:
    """The bytes ``data`` read from ``path`` decoded as strict UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error(path, f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                          f"{exc.start}, line {line})", fix) from exc


def read_json(path: Path, fix: str | None = None) -> Any:
    """``path`` parsed as JSON (UTF-8 only)."""
    return parse_json(read_bytes(path, fix), path, fix)


def parse_json(data: bytes, path: Path, fix: str | None = None) -> Any:
    """The bytes ``data`` read from ``path`` parsed as JSON (UTF-8 only: ``json.loads``
    of bytes would guess UTF-16 or UTF-32). A key written twice in one object is refused:
    JSON itself keeps the last silently, so an edited record could show one value to a
    reader and another to the kit."""
    text = decode_text(data, path, fix)

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        found = dict(pairs)
        if len(found) != len(pairs):
            keys = [key for key, _ in pairs]
            twice = next(key for i, key in enumerate(keys) if key in keys[:i])
            raise error(path, f"the key {twice!r} appears twice in one object", fix)
        return found

    try:
        return json.loads(text, object_pairs_hook=unique)
    except json.JSONDecodeError as exc:
        raise error(path, f"not valid JSON ({exc})", fix) from exc
    except ValueError as exc:  # an integer literal past Python's int-string limit
        raise error(path, f"not readable as JSON ({_value_problem(exc)})", fix) from exc
    except RecursionError as exc:
        raise error(path, "not readable as JSON (nested too deeply)", fix) from exc


def _value_problem(exc: ValueError) -> str:
    """What a ValueError of the JSON or YAML parser says, in the file's terms: Python
    converts an integer literal of at most ``sys.get_int_max_str_digits()`` digits (4300)
    and raises ValueError past it (no record of the kit's holds such a number)."""
    if "integer string conversion" in str(exc):
        return (f"an integer literal of more than {sys.get_int_max_str_digits()} digits, "
                "longer than Python reads")
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def read_yaml(path: Path, fix: str | None = None, aliases: bool = False) -> Any:
    """``path`` parsed as YAML with the safe loader (UTF-8 only). Anchors and aliases are
    refused, or with ``aliases`` kept when they add at most as many nodes as the file
    writes out (``ALIAS_GROWTH``) and none is recursive; a key written twice in one mapping
    is refused."""
    text = read_text(path, fix)
    loader = SAFE_LOADER(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_aliases(path, node, aliases, fix)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise error(path, f"not valid YAML ({_yaml_problem(exc)})", fix) from exc
    except ValueError as exc:  # an integer literal past Python's int-string limit
        raise error(path, f"not readable as YAML ({_value_problem(exc)})", fix) from exc
    except RecursionError as exc:
        raise error(path, "not readable as YAML (nested too deeply)", fix) from exc
    finally:
        loader.dispose()


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """The parser's complaint with line and column, without its ``<unicode string>``."""
    if not isinstance(exc, yaml.MarkedYAMLError):
        return str(exc)

    def at(mark: Any) -> str:
        return f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    found = f"{exc.problem or 'malformed'}{at(exc.problem_mark)}"
    return found + (f", {exc.context}{at(exc.context_mark)}" if exc.context else "")


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _refuse_duplicate_keys(path: Path, node: yaml.Node, fix: str | None) -> None:
    """A mapping that names one key twice: YAML keeps the last silently, so a protocol or
    ledger would say two things and mean one; refused, naming both lines."""
    if not isinstance(node, yaml.MappingNode):
        return
    seen: dict[str, int] = {}
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.value == "<<":
            continue
        line = key.start_mark.line + 1 if key.start_mark else 0
        if key.value in seen:
            raise error(path, f"the key {key.value!r} appears twice in one mapping (lines "
                              f"{seen[key.value]} and {line}); YAML would keep the last "
                              "silently", fix or "keep one of them")
        seen[key.value] = line


def _check_aliases(path: Path, root: yaml.Node, allowed: bool, fix: str | None) -> None:
    """Refuse a node reached twice (an alias) unless ``allowed``; then refuse a recursive
    alias and an expansion past ``ALIAS_GROWTH`` times the distinct nodes. A post-order
    walk with an explicit stack, each distinct node once: linear in the file."""
    size: dict[int, int] = {}
    pending: set[int] = set()  # nodes whose subtree is being walked: the current path
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            pending.discard(key)
            size[key] = 1 + sum(size[id(child)] for child in _children(node))
            continue
        if key in pending or key in size:
            line = node.start_mark.line + 1 if node.start_mark else "?"
            if key in pending:
                raise error(path, f"a recursive YAML alias (the node at line {line} holds "
                                  "an alias of itself)", fix or "write the value out")
            if not allowed:
                raise error(path, f"a YAML alias (*) repeats the anchored (&) node at line "
                                  f"{line}; anchors and aliases are refused in this file",
                            fix or "write the value out in full where the alias stands")
            continue
        pending.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node))
        _refuse_duplicate_keys(path, node, fix)
    expanded, written = size[id(root)], len(size)
    if expanded > ALIAS_GROWTH * written:
        raise error(path, f"YAML aliases expand the file's {written} nodes to {expanded} "
                          f"(more than {ALIAS_GROWTH} times: an alias bomb?)",
                    fix or "write the values out instead of aliasing them")


def load_npz(path: Path, fix: str | None = None) -> dict[str, Array]:
    """Every array of the .npz archive ``path`` (no pickles, no object arrays), once its
    .npy headers pass the worker's checks (``kit.runtime.worker.npz_headers``: one cap on
    the bytes an archive may declare, ``MAX_INPUT_BYTES``, shared with ``kit run``)."""
    check_npz(path, fix)  # the .npy headers first: sizes past the cap are never allocated
    try:  # an open handle of our own: np.load leaks its own when the zip is damaged
        with open(path, "rb") as handle, np.load(handle, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except (zipfile.BadZipFile, zlib.error, ValueError, OSError, EOFError, KeyError) as exc:
        raise error(path, f"not a readable .npz archive ({type(exc).__name__}: {exc})",
                    fix) from exc


def check_npz(path: Path, fix: str | None = None) -> None:
    """Refuse, from its .npy headers alone (no data read or inflated), an .npz that is
    missing, no plain numeric archive, or declares more than the worker's cap
    (``kit.runtime.worker.npz_headers``, ``MAX_INPUT_BYTES``: the cap ``kit run`` applies)."""
    if not path.is_file():
        raise error(path, "missing (or not a file)", fix)
    try:
        npz_headers(path, str(path))
    except JobError as exc:
        raise error(path, exc.what, fix) from exc


def sha256(path: Path, fix: str | None = None) -> str:
    """The hex sha256 of the bytes of ``path`` (inside ``hashed_once``, read once while
    the file's identity and times stay the same)."""
    memo = _HASHED
    key = _identity(path) if memo is not None else None
    if memo is not None and key is not None and key in memo:
        return memo[key]
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            while block := handle.read(CHUNK):
                digest.update(block)
    except OSError as exc:
        raise error(path, f"cannot be read ({exc.strerror or exc})", fix) from exc
    if memo is not None and key is not None:
        memo[key] = digest.hexdigest()
    return digest.hexdigest()


# The digests of one ``hashed_once`` block, by file identity; None outside one.
_HASHED: dict[tuple[str, int, int, int, int, int], str] | None = None


def _identity(path: Path) -> tuple[str, int, int, int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None  # hashed (and refused) the ordinary way
    return (os.path.abspath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
            st.st_ctime_ns)


@contextlib.contextmanager
def hashed_once() -> Iterator[None]:
    """Within the block, a file whose path, inode, size and times have not changed is
    hashed once: verify's manifests, run manifests and roots read the same 136 MB of
    evidence three times otherwise. A file rewritten in between has new times and is read
    again (the kernel's clock for them ticks every few milliseconds, and verify writes
    none of the files it hashes). Not nested; every digest is forgotten when the block
    ends."""
    global _HASHED
    _HASHED = {}
    try:
        yield
    finally:
        _HASHED = None


def plain_files(base: Path, fix: str | None = None) -> tuple[list[Path], list[str]]:
    """(every plain file under ``base``, sorted; a problem naming each symbolic link, a
    linked folder included and not entered, each entry that is neither a file nor a
    folder, and each folder that cannot be listed)."""
    if base.is_symlink():
        return [], [_link(base, fix)]
    found: list[Path] = []
    problems: list[str] = []

    def unlisted(exc: OSError) -> None:
        problems.append(str(error(Path(exc.filename), f"cannot be listed ({exc.strerror})",
                                  fix)))

    for folder, dirs, names in os.walk(base, onerror=unlisted):
        here = Path(folder)
        problems += [_link(here / d, fix) for d in sorted(dirs) if (here / d).is_symlink()]
        for name in sorted(names):
            path = here / name
            if path.is_symlink():
                problems.append(_link(path, fix))
            elif not path.is_file():
                problems.append(str(error(path, "neither a file nor a folder", fix)))
            else:
                found.append(path)
    return sorted(found), problems


def _link(path: Path, fix: str | None) -> str:
    return str(error(path, f"a symbolic link (to {os.readlink(path)})", fix))


def replace_folder(staging: Path, target: Path) -> None:
    """Rename the complete folder ``staging`` to ``target``: an old target is moved aside
    first and removed once the new one is in place (moved back when the rename fails), so
    a reader sees the old folder or the new one, never half of either."""
    if not target.exists():
        staging.rename(target)
        return
    old = Path(tempfile.mkdtemp(prefix=temporary_prefix(target.name), suffix=".old.tmp",
                                dir=target.parent))
    old.rmdir()  # a fresh name for the old target
    target.rename(old)
    try:
        staging.rename(target)
    except BaseException:
        old.rename(target)
        raise
    shutil.rmtree(old)


def copy_checked(source: Path, target: Path, expected: str, what: str, listed_by: str
                 ) -> None:
    """Copy a shipped file (``what``: "model", "SciML checkpoint") to ``target`` when its
    sha256 is ``expected`` (as ``listed_by`` lists it); an error naming it otherwise, with
    the two ways out: restore the checkout, or train instead of taking shipped weights."""
    if not source.is_file():
        raise KitError(f"{source}: the shipped {what} is missing; restore the checkout "
                       "(git checkout claims) or use --models train")
    found = sha256(source)
    if found != expected:
        raise KitError(f"{source}: sha256 {found} is not the {listed_by}'s {expected}; "
                       "restore the checkout or use --models train")
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, source.read_bytes())


def remove_stale(base: Path) -> list[Path]:
    """Remove every temporary of the kit's naming under ``base`` whose writer is gone
    (``stale``), files and folders, links not followed; returns them, sorted."""
    found = []
    for folder, dirs, names in os.walk(base):
        found += [Path(folder) / name for name in [*dirs, *names] if stale(name)]
        dirs[:] = [name for name in dirs if not stale(name)]
    found = sorted(path for path in found if not path.is_symlink())
    for path in found:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    return found
