"""``python -m kit audit`` (kit.audit.command, kit.audit.cells, kit.audit.model,
kit.audit.calibrate, kit.audit.screen, kit.audit.oracle, kit.audit.bisect, kit.audit.report,
and its benchmark kit.audit.bench): end to end on the two releases the default tests
build, with a small conv net (within clean drift), a graph both releases compute bit for
bit (no envelope needed) and with the corpus's Pad-into-AveragePool case (beyond it,
localised, named by the screen); models an exporter writes that the kit did not (scalars,
text, a similarity matrix, a shape a release changes); the screen on every corpus case;
the refusals before anything runs; the calibration's arithmetic."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from kit.__main__ import main
from kit.audit.bench import bench_audit
from kit.audit.calibrate import calibrate, scores, verdict
from kit.audit.model import Cell, load_protocol
from kit.audit.screen import affected, matches, screen
from kit.corpus.cases import CASES
from kit.paths import ROOT

PROTOCOL = load_protocol()
PAIR = ("1.20.1", "1.29.0")


def audit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kit", "audit", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, check=False)


def case_files(tmp: Path, case_id: str) -> tuple[Path, Path]:
    case = next(c for c in CASES if c.id == case_id)
    built = case.build(0)
    model, inputs = tmp / f"{case_id}.onnx", tmp / f"{case_id}.npz"
    onnx.save(built.model, str(model))
    np.savez(inputs, **built.inputs)
    return model, inputs


def test_a_small_conv_net_moves_within_clean_drift(convnet_onnx: Path, tmp_path: Path) -> None:
    inputs = tmp_path / "x.npz"
    x = np.random.default_rng(0).standard_normal((8, 3, 32, 32)).astype(np.float32)
    np.savez(inputs, **{onnx.load(str(convnet_onnx)).graph.input[0].name: x})
    out = tmp_path / "report"
    proc = audit(str(convnet_onnx), "--inputs", str(inputs), "--from", f"{PAIR[0]}/disable_all",
                 "--to", PAIR[1], "--out", str(out), "--workers", "1",
                 "--envelope")  # the clean pairs even where this CPU gives identical bits
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads((out / "audit.json").read_text())
    assert record["verdict"] == "within clean drift"
    assert record["sides"]["to"] == {"release": PAIR[1], "level": "enable_all", "threads": 1}
    [row] = record["outputs"].values()
    assert row["audited_max"] <= row["tau"]
    assert row["polygraphy_verdict"] in ("passes", "fails")
    assert record["first_moving"] is None
    assert record["exposed"] is None  # within: the instrumented copy never ran
    assert not (out / "work" / "probe.onnx").exists()
    assert len(record["clean_pairs"]) == 8  # three other levels and two threads, per side
    assert "within clean drift" in (out / "index.html").read_text()
    kept = sorted(p.name for p in (out / "work" / "outputs").rglob("*.npz"))
    assert kept == ["plain-inputs.npz"] * 10  # the instrumented outputs scored and removed
    timed = bench_audit(out)  # the audit's time against the two runtimes' own inference
    assert timed["floor_s"] > 0
    assert timed["ratio"] == round(record["wall_s"] / timed["floor_s"], 1)


def test_the_audits_files_take_the_umask_but_what_the_worker_reads_stays_readable(
        convnet_onnx: Path, tmp_path: Path) -> None:
    """Under a umask of 0o077 the report and record are 0600; the model and inputs in
    ``work/``, which the docker worker reads as the image's own user, stay 0644."""
    inputs = tmp_path / "x.npz"
    x = np.random.default_rng(0).standard_normal((8, 3, 32, 32)).astype(np.float32)
    np.savez(inputs, **{onnx.load(str(convnet_onnx)).graph.input[0].name: x})
    out = tmp_path / "report"
    old = os.umask(0o077)
    try:
        proc = audit(str(convnet_onnx), "--inputs", str(inputs), "--from", PAIR[0], "--to",
                     PAIR[1], "--out", str(out), "--workers", "1")
    finally:
        os.umask(old)
    assert proc.returncode == 0, proc.stderr[-2000:]
    modes = {name: (out / name).stat().st_mode & 0o777 for name in
             ("audit.json", "index.html", "work/model.onnx", "work/inputs.npz")}
    assert modes == {"audit.json": 0o600, "index.html": 0o600, "work/model.onnx": 0o644,
                     "work/inputs.npz": 0o644}


def test_a_pair_that_agrees_bit_for_bit_needs_no_envelope_unless_asked(tmp_path: Path) -> None:
    """Protocol version 6: the audited pair runs first; where every output agrees in every
    bit the clean pairs are not run (a zero difference is within every envelope), and
    ``--envelope`` runs them all the same, to the same verdict."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "c"], ["s"], name="add"),
         helper.make_node("Relu", ["s"], ["y"], name="relu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor("c", TensorProto.FLOAT, [4], [0.5, -1.0, 2.0, 0.0])])
    model = tmp_path / "add.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              str(model))
    inputs = tmp_path / "x.npz"
    np.savez(inputs, x=np.random.default_rng(1).standard_normal((8, 4)).astype(np.float32))
    records = {}
    for extra in ([], ["--envelope"]):
        out = tmp_path / f"report{len(extra)}"
        proc = audit(str(model), "--inputs", str(inputs), "--from", PAIR[0], "--to", PAIR[1],
                     "--out", str(out), "--workers", "1", *extra)
        assert proc.returncode == 0, proc.stderr[-2000:]
        records[len(extra)] = record = json.loads((out / "audit.json").read_text())
        assert record["verdict"] == "within clean drift"
        assert record["outputs"]["y"]["identical_share"] == 1.0
        kept = list((out / "work" / "outputs").rglob("*.npz"))
        assert len(kept) == len(record["cells"])
    quick, whole = records[0], records[1]
    # the default backend: venv here, docker where a Docker daemon answers (CI), whose
    # workers start per batch and are not counted (null, never an empty count)
    from kit.runtime.backends import select_backend

    serving = select_backend(None) == "venv"
    assert quick["worker_processes"] == ({PAIR[0]: 1, PAIR[1]: 1} if serving else None)
    assert quick["envelope"] == "not run: bit-identical"
    assert quick["cells"] == [f"{PAIR[0]}/enable_all/t1", f"{PAIR[1]}/enable_all/t1"]
    assert quick["clean_pairs"] == []
    assert quick["outputs"]["y"]["tau"] is None
    assert "bit-identical on every input" in quick["why"]
    assert whole["envelope"] == "run"
    assert len(whole["cells"]) == 10
    assert len(whole["clean_pairs"]) == 8
    assert whole["outputs"]["y"]["tau"] == PROTOCOL["alarm"]["floor"]


def test_same_bits_tells_a_signed_zero_and_a_dtype() -> None:
    from kit.audit.command import same_bits

    a = np.array([0.0, 1.0, np.nan], np.float32)
    assert same_bits(a, a.copy())
    assert not same_bits(a, np.array([-0.0, 1.0, np.nan], np.float32))
    assert not same_bits(a, a.astype(np.float64))
    assert not same_bits(a, a.reshape(1, 3))
    assert same_bits(np.array(["a", "b"]), np.array(["a", "b"]))
    assert not same_bits(np.array(["a", "b"]), np.array(["a", "c"]))


def test_a_known_defect_is_beyond_clean_drift_localised_and_named(tmp_path: Path) -> None:
    model, inputs = case_files(tmp_path, "pad-avgpool-fusion")
    out = tmp_path / "report"
    proc = audit(str(model), "--inputs", str(inputs), "--from", PAIR[0], "--to", PAIR[1],
                 "--out", str(out), "--workers", "1", "--backend", "venv")
    assert proc.returncode == 1, proc.stderr[-2000:]
    record = json.loads((out / "audit.json").read_text())
    assert record["verdict"] == "beyond clean drift"
    # three rounds (the pair, its clean pairs, the instrumented copy), one worker a release
    # (the venv backend named: where a Docker daemon answers, as in CI, the default is
    # docker, whose workers start per batch)
    assert record["worker_processes"] == {PAIR[0]: 1, PAIR[1]: 1}
    assert record["outputs"]["y"]["audited_rate"] == 1.0
    assert record["outputs"]["y"]["polygraphy_verdict"] == "fails"
    assert record["first_moving"]["node"] == "avgpool"
    assert record["first_moving"]["op"] == "AveragePool"
    # the Pad the fusion joins stays unexposed, and is named where the move may start
    assert record["first_moving"]["upstream"] == "pad (Pad)"
    assert "pad (Pad)" in (out / "index.html").read_text()
    [row] = record["screen"]
    assert (row["case"], row["from"], row["to"], row["fixed_in"]) == \
        ("pad-avgpool-fusion", "affected", "fixed", "1.21.1")
    assert record["known_defects_affecting"] == ["pad-avgpool-fusion"]
    # onnx's reference implementation sides with the release that fixed the defect
    assert record["oracle"]["ran"]
    assert record["oracle"]["outputs"]["y"]["closer"] == "to"
    assert "Which side is right" in (out / "index.html").read_text()
    # inside the affected release the level pair that fuses carries the defect: named
    unstable = [record["clean_pairs"][i] for i in record["outputs"]["y"]["unstable"]]
    assert "1.20.1/enable_all/t1 vs 1.20.1/disable_all/t1" in unstable
    shown = re.sub(r"<[^>]+>", "", (out / "index.html").read_text())  # numbers are in spans
    assert "1.20.1/enable_all/t1 vs 1.20.1/disable_all/t1" in shown


def test_the_instrumented_copy_exposes_integer_and_boolean_outputs_and_names_upstream(
        tmp_path: Path) -> None:
    """Protocol version 3: an ArgMax's int64 and an Equal's boolean output are exposed (version
    2 exposed floating-point outputs only, so a move there was seen one node late), a Pad
    before a pool stays unexposed and is named upstream of the pool, and a constant is not."""
    from onnx import TensorProto, helper

    from kit.audit.model import load_protocol, probe

    nodes = [helper.make_node("Constant", [], ["pads"], name="pads_c",
                              value=helper.make_tensor("v", TensorProto.INT64, [8],
                                                       [0, 0, 1, 1, 0, 0, 1, 1])),
             helper.make_node("Pad", ["x", "pads"], ["p"], name="pad"),
             helper.make_node("AveragePool", ["p"], ["a"], name="pool", kernel_shape=[2, 2]),
             helper.make_node("ArgMax", ["a"], ["i"], name="argmax", axis=1),
             helper.make_node("Equal", ["i", "zero"], ["e"], name="eq"),
             helper.make_node("Cast", ["e"], ["y"], name="cast", to=TensorProto.FLOAT)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 2, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("zero", TensorProto.INT64, [], [0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    exposed = probe(model, tmp_path / "probe.onnx", load_protocol()["localisation"]["op_types"])
    assert [(e["node"], e["upstream"]) for e in exposed] == [
        ("pool", "pad (Pad)"), ("argmax", ""), ("eq", ""), ("cast", "")]
    copy = onnx.load(str(tmp_path / "probe.onnx"))
    assert [o.name for o in copy.graph.output] == ["y", "a", "i", "e"]
    assert {o.name: o.type.tensor_type.elem_type for o in copy.graph.output}["i"] == \
        TensorProto.INT64


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_screen_finds_every_corpus_case_in_its_own_model(case: object) -> None:
    built = case.build(0)  # type: ignore[attr-defined]
    found = [row["case"] for row in screen(built.model, {
        "from": Cell(case.affected[0], case.level),  # type: ignore[attr-defined]
        "to": Cell(case.fixed[0], case.level)}, PROTOCOL)]  # type: ignore[attr-defined]
    assert case.id in found  # type: ignore[attr-defined]


def test_the_screen_reads_chains_attributes_and_levels() -> None:
    pad_pool = next(c for c in CASES if c.id == "pad-avgpool-fusion")
    model = pad_pool.build(0).model
    patterns = PROTOCOL["screen"]["patterns"]
    assert matches(model, patterns["pad-avgpool-fusion"]) == [["pad", "avgpool"]]
    assert matches(model, patterns["pad-maxpool-fusion"]) == []
    assert matches(model, patterns["avgpool-ceil-include-pad"]) == []  # count_include_pad=0
    assert affected(pad_pool, Cell("1.20.1", "enable_all")) == "affected"
    assert affected(pad_pool, Cell("1.20.1", "disable_all")) == "not at this level"
    assert affected(pad_pool, Cell("1.29.0", "enable_all")) == "fixed"
    assert affected(pad_pool, Cell("1.15.1", "enable_all")) == "not known"


@pytest.mark.parametrize(("make", "says"), [
    ("not-onnx", "not an ONNX model onnx can load"),
    ("unknown-op", "not an ONNX model onnx can load and check (ValidationError: No Op "
                   "registered for Frobnicate with domain_version of 13)"),
    ("wrong-name", "the model's inputs are ['x']"),
    ("wrong-dtype", "input 'x' is float64, the model takes float32"),
    ("wrong-shape", "input 'x' has shape [8, 2, 4, 5]"),
    ("one-row", "at least 2"),
    ("bad-release", "'1.99.0' is not a release the kit locks"),
    ("bad-level", "'enable_most' is not a graph optimisation level"),
    ("lacking-level", f"--from {PAIR[0]}/enable_layout: onnxruntime {PAIR[0]} offers no "
                      "graph optimisation level enable_layout (it offers disable_all, "
                      "enable_basic, enable_extended, enable_all)"),
    ("bisect-level", "--bisect audits the releases between --from and --to at --to's level "
                     "enable_layout, which these onnxruntime releases do not offer: 1.21.1, "
                     "1.22.1; bisect at a level each offers (disable_all, enable_basic, "
                     "enable_extended, enable_all)"),
    ("same-cell", "the same cell"),
    ("no-inputs", "pad-avgpool-fusion.onnx: --inputs X.npz is needed to run the model (one "
                  "array per graph input: x)"),
    ("bfloat16", "x.npz: the model's input 'x' is bfloat16, which an .npz cannot hold "
                 "(numpy has no bfloat16 dtype"),
    ("float8e4m3fn", "x.npz: the model's input 'x' is float8e4m3fn, which an .npz cannot "
                     "hold (numpy has no float8e4m3fn dtype"),
])
def test_bad_input_is_a_clear_error_before_anything_runs(make: str, says: str,
                                                         tmp_path: Path) -> None:
    model, inputs = case_files(tmp_path, "pad-avgpool-fusion")
    x = np.load(inputs)["x"]
    cells = ["--from", PAIR[0], "--to", PAIR[1]]
    if make == "not-onnx":
        model.write_bytes(b"not a model")
    elif make == "unknown-op":  # onnx's checker says so in three lines
        graph = onnx.load(str(model))
        graph.graph.node[-1].op_type = "Frobnicate"
        onnx.save(graph, str(model))
    elif make == "wrong-name":
        np.savez(inputs, z=x)
    elif make == "wrong-dtype":
        np.savez(inputs, x=x.astype(np.float64))
    elif make == "wrong-shape":
        np.savez(inputs, x=x[:, :, :4])
    elif make == "one-row":
        np.savez(inputs, x=x[:1])
    elif make == "bad-release":
        cells = ["--from", "1.99.0", "--to", PAIR[1]]
    elif make == "bad-level":
        cells = ["--from", f"{PAIR[0]}/enable_most", "--to", PAIR[1]]
    elif make == "lacking-level":  # 1.20.1's worker refused it, once started
        cells = ["--from", f"{PAIR[0]}/enable_layout", "--to", PAIR[1]]
    elif make == "bisect-level":  # 1.29.0 offers it, the releases a bisection visits not all
        cells = ["--from", PAIR[0], "--to", f"{PAIR[1]}/enable_layout", "--bisect"]
    elif make in ("bfloat16", "float8e4m3fn"):  # given as ml_dtypes saves them (raw bytes)
        import ml_dtypes

        elem = getattr(onnx.TensorProto, make.upper())
        onnx.save(onnx.helper.make_model(onnx.helper.make_graph(
            [onnx.helper.make_node("Cast", ["x"], ["y"], to=onnx.TensorProto.FLOAT)], "g",
            [onnx.helper.make_tensor_value_info("x", elem, ["N", 4])],
            [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 4])]),
            opset_imports=[onnx.helper.make_opsetid("", 21)], ir_version=10), str(model))
        inputs = inputs.with_name("x.npz")
        np.savez(inputs, x=np.ones((8, 4), getattr(ml_dtypes, make.replace("8e4", "8_e4"))))
    elif make == "same-cell":
        cells = ["--from", PAIR[1], "--to", PAIR[1]]
    given = [] if make == "no-inputs" else ["--inputs", str(inputs)]
    out = tmp_path / "report"
    proc = audit(str(model), *given, *cells, "--out", str(out))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "jobs of the plain graph" not in proc.stderr  # no worker started
    [line] = [x for x in proc.stderr.splitlines() if x.startswith("kit: error: ")]
    assert says in line
    assert proc.stderr.rstrip("\n").splitlines()[-1] == line  # one line, the last
    assert not out.exists()


def test_a_small_output_is_judged_at_its_own_scale_and_its_flips_decide() -> None:
    """An output of order 1e-6 whose argmax flips on every input was "within clean drift"
    when scores divided by max(1, |a|); judged at its own scale, and by its flips, it is
    beyond. An integer output is compared exactly; an infinity on one side alarms."""
    alarm = PROTOCOL["alarm"]
    rng = np.random.default_rng(2)
    base = rng.uniform(0, 1, (32, 5)) * 1e-6
    clean = [(base, base * (1 + rng.uniform(-1e-7, 1e-7, base.shape))) for _ in range(4)]
    moved = base.copy()
    moved[np.arange(32), base.argmax(axis=1)] = 0.0  # each input's top class drops to 0
    found = calibrate(clean, (base, moved), 16, alarm)
    assert found.scale == pytest.approx(np.median(base.max(axis=1)))
    assert found.flip_rate == 1.0
    assert found.clean_flip_rate == 0.0
    word, why = verdict({"y": found}, alarm["false_alarm_rate"])
    assert word == "beyond clean drift"
    assert "y's argmax moves on 100% of inputs" in why
    labels = np.arange(32)[:, None] % 3
    assert scores(labels, labels).tolist() == [0.0] * 32
    other = labels.copy()
    other[5] += 1
    assert scores(labels, other)[5] == np.inf
    assert scores(labels, other)[4] == 0.0
    ones = np.ones((2, 3))
    assert scores(ones, np.where([[0, 1, 0], [0, 0, 0]], np.inf, ones)).tolist() == [np.inf, 0]
    strings = np.array([["a"], ["b"]])
    assert scores(strings, np.array([["a"], ["c"]])).tolist() == [0.0, np.inf]


def test_the_reference_oracle_names_the_side_nearer_to_it() -> None:
    """``kit.audit.oracle`` on a Conv + Relu model: the oracle runs in float64; the side
    equal to it is nearer, two equal sides are neither, a model it cannot run is said so."""
    from onnx import TensorProto, helper, numpy_helper

    from kit.audit.oracle import judge_sides, which_side

    rng = np.random.default_rng(0)
    weight = rng.standard_normal((2, 1, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 1, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 2, 4, 4])],
        [numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = rng.standard_normal((6, 1, 4, 4)).astype(np.float32)
    from onnx.reference import ReferenceEvaluator

    right = ReferenceEvaluator(model).run(None, {"x": x})[0]
    wrong = right + 1e-2
    found = judge_sides(model, {"x": x}, {"y": wrong}, {"y": right})
    assert (found["ran"], found["precision"], found["inputs"]) == (True, "float64", 4)
    assert found["outputs"]["y"]["closer"] == "to"
    assert found["outputs"]["y"]["from_error"] == pytest.approx(1e-2, rel=1e-3)
    assert judge_sides(model, {"x": x}, {"y": right}, {"y": right})["outputs"]["y"][
        "closer"] == "neither"
    assert which_side(right, right[:, :1], right)["closer"] == "to"  # a shape of its own
    assert which_side(right, right[:, :1], right[:, :1])["closer"].startswith("cannot tell")
    nan = right.copy()
    nan[0, 0, 0, 0] = np.nan
    assert which_side(nan, right, nan)["closer"] == "to"  # a NaN the other side lost
    odd = helper.make_model(helper.make_graph(
        [helper.make_node("NoSuchOp", ["x"], ["y"], domain="kit.test")], "g",
        graph.input, graph.output), opset_imports=[helper.make_opsetid("", 13),
                                                   helper.make_opsetid("kit.test", 1)])
    failed = judge_sides(odd, {"x": x}, {"y": right}, {"y": right})
    assert not failed["ran"]
    assert failed["why"].startswith("onnx.reference could not run the model (")


def test_the_reference_oracle_sides_with_the_fixed_release_on_every_corpus_case() -> None:
    """On each case of the shipped corpus, the first release where the defect was observed
    against the first that fixed it (their shipped outputs, at the level it was observed
    at): onnx's reference implementation is nearer the fixed release on some output and
    nearer the affected one on none."""
    import onnx

    from kit.audit.oracle import judge_sides
    from kit.files import load_npz

    root = ROOT / "claims" / "corpus" / "evidence" / "kit"
    cases = json.loads((root / "corpus" / "cases.json").read_text())["cases"]
    assert len(cases) >= 11
    for case in cases:
        observed = case["decision"]["observed_affected"]
        level = next(lv for lv in ("disable_all", "enable_all") if observed.get(lv))
        folder = root / "cases" / case["id"]
        found = judge_sides(onnx.load(folder / "model.onnx"), load_npz(folder / "inputs.npz"),
                            load_npz(folder / "outputs" / observed[level][0] / f"{level}.npz"),
                            load_npz(folder / "outputs" / case["fixed"][0] / f"{level}.npz"))
        closer = [row["closer"] for row in found["outputs"].values()]
        assert found["ran"], case["id"]
        assert "to" in closer, (case["id"], closer)
        assert set(closer) <= {"to", "neither"}, (case["id"], closer)


def test_scores_and_the_median_envelope() -> None:
    a = np.array([[1.0, 2.0], [10.0, 0.0], [np.nan, 1.0]])
    b = np.array([[1.0, 2.5], [10.0, 0.1], [np.nan, 1.0]])
    assert scores(a, b).tolist() == [0.25, 0.05, 0.0]  # at the output's scale: 2
    assert scores(a, np.array([[1.0, 2.0], [10.0, 0.0], [0.0, 1.0]]))[2] == np.inf
    alarm = PROTOCOL["alarm"]
    rng = np.random.default_rng(1)
    base = rng.standard_normal((20, 4))
    clean = [(base, base + rng.uniform(-1e-7, 1e-7, base.shape)) for _ in range(4)]
    defect = (base, base + 0.5)
    # one clean pair that carries a level-dependent change: it is named, not followed
    found = calibrate([*clean, defect], defect, 10, alarm)
    assert found.tau < 1e-4
    assert found.unstable == (4,)
    assert found.audited_rate == 1.0
    assert verdict({"y": found}, alarm["false_alarm_rate"])[0] == "beyond clean drift"
    quiet = calibrate(clean, clean[0], 10, alarm)
    assert verdict({"y": quiet}, alarm["false_alarm_rate"])[0] == "within clean drift"
    noisy = [(base, base + rng.uniform(-1, 1, base.shape) * (i > 9)[:, None] * 1e-2)
             for i in [np.arange(20)] * 4]
    assert verdict({"y": calibrate(noisy, clean[0], 10, alarm)},
                   alarm["false_alarm_rate"])[0] == "cannot calibrate"


def test_a_work_folder_the_audit_did_not_make_is_refused(tmp_path: Path) -> None:
    model, inputs = case_files(tmp_path, "pad-avgpool-fusion")
    out = tmp_path / "report"
    (out / "work").mkdir(parents=True)
    (out / "work" / "mine.txt").write_text("kept")
    proc = audit(str(model), "--inputs", str(inputs), "--from", PAIR[0], "--to", PAIR[1],
                 "--out", str(out))
    assert proc.returncode == 2
    assert "holds files the kit did not write (work)" in proc.stderr
    assert (out / "work" / "mine.txt").read_text() == "kept"


def test_a_second_audit_keeps_the_users_files_and_replaces_only_its_own(
        tmp_path: Path) -> None:
    """kit.owned: the user's index.html beside nothing is refused; in the audit's own
    folder a file the user added (work/ included) survives the next audit."""
    model, inputs = case_files(tmp_path, "pad-avgpool-fusion")
    out = tmp_path / "report"
    out.mkdir()
    (out / "index.html").write_text("the user's page")
    args = (str(model), "--inputs", str(inputs), "--from", PAIR[0], "--to", PAIR[1],
            "--out", str(out))
    proc = audit(*args)
    assert proc.returncode == 2
    assert (out / "index.html").read_text() == "the user's page"
    (out / "index.html").unlink()
    assert audit(*args).returncode in (0, 1)
    (out / "notes.md").write_text("mine")
    (out / "work" / "mine.txt").write_text("also mine")
    assert audit(*args).returncode in (0, 1)
    assert (out / "notes.md").read_text() == "mine"
    assert (out / "work" / "mine.txt").read_text() == "also mine"
    assert "audit" in (out / "index.html").read_text()


def test_a_fixed_first_axis_takes_whole_runs_of_it(tmp_path: Path) -> None:
    model, inputs = case_files(tmp_path, "pad-avgpool-fusion")
    graph = onnx.load(str(model))
    for value in (*graph.graph.input, *graph.graph.output):
        value.type.tensor_type.shape.dim[0].dim_value = 2
    onnx.save(graph, str(model))
    np.savez(inputs, x=np.load(inputs)["x"][:3])
    proc = audit(str(model), "--inputs", str(inputs), "--from", PAIR[0], "--to", PAIR[1],
                 "--out", str(tmp_path / "report"))
    assert proc.returncode == 2
    assert "fixes its first axis at 2, so the rows (3) must come in whole runs" in proc.stderr
    np.savez(inputs, x=np.load(inputs)["x"][:2].repeat(2, axis=0))
    proc = audit(str(model), "--inputs", str(inputs), "--from", PAIR[0], "--to", PAIR[1],
                 "--out", str(tmp_path / "report"), "--workers", "1")
    assert proc.returncode == 1, proc.stderr[-2000:]  # two runs of two rows: the defect
    record = json.loads((tmp_path / "report" / "audit.json").read_text())
    assert record["verdict"] == "beyond clean drift"
    assert sorted(p.name for p in (tmp_path / "report" / "work").glob("inputs-*.npz")) == \
        ["inputs-00000.npz", "inputs-00001.npz"]


def test_the_screen_alone_needs_no_inputs_and_no_runtime(tmp_path: Path) -> None:
    """A deciding match on an affected side is exit 1; an advisory one (its trigger is in
    the input's size) is shown with its reason and leaves the exit code alone."""
    model, _ = case_files(tmp_path, "avgpool-asym-pads")
    out = tmp_path / "report"
    proc = audit(str(model), "--screen-only", "--from", "1.24.4/disable_all", "--to",
                 "1.25.1/disable_all", "--out", str(out))
    assert proc.returncode == 1  # a known defect affects the from side
    record = json.loads((out / "audit.json").read_text())
    assert record["verdict"] == "screen only"
    assert [(r["case"], r["from"], r["to"], r["decides"]) for r in record["screen"]] == \
        [("avgpool-asym-pads", "affected", "fixed", True)]
    assert record["known_defects_affecting"] == ["avgpool-asym-pads"]
    assert not (out / "work").exists()
    model, _ = case_files(tmp_path, "avgpool-ceil-include-pad")
    proc = audit(str(model), "--screen-only", "--from", "1.28.0/disable_all", "--to",
                 "1.29.0/disable_all", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    record = json.loads((out / "audit.json").read_text())
    assert record["known_defects_affecting"] == []
    assert record["advisory_matches_affecting"] == ["avgpool-ceil-include-pad"]
    assert "partial last window" in (out / "index.html").read_text()
    proc = audit(str(model), "--from", "1.28.0", "--to", "1.29.0", "--out", str(out))
    assert proc.returncode == 2
    assert "--inputs X.npz is needed" in proc.stderr


def test_a_shape_or_dtype_a_release_changes_is_a_finding_naming_both() -> None:
    """A defect that gives an output or tensor another shape in one release: beyond clean
    drift, naming the output and both shapes; no measure of it crashes."""
    from kit.audit.calibrate import describe, first_moving

    alarm = load_protocol()["alarm"]
    rng = np.random.default_rng(0)
    base = rng.normal(size=(20, 10)).astype(np.float32)
    clean = [(base, base)] * 4
    found = calibrate(clean, (base, base[:, :8]), 10, alarm)
    assert found.reshaped == "float32[20, 10] against float32[20, 8]"
    assert (found.audited_rate, found.identical_share) == (1.0, 0.0)
    assert found.as_dict()["audited_max"] is None
    word, why = verdict({"y": found}, alarm["false_alarm_rate"])
    assert word == "beyond clean drift"
    assert "y (float32[20, 10] against float32[20, 8])" in why
    recast = calibrate(clean, (base, base.astype(np.float64)), 10, alarm)
    assert recast.reshaped == "float32[20, 10] against float64[20, 10]"
    measures = describe(base, base[:, :8], "y")
    assert (measures["max_abs"], measures["flips"], measures["polygraphy_fails"]) == (
        None, None, 20)
    moving = first_moving({"t": found}, [{"tensor": "t", "node": "n", "op": "Pad",
                                          "inputs": "x"}], alarm["false_alarm_rate"])
    assert moving is not None
    assert moving["node"] == "n"
    assert moving["reshaped"] == found.reshaped


def test_the_largest_relative_difference_leaves_out_a_zero_reference() -> None:
    """A relative difference where the ``from`` side is 0 is no number (it was the other
    side over the smallest float64, 4.49e+307 for a 1): the largest is over the elements
    where ``from`` is not 0, and where it is 0 at every element there is none, and the
    record says why (the replay's arrays take the same rule)."""
    from kit.audit.calibrate import describe
    from kit.tolerance import largest_relative

    a = np.array([[0.0, 2.0], [0.0, 4.0]], np.float32)
    b = np.array([[1.0, 3.0], [0.0, 4.0]], np.float32)
    found = describe(a, b, "y")
    assert (found["max_abs"], found["max_rel"]) == (1.0, 0.5)
    assert "max_rel_none" not in found
    assert describe(a, a, "y")["max_rel"] == 0.0
    zero = describe(np.zeros((2, 2), np.float32), np.ones((2, 2), np.float32), "y")
    assert (zero["max_abs"], zero["max_rel"]) == (1.0, None)
    assert zero["max_rel_none"].startswith("the from side is 0 at every element")
    assert largest_relative([1.0, 2.0, 3.0], [0.0, np.nan, -4.0]) == 0.75


def test_polygraphy_judges_the_arrays_the_audit_judges_and_its_nan_rule_is_said() -> None:
    """Polygraphy is handed each output in its own dtype, not cast to float32: a float64
    output past float32's range, the same on both sides, became inf - inf = NaN and failed.
    Where it fails inputs the two sides give identically (NaN, infinities: its comparison
    fails a NaN difference), that is its verdict, and the record says why."""
    from kit.audit.calibrate import describe

    big = np.full((2, 3), 1e39)
    found = describe(big, big.copy(), "y")
    assert (found["polygraphy_verdict"], found["polygraphy_fails"]) == ("passes", 0)
    moved = big.copy()
    moved[1] *= 1 + 1e-3
    found = describe(big, moved, "y")
    assert (found["polygraphy_fails"], "polygraphy_note" in found) == (1, False)
    odd = np.array([[np.nan, 1.0], [np.inf, 2.0], [1.0, 2.0]], np.float32)
    found = describe(odd, odd.copy(), "y")
    assert (found["polygraphy_verdict"], found["polygraphy_fails"]) == ("fails", 2)
    assert found["polygraphy_note"].startswith("2 of them identical on both sides, holding "
                                               "NaN or an infinity")


def test_nox_passes_the_audits_exit_status_through(tmp_path: Path) -> None:
    """0, 1 and 2 stay apart through ``nox -s audit`` (a failed session would make both
    1 and 2 read 1)."""
    model, _ = case_files(tmp_path, "pad-avgpool-fusion")

    def nox_audit(*args: str) -> int:
        return subprocess.run([sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"),
                               "-s", "audit", "--", *args], cwd=ROOT, capture_output=True,
                              text=True, timeout=600, check=False).returncode

    assert nox_audit(str(tmp_path / "absent.onnx"), "--screen-only", "--from", "1.20.1",
                     "--to", "1.29.0") == 2
    touched = ("--screen-only", "--from", "1.20.1", "--to", "1.21.1",
               "--out", str(tmp_path / "a"))
    assert nox_audit(str(model), *touched) == 1  # a known defect affects 1.20.1
    clear = ("--screen-only", "--from", "1.28.0", "--to", "1.29.0", "--out", str(tmp_path / "b"))
    assert nox_audit(str(model), *clear) == 0


@pytest.mark.parametrize(("record", "field"), [
    ([], "(top)"), ({"model": "m.onnx", "wall_s": 3.0, "cells": [1]}, "'sides' is a required"),
    ({"model": "m.onnx", "wall_s": "3", "cells": [1],
      "sides": {"from": {"release": "1.20.1", "level": "all"},
                "to": {"release": "1.29.0", "level": "all"}}},
     "wall_s: '3' is not of type 'number'"),
    ({"model": "m.onnx", "wall_s": 3.0, "cells": [1],
      "sides": {"from": {"release": "1.20.1"}, "to": {"release": "1.29.0", "level": "all"}}},
     "sides/from"),
    *(({"model": "m.onnx", "wall_s": wall, "cells": [1],
        "sides": {"from": {"release": "1.20.1", "level": "enable_all"},
                  "to": {"release": "1.29.0", "level": "enable_all"}}}, said)
      for wall, said in ((10 ** 400, "wall_s: 1000"),  # overflowed the ratio's division
                         (float("inf"), "wall_s: inf is greater than the maximum"),
                         (float("nan"), "wall_s: NaN is not a time"))),
])
def test_bench_on_an_audit_record_that_is_not_the_kits_names_the_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], record: object, field: str) -> None:
    (tmp_path / "audit.json").write_text(json.dumps(record))
    assert main(["bench", "--audit", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kit: error: {tmp_path / 'audit.json'}: ")
    assert field in err


def _finished(report: Path, convnet_onnx: Path, level: str = "enable_all") -> Path:
    """A finished audit's folder as bench reads it: its record, model and inputs."""
    (report / "work").mkdir(parents=True)
    (report / "audit.json").write_text(json.dumps({
        "model": "m.onnx", "wall_s": 3.0, "cells": [1, 2],
        "sides": {"from": {"release": PAIR[0], "level": level},
                  "to": {"release": PAIR[1], "level": "enable_all", "threads": 1}}}))
    (report / "work" / "model.onnx").write_bytes(convnet_onnx.read_bytes())
    return report / "work"


def _huge(path: Path) -> None:
    import io
    import zipfile

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False,
                                                  "shape": (2 ** 46, 3, 32, 32)})
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("input.npy", header.getvalue())


@pytest.mark.parametrize(("inputs", "said"), [
    (None, "work: no inputs.npz or inputs-*.npz, the audit's inputs"),
    ("folder", "work/inputs.npz: missing (or not a file)"),
    ("garbage", "work/inputs.npz: not a readable .npz archive (File is not a zip file)"),
    ("huge", "work/inputs.npz: member 'input.npy' declares (70368744177664, 3, 32, 32) "
             "float32, past 2147483648 bytes"),
])
def test_bench_refuses_inputs_it_cannot_time_before_any_floor_runs(
        tmp_path: Path, convnet_onnx: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, inputs: str | None, said: str) -> None:
    """No inputs divided by a floor of zero (ZeroDivisionError); a header declaring 2**46
    rows had numpy ask for petabytes; a garbage file gave the child's traceback. Each is
    one line naming the file, from the .npy headers (the cap ``kit run`` applies), before
    any floor runs."""
    from kit.runtime import backends

    monkeypatch.setattr(backends, "floor_seconds", lambda *a: pytest.fail("a floor ran"))
    work = _finished(tmp_path / "report", convnet_onnx)
    if inputs == "folder":
        (work / "inputs.npz").mkdir()
    elif inputs == "garbage":
        (work / "inputs.npz").write_bytes(b"garbage\0\1")
    elif inputs == "huge":
        _huge(work / "inputs.npz")
    assert main(["bench", "--audit", str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kit: error: {tmp_path / 'report' / said}")
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(("level", "release", "said"), [
    ("nope", PAIR[0], "sides/from/level 'nope' is not a graph optimisation level"),
    ("../../x", PAIR[0], "sides/from/level '../../x' is not a graph optimisation level"),
    ("enable_all", "9.9.9", "sides/from/release '9.9.9' is not a release the kit locks"),
    ("enable_layout", PAIR[0], "sides/from: onnxruntime 1.20.1 offers no graph optimisation "
                               "level enable_layout"),
])
def test_bench_refuses_a_side_the_kit_cannot_run_before_anything_starts(
        tmp_path: Path, convnet_onnx: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, level: str, release: str, said: str) -> None:
    """The schema takes any string as a level: 'nope' reached the child's getattr and came
    back as its whole traceback."""
    from kit.runtime import backends

    monkeypatch.setattr(backends, "floor_seconds", lambda *a: pytest.fail("a floor ran"))
    work = _finished(tmp_path / "report", convnet_onnx, level)
    record = json.loads((tmp_path / "report" / "audit.json").read_text())
    record["sides"]["from"]["release"] = release
    (tmp_path / "report" / "audit.json").write_text(json.dumps(record))
    np.savez(work / "inputs.npz", input=np.zeros((2, 3, 32, 32), np.float32))
    assert main(["bench", "--audit", str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kit: error: {tmp_path / 'report' / 'audit.json'}: {said}")
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("link", ["audit.json", "work", "work/model.onnx", "work/inputs.npz"])
def test_bench_reads_nothing_through_a_link(
        tmp_path: Path, convnet_onnx: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, link: str) -> None:
    """An audit's record, work folder, model or inputs that is a link to a file of the
    host (here a whole, valid audit kept elsewhere) was read through it: the record's
    fields reached the output and the floor ran on the host's files. Each is refused
    naming the link, before any floor runs."""
    from kit.runtime import backends

    monkeypatch.setattr(backends, "floor_seconds", lambda *a: pytest.fail("a floor ran"))
    host = _finished(tmp_path / "host", convnet_onnx)
    np.savez(host / "inputs.npz", input=np.zeros((2, 3, 32, 32), np.float32))
    report = tmp_path / "report"
    shutil.copytree(tmp_path / "host", report)
    target = report / link
    if target.is_dir():
        shutil.rmtree(target)
    else:
        target.unlink()
    target.symlink_to(tmp_path / "host" / link)
    assert main(["bench", "--audit", str(report)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kit: error: {target}: a symbolic link (to {tmp_path / 'host' / link})"
                          ", and the kit reads no file through a link; run the audit again")
    assert len(err.splitlines()) == 1


def test_bench_gives_a_childs_failure_as_one_line(tmp_path: Path, convnet_onnx: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Inputs whose headers pass but which the model does not take: the floor's child
    fails, and its reason comes back as one line, not its traceback."""
    work = _finished(tmp_path / "report", convnet_onnx)
    np.savez(work / "inputs.npz", input=np.zeros((2, 5), np.float32))
    assert main(["bench", "--audit", str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kit: error: {work}: onnxruntime 1.20.1 does not run the jobs (")
    assert err.rstrip().endswith("(the floor run under ref)")
    assert len(err.splitlines()) == 1


def test_bisect_finds_the_first_release_that_moves_in_log2_audits(tmp_path: Path) -> None:
    """``kit.audit.bisect`` with a stand-in for the audit: the releases between FROM and TO
    in version order, the first beyond found in about log2 of them, every visit tabled,
    the known cases whose status changes there named."""
    from kit.audit.bisect import between, bisect

    releases = ["1.9.0", "1.10.0", "1.20.1", "1.21.1", "1.22.1", "1.23.2", "1.24.4",
                "1.25.1", "1.29.0"]
    source, target = Cell("1.20.1", "enable_all"), Cell("1.29.0", "enable_all")
    assert between(source, target, releases)[0] == "1.21.1"
    assert between(Cell("1.9.0", "x"), Cell("1.10.0", "x"), releases) == ["1.10.0"]
    seen: list[str] = []

    def measure(cell: Cell, work: Path) -> dict[str, object]:
        seen.append(cell.release)
        assert work.is_dir()
        moved = cell.release in ("1.23.2", "1.24.4", "1.25.1", "1.29.0")
        return {"verdict": "beyond clean drift" if moved else "within clean drift",
                "why": "w", "first_moving": {"node": f"n{cell.release}", "op": "Pad"}}

    def known(cell: Cell) -> list[dict[str, str]]:
        return [{"case": "pad-avgpool-fusion", "from": "affected",
                 "to": "fixed" if cell.release == "1.23.2" else "affected"}]

    found = bisect(source, target, releases, measure, tmp_path / "bisect", known)
    assert found["first_release"] == "1.23.2"
    assert found["releases_between"] == 6
    assert found["audits"] == len(seen) <= 3
    assert found["first_moving"]["node"] == "n1.23.2"
    assert found["known_cases_changing_there"] == ["pad-avgpool-fusion"]
    assert [v["release"] for v in found["visited"]] == sorted(seen, key=lambda r: tuple(
        int(p) for p in r.split(".")))


def test_an_unlocalised_move_says_whether_the_copy_undid_it() -> None:
    """Beyond clean drift but no exposed tensor moves: when the instrumented copy's outputs
    do not move either, exposing the tensors undid the move (a fusion); when they do, it
    starts in an unexposed node. When a tensor moves, it is named and no reason is given."""
    from kit.audit.calibrate import Calibration
    from kit.audit.command import UNDONE, UNEXPOSED, localise

    def cal(rate: float) -> Calibration:
        return Calibration(1e-6, 0.0, 0.0, (), rate, rate, 0.0)

    exposed = [{"tensor": "h", "node": "cast_h", "op": "Cast", "inputs": "x", "upstream": ""}]
    assert localise({"h": cal(0.0), "y": cal(0.0)}, exposed, ["y"], 0.01) == (None, UNDONE)
    assert localise({"h": cal(0.0), "y": cal(1.0)}, exposed, ["y"], 0.01) == (None, UNEXPOSED)
    moving, why = localise({"h": cal(0.5), "y": cal(1.0)}, exposed, ["y"], 0.01)
    assert (moving or {}).get("node") == "cast_h"
    assert why is None


def test_the_node_of_every_graph_output_is_watched_whatever_its_op(tmp_path: Path) -> None:
    """Protocol version 4: a graph output is in every copy already, so its node is watched
    even when its op is outside op_types (here QuantizeLinear, as in the corpus's
    quantizelinear-fp16-truncate); an inner node outside op_types stays unexposed."""
    from onnx import TensorProto, helper

    from kit.audit.model import probe

    graph = helper.make_graph(
        [helper.make_node("Flatten", ["x"], ["f"], name="flatten"),
         helper.make_node("Relu", ["f"], ["r"], name="relu"),
         helper.make_node("QuantizeLinear", ["r", "s"], ["y"], name="quantize")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, ["N", 4])],
        [helper.make_tensor("s", TensorProto.FLOAT, [], [0.1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    exposed = probe(model, tmp_path / "probe.onnx", PROTOCOL["localisation"]["op_types"])
    assert [(e["node"], e["op"]) for e in exposed] == [("relu", "Relu"),
                                                       ("quantize", "QuantizeLinear")]


def test_a_round_of_jobs_that_runs_long_says_it_still_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A job that never ends prints nothing of its own: while a round's jobs run, the audit
    says every ``BEAT`` seconds that they still do, and how to stop them."""
    import time

    from kit.audit import cells

    class Slow:
        def run(self, batches: list[Any], in_root: Path, out_root: Path) -> None:
            time.sleep(1.3)
            for batch in batches:
                for job in batch.jobs:
                    (out_root / job["output"]).parent.mkdir(parents=True, exist_ok=True)
                    np.savez(out_root / job["output"], y=np.zeros(2, np.float32))

    monkeypatch.setattr(cells, "BEAT", 0.5)
    found, _ = cells.run_cells([Cell("1.20.1", "disable_all")], tmp_path,
                               [("inputs.npz", 2)], Slow(), "plain")  # type: ignore[arg-type]
    said = capsys.readouterr().err
    beats = [line for line in said.splitlines() if "still running" in line]
    assert len(beats) >= 2, said
    assert all(line.startswith("audit: the plain graph's jobs (Ctrl-C stops them): still "
                               "running, ") for line in beats), beats
    assert next(iter(found.values()))["y"].shape == (2,)
