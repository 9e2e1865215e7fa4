"""``python -m kit reproduce-all`` (kit.reproduce.command, kit.reproduce.steps,
kit.reproduce.plan, and the command line's parser in kit.cli): the small configuration end
to end and resumed, the plan and its refusals, and the drift study's fetch from the shipped
models (kit.drift.stages.fetch)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kit.claims.fresh import RECORD, fresh_report, verify_fresh
from kit.drift.protocol import PROTOCOL, load_protocol, write_small_protocol
from kit.drift.stages.fetch import SHIPPED_DIGITS, SHIPPED_MANIFEST, run_fetch
from kit.errors import ConfigError, KitError
from kit.files import read_json, sha256
from kit.paths import ROOT
from kit.reproduce.command import beside
from kit.reproduce.plan import Clock, Cost, load_costs, print_plan
from kit.reproduce.steps import ARGV, NOT_SMALL, ORDER, STUDIES, Options, identity, steps_for
from kit.runfolder import Run

STUDY_FOLDERS = ("claims/drift/evidence/digits", "claims/corpus/evidence/kit",
                 "claims/corpus/evidence/detectors", "claims/sciml/evidence/kit",
                 "claims/realdrift/evidence/digits")


def kit(*args: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kit", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[Path, subprocess.CompletedProcess[str]]:
    runs = tmp_path_factory.mktemp("reproduce-all")
    return runs, kit("reproduce-all", "--small", "--runs", str(runs))


def test_the_small_configuration_runs_ships_and_evaluates_every_study(
        small: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    runs, proc = small
    assert proc.returncode == 0, proc.stderr[-3000:]
    state = read_json(runs / "reproduce-all" / "state.json")
    assert sorted(state) == sorted(set(ORDER) - set(NOT_SMALL))
    assert "reproduce-all: sciml-null: left out of --small" in proc.stderr
    assert all(entry["wall_s"] > 0 and entry["cpu_s"] > 0 for entry in state.values())
    fresh = runs / "reproduce-all" / "fresh"
    for folder in STUDY_FOLDERS:
        assert (fresh / folder / "run-manifest.json").is_file(), folder
    # the drift step includes its same-machine replay, whose report ships
    replay = read_json(fresh / "claims/drift/evidence/digits/replay.json")
    assert replay["identical"] is True
    for study in ("corpus", "drift", "realdrift", "sciml"):
        assert f"reproduce-all --small: {study}: " in proc.stdout
    assert "nothing is compared with the shipped evidence" in proc.stdout
    lines = proc.stderr.splitlines()
    assert lines.index(next(x for x in lines if "plan on" in x)) < \
        lines.index(next(x for x in lines if "step 1/5 drift: started" in x))
    # a line as each step starts and ends (the 30 s progress lines aside)
    assert sum("left" in x and "step" in x and "still running" not in x
               for x in lines) == 2 * len(set(ORDER) - set(NOT_SMALL))


@pytest.mark.parametrize("name", ["notes.txt", "claims/notes.md", "manifests/mine/x.txt"])
def test_a_users_file_in_the_fresh_folder_is_refused_and_kept(
        small: tuple[Path, subprocess.CompletedProcess[str]], name: str) -> None:
    """The fresh folder is made again by every call; a file a user put there, at any
    depth, stops it, named, and stays (it was deleted with the folder)."""
    runs, first = small
    assert first.returncode == 0
    notes = runs / "reproduce-all" / "fresh" / name
    notes.parent.mkdir(exist_ok=True)
    notes.write_text("mine")
    try:
        proc = kit("reproduce-all", "--small", "--runs", str(runs), "--only", "corpus")
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert f"fresh: holds files the kit did not write there or changed since ({name})" \
            in proc.stderr
        assert notes.read_text() == "mine"
    finally:
        notes.unlink()
        if notes.parent.name == "mine":
            notes.parent.rmdir()


def test_a_rerun_keeps_every_finished_step(
        small: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    runs, first = small
    assert first.returncode == 0
    proc = kit("reproduce-all", "--small", "--runs", str(runs), "--only", "corpus")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "2 steps (2 already finished)" in proc.stderr
    assert proc.stderr.count("kept from an earlier run") == 2
    assert "started" not in proc.stderr


def test_a_step_whose_folder_or_options_changed_runs_again(
        small: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    runs, first = small
    assert first.returncode == 0
    record = runs / "corpus" / "corpus" / "corpus.json"
    kept = record.read_bytes()
    record.write_bytes(kept + b" ")  # the folder no longer agrees with its run manifest
    try:
        proc = kit("reproduce-all", "--small", "--runs", str(runs), "--only", "corpus",
                   "--plan")
    finally:
        record.write_bytes(kept)
    assert proc.returncode == 0, proc.stderr
    assert "2 steps (1 already finished)" in proc.stderr
    assert "1. corpus: about" in proc.stderr
    options = Options(runs=runs, small=True)
    assert identity(options, "sciml") != identity(
        Options(runs=runs, small=True, without_physicsnemo=True), "sciml")
    assert identity(options, "drift") == identity(
        Options(runs=runs, small=True, workers=1, scheduler="tcp://h:1"), "drift")


def test_the_sweep_alone_is_judged_with_the_drift_run_its_fault_matrix_came_from(
        small: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path) -> None:
    """``--only realdrift`` after an earlier call's drift run: the sweep's Polygraphy fault
    matrix was computed from that run, so it ships beside the sweep to be recounted
    against, and is not judged; a drift run changed since is refused by name."""
    runs, first = small
    assert first.returncode == 0
    proc = kit("reproduce-all", "--small", "--runs", str(runs), "--only", "realdrift")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "shipping drift into" in proc.stderr
    assert "(not judged: the sweep's" in proc.stderr
    fresh = runs / "reproduce-all" / "fresh"
    assert (fresh / "claims/drift/evidence/digits/score/score.json").is_file()
    assert "fault-matrix" not in proc.stdout  # every realdrift claim recomputed
    options = Options(runs=runs, small=True)
    assert beside(options, ["sweep"]) == ["drift"]
    assert beside(options, ["drift", "sweep"]) == beside(options, ["corpus"]) == []
    assert beside(Options(runs=tmp_path, small=True), ["sweep"]) == []  # no fault matrix
    score = options.folder("drift") / "score" / "score.json"
    kept = score.read_bytes()
    score.write_bytes(kept + b" ")
    try:
        with pytest.raises(KitError, match="no longer agrees with its run manifest"):
            beside(options, ["sweep"])
    finally:
        score.write_bytes(kept)


def test_a_study_shipped_only_in_support_is_recounted_against_not_judged(
        tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    sweep, drift = "claims/realdrift/evidence/digits", "claims/drift/evidence/digits"
    shutil.copytree(ROOT / sweep, fresh / sweep)
    with pytest.raises(KitError, match=r"drift evidence it was computed from .* is missing"):
        fresh_report(fresh)
    shutil.copytree(ROOT / drift, fresh / drift)
    page = tmp_path / "replay" / "index.html"
    assert verify_fresh(fresh, out=page, support=["drift/digits"]) == 0
    record = read_json(fresh / RECORD)
    assert sorted(record["studies"]) == ["realdrift/digits"]
    assert record["studies"]["realdrift/digits"]["support"] == ["drift/digits"]
    assert "recounted against drift/digits (not judged)" in page.read_text()
    assert sorted(fresh_report(fresh)["studies"]) == ["drift/digits", "realdrift/digits"]


def test_a_step_finished_before_the_kit_changed_is_not_kept(tmp_path: Path) -> None:
    """A finished step is kept on a rerun only under the same code, protocols and locks: a
    corpus run of the earlier cases, kept after a protocol added seven, shipped 15 cases
    against evidence of 22. The plan's cost table and byte-code caches do not count."""
    root = tmp_path / "checkout"
    shutil.copytree(ROOT / "kit", root / "kit", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "locks", root / "locks")
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    options = Options(runs=tmp_path / "runs")
    before = identity(options, "corpus", root)
    (root / "kit" / "reproduce" / "costs.toml").write_text("# another plan\n")
    (root / "kit" / "__pycache__").mkdir(exist_ok=True)
    (root / "kit" / "__pycache__" / "x.pyc").write_bytes(b"x")
    assert identity(options, "corpus", root) == before
    protocol = root / "kit" / "protocols" / "corpus.yaml"
    protocol.write_text(protocol.read_text() + "\n# version 5\n")
    assert identity(options, "corpus", root) != before


def test_the_plan_is_printed_and_stops(tmp_path: Path) -> None:
    proc = kit("reproduce-all", "--plan", "--runs", str(tmp_path / "runs"), "--only",
               "drift", "realdrift")
    assert proc.returncode == 0, proc.stderr
    assert "2 steps (0 already finished)" in proc.stderr
    assert "1. drift: about" in proc.stderr
    assert "2. sweep: about" in proc.stderr
    assert not (tmp_path / "runs" / "digits").exists()


@pytest.mark.parametrize(("args", "says"), [
    (["--only", "drfit"], "--only drfit: no such study or step"),
    (["--small", "--models", "shipped"], "the shipped models belong to the full one"),
    (["--workers", "0"], "workers must be at least 1"),
])
def test_bad_options_are_refused_before_any_work(args: list[str], says: str,
                                                 tmp_path: Path) -> None:
    proc = kit("reproduce-all", "--runs", str(tmp_path / "runs"), *args)
    assert proc.returncode == 2
    assert says in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "runs" / "digits").exists()


def test_steps_follow_the_order_and_the_studies() -> None:
    assert steps_for(None) == list(ORDER)
    assert steps_for(["sciml"]) == ["sciml", "sciml-null"]
    assert steps_for(["sciml"], small=True) == ["sciml"]  # the null is the full study's
    assert ARGV["sciml-null"](Options(runs=Path("/r"))) == [
        ["sciml", "--run", "/r/sciml-null", "--models", "null"]]
    assert steps_for(["realdrift", "corpus"]) == ["corpus", "corpus-detectors", "sweep"]
    # every step name the plan prints is accepted, alone or beside a study
    assert steps_for(["corpus-detectors"]) == ["corpus-detectors"]
    assert steps_for(["sweep", "corpus", "corpus-detectors"]) == [
        "corpus", "corpus-detectors", "sweep"]
    for step in ORDER:  # "corpus" names its study too: both its steps
        assert steps_for([step]) == list(STUDIES.get(step, (step,)))


def test_the_clock_updates_the_time_left_from_the_pace_so_far() -> None:
    """A step that took twice its recorded cost doubles the estimate of the rest, and a
    running step past its estimate is never shown with time it has already used up."""
    clock = Clock({"a": 100.0, "b": 300.0}, started=0.0)
    assert clock.left() == 400.0
    clock.finish("a", 200.0)
    assert clock.pace() == 2.0
    assert clock.left() == 600.0
    assert clock.left("b", 250.0) == 350.0
    assert clock.left("b", 900.0) == 0.0
    assert "at 2.0x the recorded costs" in clock.line(500.0)


def test_expected_time_and_disk_refusal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    cost = Cost(cpu_s=1000, wall_s=625, cores=2, disk_mb=10, source="test")
    assert cost.expected_s(2) == pytest.approx(625)  # 80% of 2 cores busy
    assert cost.expected_s(8) == pytest.approx(1000 / (8 * 0.8))
    costs = {"drift": cost, "sweep": Cost(100, 100, 1, 5e9, "test")}
    assert print_plan(["drift"], set(), costs, tmp_path) == pytest.approx(
        cost.expected_s(os.cpu_count() or 1))
    with pytest.raises(KitError, match="MB free, the plan needs about"):
        print_plan(["drift", "sweep"], set(), costs, tmp_path)
    print_plan(["drift", "sweep"], {"sweep"}, costs, tmp_path)  # a kept step needs no disk
    assert "sweep: finished, kept" in capsys.readouterr().err
    print_plan(["drift", "sweep"], set(), costs, tmp_path, refuse=False)  # --plan: says so
    assert "not enough disk to run" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="no recorded cost for corpus"):
        print_plan(["corpus"], set(), costs, tmp_path)


def test_every_step_has_a_recorded_cost_and_a_bad_table_is_refused(tmp_path: Path) -> None:
    for small in (False, True):
        steps = [s for s in load_costs(small) if s in ORDER]
        assert sorted(steps) == sorted(set(ORDER) - (set(NOT_SMALL) if small else set()))
        # the rest are a step's cost for one source of its models
        assert {s.rsplit("-", 1)[0] for s in set(load_costs(small)) - set(ORDER)} <= set(ORDER)
        assert {s.rsplit("-", 1)[1] for s in set(load_costs(small)) - set(ORDER)} <= {
            "train", "shipped"}
    bad = tmp_path / "costs.toml"
    bad.write_text('[full.drift]\ncpu_s = "a lot"\n')
    with pytest.raises(ConfigError, match=r"\[full.drift\] needs exactly"):
        load_costs(False, bad)


def test_fetch_from_the_shipped_models_is_the_shipped_stage(tmp_path: Path) -> None:
    run = Run(tmp_path / "run")
    run_fetch(load_protocol(PROTOCOL), run, "digits", source="shipped")
    assert sha256(run.root / "fetch" / "fetch.json") == \
        sha256(SHIPPED_DIGITS / "fetch" / "fetch.json")
    listed = read_json(SHIPPED_DIGITS / SHIPPED_MANIFEST)["files"]
    fetched = [name for name in listed if name.startswith("fetch/")]
    assert len(fetched) == 8  # the dataset, the record, three plain and three instrumented
    for name in fetched:
        assert sha256(run.root / name) == listed[name], name
    cache = json.loads((run.root / "training-cache.json").read_text())
    assert {m["from"] for m in cache["models"].values()} == {"shipped evidence"}


def test_a_changed_shipped_model_or_another_recipe_is_refused(tmp_path: Path) -> None:
    shipped = tmp_path / "shipped"
    shutil.copytree(SHIPPED_DIGITS / "fetch", shipped / "fetch")
    shutil.copy(SHIPPED_DIGITS / SHIPPED_MANIFEST, shipped / SHIPPED_MANIFEST)
    model = shipped / "fetch" / "models" / "resnet20.onnx"
    data = bytearray(model.read_bytes())
    data[-1] ^= 1
    model.write_bytes(bytes(data))
    with pytest.raises(KitError, match=r"resnet20.onnx: sha256 .* is not the shipped fetch"):
        run_fetch(load_protocol(PROTOCOL), Run(tmp_path / "a"), "digits", source="shipped",
                  shipped=shipped)
    small = load_protocol(write_small_protocol(tmp_path / "small.yaml"))
    with pytest.raises(KitError, match="was not trained by this protocol's recipe"):
        run_fetch(small, Run(tmp_path / "b"), "digits", source="shipped")
    with pytest.raises(KitError, match="digits only"):
        run_fetch(small, Run(tmp_path / "c"), "cifar100", source="shipped")


def test_every_step_starts_from_the_shipped_weights_on_a_cpu_that_differs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """auto retrains only on the very CPU that made a study's evidence (same model and
    flags); on any other, every step that trains starts from the shipped weights, the
    sweep included (its BatchNormalization-kept export from the shipped training weights);
    a retrain elsewhere is judged by the spread."""
    from kit.machine import fingerprint
    from kit.reproduce import command

    here = fingerprint()
    record = tmp_path / "machine.json"
    monkeypatch.setattr(command, "MODEL_EVIDENCE", dict.fromkeys(command.MODEL_EVIDENCE, record))
    steps = ["drift", "corpus", "corpus-detectors", "sciml", "sweep"]
    record.write_text(json.dumps(here))
    assert command.resolve_models("auto", False, steps) == {
        "drift": "train", "corpus-detectors": "train", "sciml": "train", "sweep": "train"}
    for other in ({**here, "cpu": "another model"}, {**here, "cpu_flags_sha256": "0" * 64}):
        record.write_text(json.dumps(other))  # the evidence machine's record, faked
        models = command.resolve_models("auto", False, steps)
        assert models == {"drift": "shipped", "corpus-detectors": "shipped",
                          "sciml": "shipped", "sweep": "shipped"}
        assert command.retrained(models) == []
        trained = command.resolve_models("train", False, steps)
        assert command.retrained(trained) == ["corpus/detectors", "drift/digits",
                                              "realdrift/digits", "sciml/kit"]
    record.unlink()  # no record: another CPU
    assert command.resolve_models("auto", False, ["sciml"]) == {"sciml": "shipped"}
    assert command.resolve_models("auto", True, ["sciml"]) == {"sciml": "train"}




@pytest.mark.parametrize("text", ["[]", "null", '"a"', '{"drift": []}',
                                  '{"drift": {"identity": "x", "cores": 2, "wall_s": "1"}}'])
def test_a_state_file_that_is_not_the_kits_is_refused_by_name(tmp_path: Path,
                                                              text: str) -> None:
    """A hand-edited or foreign state.json is a kit: error naming it, never a traceback."""
    _refused_state(tmp_path, text)


@pytest.mark.parametrize(("field", "value", "said"), [
    ("wall_s", str(10 ** 400), "wall_s an integer of 401 digits, outside 0 to"),
    ("cpu_s", "NaN", "cpu_s nan, outside"), ("wall_s", "-1", "wall_s -1, outside"),
    ("cores", "0", "cores 0, outside 1 to"), ("cores", str(10 ** 40), "cores an integer")])
def test_a_state_files_numbers_are_bounded(tmp_path: Path, field: str, value: str,
                                           said: str) -> None:
    """A step record's numbers within their bounds: a kept step's line formats its wall
    and CPU seconds as floats, which an integer of 400 digits overflows."""
    record = {"identity": '"x"', "cores": "2", "wall_s": "1.5", "cpu_s": "3", field: value}
    text = '{"drift": {' + ", ".join(f'"{k}": {v}' for k, v in record.items()) + "}}"
    assert said in _refused_state(tmp_path, text)


def _refused_state(tmp_path: Path, text: str) -> str:
    state = tmp_path / "runs" / "reproduce-all" / "state.json"
    state.parent.mkdir(parents=True)
    state.write_text(text)
    (state.parent / ".lock").touch()  # the kit's folder, its state damaged
    proc = kit("reproduce-all", "--plan", "--runs", str(tmp_path / "runs"), "--only", "drift")
    assert proc.returncode == 2
    assert f"kit: error: {state}: " in proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.stderr


def test_a_step_takes_the_cost_recorded_for_where_its_models_come_from(tmp_path: Path
                                                                       ) -> None:
    table = tmp_path / "costs.toml"
    entry = 'cpu_s = {0}\nwall_s = {0}\ncores = 1\ndisk_mb = 1\nsource = "test"\n'
    table.write_text("[full.sciml]\n" + entry.format(3000) + "[full.sciml-shipped]\n"
                     + entry.format(500))
    assert load_costs(False, table)["sciml"].cpu_s == 3000
    assert load_costs(False, table, {"sciml": "shipped"})["sciml"].cpu_s == 500
    assert load_costs(False, table, {"sciml": "train"})["sciml"].cpu_s == 3000


def test_a_step_of_several_commands_keeps_one_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The drift step runs the study, then its replay: the progress line's time so far and
    time left run over both (one heartbeat), never from zero again at the second command."""
    import contextlib

    from kit.reproduce import steps

    clocks: list[tuple[str, float | None]] = []

    @contextlib.contextmanager
    def heartbeat(what: str, expected: float | None = None) -> Any:
        clocks.append((what, expected))
        yield

    ran: list[list[str]] = []
    monkeypatch.setattr(steps, "heartbeat", heartbeat)
    monkeypatch.setattr(steps, "run_child", lambda argv, **_: (ran.append(argv), 0)[1])
    steps.run_step(Options(runs=Path("/r")), "drift", expected_s=3000.0)
    assert len(ran) == len(ARGV["drift"](Options(runs=Path("/r")))) == 2
    assert clocks == [("reproduce-all: step drift", 3000.0)]


def test_a_users_protocol_under_the_runs_root_is_refused_and_kept(tmp_path: Path) -> None:
    """The small protocols go into ``RUNS/protocols``, a folder of the kit's: a file of the
    user's there, named as the kit names its own, is refused and kept with its mode."""
    mine = tmp_path / "protocols" / "drift-small.yaml"
    mine.parent.mkdir()
    mine.write_text("my protocol\n")
    mine.chmod(0o600)
    proc = kit("reproduce-all", "--small", "--only", "corpus", "--runs", str(tmp_path),
               "--plan")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"{mine.parent}: holds files the kit did not write (drift-small.yaml)" in proc.stderr
    assert mine.read_text() == "my protocol\n"
    assert mine.stat().st_mode & 0o777 == 0o600
