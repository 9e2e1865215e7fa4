"""The rule for the folders the kit writes (``kit.owned``): a folder the kit did not write
is used only while empty; in its own, the kit replaces only what it wrote, keeps what a
user added, refuses to replace what a user changed, and leaves the folder's mode alone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kit.errors import KitError
from kit.owned import MARK, publish, temporary, write_named_file, written


def _publish(out: Path, files: dict[str, str]) -> dict[str, str]:
    staging = temporary(out)
    for name, text in files.items():
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        (staging / name).write_text(text)
    return publish(staging, out, "test")


def test_a_new_folder_is_marked_with_what_was_written(tmp_path: Path) -> None:
    out = tmp_path / "out"
    files = _publish(out, {"a.txt": "1", "sub/b.txt": "2"})
    assert sorted(files) == ["a.txt", "sub/b.txt"]
    assert written(out) == files
    assert sorted(p.name for p in out.iterdir()) == [MARK, "a.txt", "sub"]


def test_a_folder_the_kit_did_not_write_is_refused_unless_empty(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("keep")
    with pytest.raises(KitError, match=r"holds files the kit did not write \(mine.txt\)"):
        temporary(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o700)
    _publish(empty, {"a.txt": "1"})
    assert empty.stat().st_mode & 0o777 == 0o700


def test_only_what_the_kit_wrote_is_replaced_or_removed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _publish(out, {"a.txt": "1", "old.txt": "gone next time"})
    (out / "a.txt").chmod(0o600)
    (out / "mine.txt").write_text("keep")
    _publish(out, {"a.txt": "2"})
    assert (out / "a.txt").read_text() == "2"
    assert (out / "a.txt").stat().st_mode & 0o777 == 0o600
    assert not (out / "old.txt").exists()
    assert (out / "mine.txt").read_text() == "keep"
    with pytest.raises(KitError, match=r"mine\.txt: a file the kit did not write stands"):
        _publish(out, {"mine.txt": "overwrite?"})
    assert (out / "mine.txt").read_text() == "keep"
    (out / "a.txt").write_text("edited by hand")
    with pytest.raises(KitError, match=r"a\.txt: changed since the kit wrote it"):
        _publish(out, {"b.txt": "3"})
    assert (out / "a.txt").read_text() == "edited by hand"
    assert [p for p in out.iterdir() if p.name.startswith(".kit-staging.")] == []


def test_a_link_or_a_file_given_as_the_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "target").mkdir()
    os.symlink(tmp_path / "target", tmp_path / "link")
    with pytest.raises(KitError, match="not a folder"):
        temporary(tmp_path / "link")
    (tmp_path / "file").write_text("x")
    with pytest.raises(KitError, match="not a folder"):
        temporary(tmp_path / "file")


@pytest.mark.parametrize("name", ["{victim}", "../victim/thesis.tex", "sub/../../x", "",
                                  "./a.txt"])
def test_a_mark_naming_a_file_outside_its_folder_is_refused(tmp_path: Path, name: str) -> None:
    """A crafted mark (a report folder someone handed over) cannot make the kit remove a
    file anywhere: every name it holds must be a path below the folder."""
    import hashlib
    import json

    victim = tmp_path / "victim" / "thesis.tex"
    victim.parent.mkdir()
    victim.write_text("precious")
    out = tmp_path / "out"
    _publish(out, {"a.txt": "1"})
    record = json.loads((out / MARK).read_text())
    record["files"][name.format(victim=victim)] = hashlib.sha256(b"precious").hexdigest()
    (out / MARK).write_text(json.dumps(record))
    with pytest.raises(KitError, match="which is not a file inside the folder"):
        _publish(out, {"b.txt": "2"})
    assert victim.read_text() == "precious"


def test_nothing_is_written_or_removed_through_a_link_inside_the_folder(tmp_path: Path) -> None:
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    _publish(out, {"sub/a.txt": "1"})
    (out / "sub" / "a.txt").unlink()
    (out / "sub").rmdir()
    elsewhere.mkdir()
    os.symlink(elsewhere, out / "sub")
    with pytest.raises(KitError, match=r"out/sub: a link or a file where the kit keeps a "
                                       "folder"):
        _publish(out, {"sub/a.txt": "2", "sub/b.txt": "3"})
    assert list(elsewhere.iterdir()) == []


def test_a_publish_interrupted_twice_is_still_the_kits_and_finishes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The intent mark lists what every file may hold; interrupted after the first rename,
    twice over, the folder is still taken as the kit's and the third publish finishes."""
    out = tmp_path / "out"
    _publish(out, {"a.txt": "1", "b.txt": "1"})
    real = os.replace
    for _ in range(2):
        moved: list[str | Path] = []

        def once(src: str | Path, dst: str | Path, moved: list[str | Path] = moved) -> None:
            if len(moved) >= 2 and Path(dst).parent == out:  # the mark and one file
                raise OSError("interrupted")
            moved.append(dst)
            real(src, dst)

        monkeypatch.setattr(os, "replace", once)
        with pytest.raises(OSError, match="interrupted"):
            _publish(out, {"a.txt": "2", "b.txt": "2", "c.txt": "2"})
        monkeypatch.setattr(os, "replace", real)
    assert (out / "b.txt").read_text() == "1"  # never moved: the oldest content
    files = _publish(out, {"a.txt": "2", "b.txt": "2", "c.txt": "2"})
    assert sorted(files) == ["a.txt", "b.txt", "c.txt"]
    assert all((out / name).read_text() == "2" for name in files)


def test_a_named_file_clears_only_its_own_temporaries_a_killed_write_left(
        tmp_path: Path) -> None:
    """verify --json F killed mid-write leaves .F.kit<pid>-<8>.tmp; the next write removes
    it once its writer is gone, and nothing else."""
    import subprocess

    gone = subprocess.Popen(["true"])
    gone.wait()
    left = tmp_path / f".report.json.kit{gone.pid}-abcdefgh.tmp"
    live = tmp_path / f".report.json.kit{os.getpid()}-abcdefgh.tmp"
    other = tmp_path / f".notes.json.kit{gone.pid}-abcdefgh.tmp"
    for path in (left, live, other, tmp_path / ".x.tmp"):
        path.write_text("kept?")
    write_named_file(tmp_path / "report.json", b"{}", lambda data: True, "--json")
    assert not left.exists()
    assert live.read_text() == other.read_text() == (tmp_path / ".x.tmp").read_text() == "kept?"
    assert (tmp_path / "report.json").read_bytes() == b"{}"


def test_the_commit_file_moves_last_and_its_old_copy_goes_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An audit's record (``commit``) says its set is whole: a publish stopped after its
    first move leaves neither the old record (with new files beside it) nor the new one."""
    out = tmp_path / "out"
    staging = temporary(out)
    for name in ("z-page.html", "a-record.json"):
        (staging / name).write_text("first")
    publish(staging, out, "test", commit="a-record.json")
    staging = temporary(out)
    for name in ("z-page.html", "a-record.json"):
        (staging / name).write_text("second")
    moved: list[str] = []
    real = os.replace

    def stop_after_one(source: object, target: object) -> None:
        if Path(str(target)).name == MARK:  # the intent mark, written before any move
            return real(source, target)  # type: ignore[arg-type]
        if len(moved) == 1:
            raise OSError("killed")
        moved.append(Path(str(target)).name)
        real(source, target)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "replace", stop_after_one)
    with pytest.raises(OSError, match="killed"):
        publish(staging, out, "test", commit="a-record.json")
    assert moved == ["z-page.html"]  # the record was not moved first, by name order
    assert not (out / "a-record.json").exists()
    monkeypatch.setattr(os, "replace", real)
    staging = temporary(out)
    for name in ("z-page.html", "a-record.json"):
        (staging / name).write_text("third")
    publish(staging, out, "test", commit="a-record.json")
    assert (out / "a-record.json").read_text() == "third"
