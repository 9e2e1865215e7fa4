"""``verify --replay`` removes a ``<run>-replay`` folder only when the kit made it (its
``.kit-replay`` mark); any other folder there is refused naming it, before anything is
made or removed. In its own folder it removes only what an earlier replay wrote: a user's
file there is refused by name and kept (``kits_own``). ``verify --compare`` writes its verdict
to ``FIRST/replay.json`` by ``kit.owned``'s rule (a user's file there is refused and kept,
the kit's replaced keeping its mode, a new one given the mode the umask gives), and reads a
difference only from a plain name its manifest lists, inside the run folder and through no
link."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kit.__main__ import main
from kit.drift.replay import check_target, prepare
from kit.errors import KitError
from kit.runfolder import LOCK, MANIFEST, REPLAY, REPLAY_MARK, hashed_files, write_manifest

ORDER = ("fetch", "split", "score")


def test_a_replay_folder_the_kit_did_not_make_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, target = tmp_path / "run", tmp_path / "run-replay"
    (target / "data").mkdir(parents=True)
    (target / "data" / "keep.txt").write_text("the user's")
    assert main(["verify", "--replay", "--run", str(first), "--small"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kit: error: {target}: a folder the kit did not make (no "
                          f"{REPLAY_MARK} mark)")
    assert (target / "data" / "keep.txt").read_text() == "the user's"
    assert sorted(p.name for p in target.iterdir()) == ["data"]
    assert not first.exists()  # refused before the first run folder was made


def test_replay_refuses_a_users_replay_json_before_it_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The verdict's file is checked before the replay starts, not after it ran."""
    first = tmp_path / "run"
    first.mkdir()
    (first / REPLAY).write_text("the user's notes\n")
    assert main(["verify", "--replay", "--run", str(first), "--small"]) == 2
    assert capsys.readouterr().err.startswith(f"kit: error: {first / REPLAY}: a file the "
                                              "kit did not write")
    assert sorted(p.name for p in first.iterdir()) == [REPLAY]
    assert not (tmp_path / "run-replay").exists()


def test_a_link_in_the_first_runs_stages_is_refused(tmp_path: Path) -> None:
    first, target = tmp_path / "run", tmp_path / "run-replay"
    for stage in ORDER:
        (first / stage).mkdir(parents=True)
    (tmp_path / "host.txt").write_text("the user's")
    (first / "split" / "rows.json").symlink_to(tmp_path / "host.txt")
    with pytest.raises(KitError, match=r"rows\.json: a symbolic link in the first run"):
        prepare(first, target, ("score",), ORDER)
    assert not (target / "split").exists()


def test_a_file_at_the_replay_path_is_refused(tmp_path: Path) -> None:
    (tmp_path / "run-replay").write_text("the user's")
    with pytest.raises(KitError, match="run-replay: is not a folder"):
        check_target(tmp_path / "run-replay")
    assert (tmp_path / "run-replay").read_text() == "the user's"


def test_the_kits_replay_folder_is_marked_and_made_again(tmp_path: Path) -> None:
    first, target = tmp_path / "run", tmp_path / "run-replay"
    for stage in ORDER:
        (first / stage).mkdir(parents=True)
        (first / stage / f"{stage}.json").write_text("{}")
    prepare(first, target, ("score",), ORDER)
    assert (target / REPLAY_MARK).is_file()
    assert sorted(p.name for p in target.iterdir()) == sorted(
        [".lock", REPLAY_MARK, "fetch", "split"])
    assert (target / "fetch" / "fetch.json").stat().st_ino == \
        (first / "fetch" / "fetch.json").stat().st_ino  # hard-linked
    (target / "score").mkdir()
    (target / "score" / "old.npz").write_text("an earlier replay's")
    prepare(first, target, ("split", "score"), ORDER)  # the kit's own folder: emptied
    assert sorted(p.name for p in target.iterdir()) == sorted([".lock", REPLAY_MARK, "fetch"])
    assert REPLAY_MARK not in {p.name for p in hashed_files(target)}  # not a result


def test_the_small_protocol_goes_to_the_kits_cache_never_beside_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``verify --replay --small --run D/first`` once wrote ``D/first-protocol.yaml`` over
    a user's file of that name; the protocol now lives in the kit's cache."""
    import kit.drift.stages.pipeline as pipeline

    monkeypatch.setenv("KIT_CACHE", str(tmp_path / "cache"))
    theirs = tmp_path / "first-protocol.yaml"
    theirs.write_text("the user's")
    theirs.chmod(0o600)

    def stop(*args: object, **options: object) -> None:
        raise KitError(f"stopped with {options['protocol_file']}")

    monkeypatch.setattr(pipeline, "reproduce", stop)
    assert main(["verify", "--replay", "--run", str(tmp_path / "first"), "--small"]) == 2
    assert f"stopped with {tmp_path / 'cache'}/protocols/small.yaml" in capsys.readouterr().err
    assert theirs.read_text() == "the user's"
    assert theirs.stat().st_mode & 0o777 == 0o600


def _earlier_replay(first: Path, target: Path) -> None:
    for stage in ORDER:
        (first / stage).mkdir(parents=True)
        (first / stage / f"{stage}.json").write_text("{}")
    prepare(first, target, ("score",), ORDER)
    (target / "score").mkdir()
    (target / "score" / "old.npz").write_text("an earlier replay's")
    (target / "timings.json").write_text("{}")
    write_manifest(target)  # the earlier replay finished


@pytest.mark.parametrize("theirs", ["notes.txt", "score/mine.txt", "report.bak/x"])
def test_a_users_file_in_the_kits_replay_folder_is_refused_and_kept(
        tmp_path: Path, theirs: str) -> None:
    first, target = tmp_path / "run", tmp_path / "run-replay"
    _earlier_replay(first, target)
    (target / theirs).parent.mkdir(parents=True, exist_ok=True)
    (target / theirs).write_text("the user's")
    before = sorted(p.relative_to(target).as_posix() for p in target.rglob("*"))
    with pytest.raises(KitError, match=f"{target / theirs.split('/')[0]}.*: not a file the "
                                       "kit's replay wrote"):
        prepare(first, target, ("split", "score"), ORDER)
    assert (target / theirs).read_text() == "the user's"
    assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*")) == before
    (target / theirs).unlink()  # moved away: the replay goes on, and takes only its own
    if theirs.startswith("report.bak"):
        (target / "report.bak").rmdir()
    prepare(first, target, ("split", "score"), ORDER)
    assert sorted(p.name for p in target.iterdir()) == sorted([".lock", REPLAY_MARK, "fetch"])


SECRET = "root:x:0:0:the host's secret line"


def _runs(tmp_path: Path, replayed: str = "the replay's line") -> tuple[Path, Path]:
    """Two finished run folders (the kit's: its released lock), in folders of their own,
    whose one text output differs (the first line)."""
    runs = tmp_path / "a" / "run", tmp_path / "b" / "run"
    for root, line in zip(runs, ("the first run's line", replayed), strict=True):
        (root / "score").mkdir(parents=True)
        (root / LOCK).write_text("")
        (root / "score" / "summary.txt").write_text(line + "\n")
        write_manifest(root)
    return runs


def test_compare_refuses_a_users_replay_json_and_replaces_its_own_keeping_its_mode(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = _runs(tmp_path)
    theirs = first / REPLAY
    theirs.write_text('{"mine": true}\n')
    theirs.chmod(0o640)
    assert main(["verify", "--compare", str(first), str(second)]) == 2
    assert capsys.readouterr().err.startswith(f"kit: error: {theirs}: a file the kit did "
                                              "not write; move it")
    assert theirs.read_text() == '{"mine": true}\n'
    assert theirs.stat().st_mode & 0o777 == 0o640
    theirs.unlink()
    assert main(["verify", "--compare", str(first), str(second)]) == 1
    theirs.chmod(0o600)
    assert main(["verify", "--compare", str(first), str(second)]) == 1  # the kit's: replaced
    report = json.loads(theirs.read_text())
    assert report["first_difference"] == {"file": "score/summary.txt", "line": 1,
                                          "first": "the first run's line",
                                          "replay": "the replay's line"}
    assert theirs.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("name", ["../host.txt", "score/../../host.txt", "{tmp}/b/host.txt",
                                  "score//summary.txt"])
def test_compare_refuses_a_manifest_entry_that_is_not_a_plain_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    first, second = _runs(tmp_path)
    (tmp_path / "a" / "host.txt").write_text("another line\n")
    (tmp_path / "b" / "host.txt").write_text(SECRET + "\n")
    name = name.format(tmp=tmp_path)
    for root, digest in ((first, "0"), (second, "1")):
        (root / MANIFEST).write_text(json.dumps({"files": {name: digest * 64}}))
    assert main(["verify", "--compare", str(first), str(second)]) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"kit: error: {first / MANIFEST}: a files entry {name!r} is not a "
                          "relative path of plain names")
    assert SECRET not in out + err
    assert not (first / REPLAY).exists()


@pytest.mark.parametrize("link", ["file", "folder", "inside"])
def test_compare_reads_no_difference_through_a_link(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], link: str) -> None:
    """A replay's output that is a link to a host file (or under a linked folder, or a
    link to another file of the run) is refused naming the manifest and the entry; the
    host file's lines reach neither the report nor the output."""
    first, second = _runs(tmp_path)
    host = tmp_path / "host"
    host.mkdir()
    (host / "summary.txt").write_text(SECRET + "\n")
    (second / "score" / "summary.txt").unlink()
    if link == "file":
        (second / "score" / "summary.txt").symlink_to(host / "summary.txt")
    elif link == "folder":
        (second / "score").rmdir()
        (second / "score").symlink_to(host)
    else:
        (second / "score" / "other.txt").write_text(SECRET + "\n")
        (second / "score" / "summary.txt").symlink_to("other.txt")
    (second / MANIFEST).write_text(json.dumps({"files": {"score/summary.txt": "0" * 64}}))
    assert main(["verify", "--compare", str(first), str(second)]) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"kit: error: {second / MANIFEST}: a files entry "
                          "'score/summary.txt' ")
    assert ("leads out of" if link != "inside" else "through a symbolic link") in err
    assert SECRET not in out + err
    assert not (first / REPLAY).exists()


@pytest.mark.parametrize(("mask", "mode"), [(0o077, 0o600), (0o022, 0o644)])
def test_compare_writes_a_new_report_with_the_mode_the_umask_gives(
        tmp_path: Path, mask: int, mode: int) -> None:
    """``FIRST/replay.json`` was 0644 whatever the user's umask."""
    first, second = _runs(tmp_path)
    old = os.umask(mask)
    try:
        assert main(["verify", "--compare", str(first), str(second)]) == 1
    finally:
        os.umask(old)
    assert (first / REPLAY).stat().st_mode & 0o777 == mode
