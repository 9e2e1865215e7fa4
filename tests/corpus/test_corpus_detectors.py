"""The corpus's detector study: one case (Pad fused into AveragePool, issue 22177) end to end
in the tiny protocol's one-epoch ResNet-20 on the two releases the default tests build
(1.20.1 affected, 1.29.0 fixed); the host placements (kit.corpus.hosts) on untrained
exports of the three digits architectures; the measures (kit.corpus.detector_measures) on
arrays whose answer is known; the recompute side (kit.corpus.recompute_detectors) on the run
and on the shipped evidence; the report (kit.corpus.detector_report); refusals before any
job (kit.corpus.detectors)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from kit.corpus import recompute_detectors
from kit.corpus.detector_measures import CONDS, ROLES, Params, host_measures, params
from kit.corpus.detectors import PROTOCOL, run_detectors, write_small_protocol
from kit.corpus.hosts import CASE_SKETCH, OUT, embed, write_host
from kit.corpus.recompute import CorpusEvidence
from kit.drift.localise import KINDS
from kit.errors import ConfigError, KitError
from kit.files import load_npz, read_json, read_yaml, write_npz
from kit.paths import ROOT
from tests.conftest import tiny_protocol

CASE = "pad-avgpool-fusion"
SHIPPED = ROOT / "claims" / "corpus" / "evidence" / "detectors"


def small_study_protocol(tmp: Path) -> Path:
    """The frozen study protocol with the case's pair on the default tests' releases and
    fewer bootstrap replicates (the configuration reproduce-all --small runs)."""
    return write_small_protocol(tmp / "study.yaml", ["1.20.1", "1.29.0"], CASE)


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    tmp = tmp_path_factory.mktemp("detectors")
    drift, protocol = tiny_protocol(tmp), small_study_protocol(tmp)
    run_detectors(tmp / "run", protocol_file=protocol, drift_protocol=drift, cases=[CASE],
                  workers=1)
    return tmp / "run", protocol, drift


def test_the_defect_is_caught_and_the_clean_control_is_not(study: tuple[Path, Path, Path]
                                                           ) -> None:
    run, _, _ = study
    rows = read_json(run / "detectors" / "hosts.json")["hosts"]
    assert [(r["case"], r["model"], r["hosted"]) for r in rows] == [(CASE, "resnet20", True)]
    row = rows[0]
    assert row["max_abs_logit"] > 1e-3  # the fusion's wrong divisor reaches the logits
    direct = row["detection"]["direct"]
    assert direct["tpr"]["rate"] > direct["fpr"]["rate"]
    assert row["detection"]["polygraphy"]["tpr"]["rate"] > 0
    assert row["layers"][1] == CASE_SKETCH
    assert row["layers"][0] == "sketch/0"
    assert set(row["localisation"]) == set(KINDS)


def test_recorded_measures_are_the_recomputed_ones(study: tuple[Path, Path, Path]) -> None:
    run, protocol, drift = study
    row = read_json(run / "detectors" / "hosts.json")["hosts"][0]
    again = host_measures(load_npz(run / row["evidence"]),
                          params(read_yaml(protocol), read_yaml(drift)))
    assert json.loads(json.dumps(again)) == {k: row[k] for k in again}


def test_a_rerun_runs_no_job_and_keeps_the_bytes(study: tuple[Path, Path, Path],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    run, protocol, drift = study
    before = (run / "detectors" / "hosts.json").read_bytes()
    run_detectors(run, protocol_file=protocol, drift_protocol=drift, cases=[CASE], workers=1)
    assert "0 of 16 jobs to run" in capsys.readouterr().err
    assert (run / "detectors" / "hosts.json").read_bytes() == before


def test_the_report_has_the_table_and_the_figure(study: tuple[Path, Path, Path]) -> None:
    report = study[0] / "report"
    assert (report / "detectors-tpr.png").stat().st_size > 1000
    table = (report / "detectors.md").read_text()
    assert f"| {CASE} | resnet20 |" in table
    assert "1.20.1 / 1.29.0" in table
    assert "detectors-tpr.png" in (report / "detectors.html").read_text()


def test_a_run_under_another_protocol_is_refused_by_verify(study: tuple[Path, Path, Path]
                                                           ) -> None:
    with pytest.raises(KitError, match="another protocol"):
        recompute_detectors.measured(study[0])


def test_unknown_case_is_refused_before_anything(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not-a-case"):
        run_detectors(tmp_path / "run", cases=["not-a-case"])
    assert not (tmp_path / "run").exists()


# --- hosts ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from kit.drift.export import export_onnx
    from kit.drift.models import build_model

    tmp = tmp_path_factory.mktemp("exports")
    found = {}
    for name in ("resnet20", "mobilenetv2_x0_5", "vgg11_bn"):
        model = build_model(name, 10)
        model.eval()
        export_onnx(model, tmp / f"{name}.onnx", (1, 3, 32, 32), opset=17)
        found[name] = tmp / f"{name}.onnx"
    return found


def _spec(case: str) -> dict[str, Any]:
    return dict(read_yaml(PROTOCOL)["cases"][case])


@pytest.mark.parametrize(("case", "hosts"), [
    ("avgpool-asym-pads", {"resnet20", "mobilenetv2_x0_5", "vgg11_bn"}),
    ("avgpool-ceil-include-pad", {"vgg11_bn"}),
    ("pad-avgpool-fusion", {"resnet20", "mobilenetv2_x0_5", "vgg11_bn"}),
    ("pad-maxpool-fusion", {"resnet20", "mobilenetv2_x0_5"})])
def test_each_case_sits_where_the_protocol_says(exports: dict[str, Path], tmp_path: Path,
                                                case: str, hosts: set[str]) -> None:
    spec = _spec(case)
    for name, plain in exports.items():
        target = tmp_path / f"{name}.onnx"
        found = write_host(plain, spec["node"], spec.get("placement", "stem"), target, 64)
        assert found.hosted == (name in hosts), (case, name, found.placement)
        if not found.hosted:
            assert not target.exists()
            continue
        model = onnx.load(str(target))
        readers = [n for n in model.graph.node if OUT in n.input]
        assert readers, "nothing reads the case's output"
        case_nodes = [n for n in model.graph.node if n.name.startswith("case/")]
        assert [n.op_type for n in case_nodes] == spec["node"]["op"].split("+")
        sketch = onnx.load(str(target.with_name(f"{name}.sketch.onnx")))
        assert CASE_SKETCH in [o.name for o in sketch.graph.output]
        assert found.layers.index(CASE_SKETCH) >= 1


def test_the_stem_placement_rewires_every_reader(exports: dict[str, Path]) -> None:
    model = onnx.load(str(exports["resnet20"]))
    stem = next(n for n in model.graph.node if n.op_type == "Conv")
    readers = [n.name for n in model.graph.node if stem.output[0] in n.input]
    embed(model, _spec(CASE)["node"], "stem")
    assert [n.name for n in model.graph.node if stem.output[0] in n.input] == ["case/pad"]
    assert sorted(n.name for n in model.graph.node if OUT in n.input) == sorted(readers)


def test_the_linear_placement_skips_every_activated_output(exports: dict[str, Path]) -> None:
    model = onnx.load(str(exports["resnet20"]))
    found = embed(model, _spec("pad-maxpool-fusion")["node"], "linear")
    assert "conv2" in found.placement  # the first residual branch, before its Add
    assert {n.op_type for n in model.graph.node if OUT in n.input} == {"Add"}


def test_an_unknown_placement_or_op_is_an_error(exports: dict[str, Path]) -> None:
    model = onnx.load(str(exports["resnet20"]))
    with pytest.raises(KitError, match="placement 'middle'"):
        embed(model, _spec(CASE)["node"], "middle")
    with pytest.raises(KitError, match="no host placement for op 'Resize'"):
        embed(model, {"op": "Resize"}, "stem")


def test_an_opset_19_host_gets_opset_19_sketches(exports: dict[str, Path], tmp_path: Path
                                                 ) -> None:
    spec = _spec("avgpool-asym-pads")
    found = write_host(exports["vgg11_bn"], spec["node"], "stem", tmp_path / "h.onnx", 64)
    sketch = onnx.load(str(tmp_path / "h.sketch.onnx"))
    onnx.checker.check_model(sketch, full_check=True)
    assert sketch.opset_import[0].version == 19
    assert found.hosted


# --- measures ------------------------------------------------------------------------------

P = Params(quantile=0.99, fpr=0.01, replicates=300, seed=5, interval=0.95, atol=1e-6,
           rtol=1e-5)


def synthetic(offset_rotated: bool) -> dict[str, Any]:
    """Clean = reference + 1e-6 noise; positive = reference + a constant offset of 1 on the
    source image (and on the rotated one when ``offset_rotated``: the error then cancels in
    the metamorphic contrast); the case's layer moves most."""
    rng = np.random.default_rng(0)
    n, layers = 100, 5
    arrays: dict[str, Any] = {}
    for cond, role in ((c, r) for c in CONDS for r in ROLES):
        ref = rng.standard_normal((n, 10)).astype(np.float32) * 5
        arrays[f"logits/reference/{cond}/{role}"] = ref
        arrays[f"logits/clean/{cond}/{role}"] = ref + rng.normal(0, 1e-6, ref.shape).astype(
            np.float32)
        shift = 1.0 if cond == "orig" or offset_rotated else 0.0
        arrays[f"logits/positive/{cond}/{role}"] = ref + np.float32(shift)
    for role in ("affected", "fixed"):
        for cond in CONDS:
            arrays[f"control/{role}/{cond}"] = arrays[f"logits/reference/{cond}/heldout"]
    arrays["polygraphy/positive"] = np.ones(n, bool)
    arrays["polygraphy/clean"] = np.zeros(n, bool)
    for kind in KINDS:
        arrays[f"layers/clean/{kind}"] = rng.uniform(0, 1, (n, layers)).astype(np.float32)
        positive = rng.uniform(0, 1, (n, layers)).astype(np.float32)
        positive[:, 2] += 10
        arrays[f"layers/positive/{kind}"] = positive
    arrays["labels"] = arrays["logits/reference/orig/heldout"].argmax(1)
    arrays["truth"] = np.array([2])
    return arrays


def test_a_persistent_error_cancels_in_the_metamorphic_contrast_only() -> None:
    found = host_measures(synthetic(offset_rotated=True), P)["detection"]
    assert found["direct"]["tpr"]["rate"] == 1.0
    assert found["metamorphic"]["tpr"]["rate"] < 0.1
    low, high = found["direct_minus_metamorphic"]["interval"]
    assert 0 < low <= high
    for name in ("direct", "metamorphic", "maximum", "mixed"):
        assert found[name]["fpr"]["rate"] <= 0.05


def test_an_input_dependent_error_is_caught_by_both() -> None:
    found = host_measures(synthetic(offset_rotated=False), P)
    assert found["detection"]["metamorphic"]["tpr"]["rate"] == 1.0
    assert found["detection"]["direct_minus_metamorphic"]["interval"] == [0.0, 0.0]
    assert found["accuracy"] == 1.0
    assert found["release_control"] == 0.0
    assert found["detection"]["polygraphy"]["tpr"]["rate"] == 1.0
    assert found["localisation"]["direct"]["top1"] == 1.0


def test_the_matched_rule_alarms_on_one_percent_of_calibration() -> None:
    arrays = synthetic(offset_rotated=False)
    for cond in CONDS:  # calibrate on held-out: realised FPR is then the calibration share
        arrays[f"logits/clean/{cond}/calibration"] = arrays[f"logits/clean/{cond}/heldout"]
        arrays[f"logits/reference/{cond}/calibration"] = arrays[f"logits/reference/{cond}/"
                                                                "heldout"]
    found = host_measures(arrays, P)["detection"]
    assert all(found[n]["fpr"]["alarms"] == 1 for n in ("direct", "maximum", "mixed"))


# --- shipped evidence ----------------------------------------------------------------------

def test_shipped_evidence_decides_every_hypothesis() -> None:
    ev = CorpusEvidence(SHIPPED)
    assert recompute_detectors.hosted(ev) == 9
    assert recompute_detectors.j1_release_control_identical(ev) is True
    assert recompute_detectors.j3_direct_over_metamorphic(ev) is False
    assert 0.0 <= recompute_detectors.pooled_rate(ev, "direct", "fpr") <= 0.05
    hosts = recompute_detectors.measured(SHIPPED)
    assert ("pad-maxpool-fusion", "vgg11_bn") not in hosts
    assert hosts[(CASE, "vgg11_bn")]["release_control"] == 0.0


def test_a_changed_evidence_array_changes_the_recomputed_value(tmp_path: Path) -> None:
    copy = tmp_path / "shipped"
    shutil.copytree(SHIPPED, copy)
    row = next(r for r in read_json(copy / "detectors" / "hosts.json")["hosts"]
               if r["hosted"])
    arrays = dict(load_npz(copy / row["evidence"]))
    arrays["control/affected/orig"] = arrays["control/affected/orig"] + np.float32(1)
    write_npz(copy / row["evidence"], arrays)
    assert recompute_detectors.j1_release_control_identical(CorpusEvidence(copy)) is False


def test_without_the_study_its_claims_are_not_run_here(tmp_path: Path) -> None:
    """The ledger's detectors substrate names its own marker (detectors/hosts.json): a
    checkout without that evidence leaves its claims 'not run here', the corpus's decided."""
    from kit.claims.ledger import evaluate, load_ledger

    shutil.copytree(ROOT / "claims" / "corpus" / "evidence" / "kit",
                    tmp_path / "claims" / "corpus" / "evidence" / "kit")
    outcomes = evaluate(load_ledger(ROOT / "claims" / "corpus.yaml"), tmp_path)
    status = {(o.claim, o.substrate): o.status for o in outcomes}
    assert status[("C-027", "detectors")] == "not run here"
    assert status[("C-001", "kit")] != "not run here"
    assert {s for (_, sub), s in status.items() if sub == "detectors"} == {"not run here"}


def test_a_zero_threshold_has_no_margin_and_the_record_stays_finite() -> None:
    """Identical clean and reference logits give zero thresholds: the margin is None (JSON
    refuses infinities), every positive still alarms."""
    arrays = synthetic(offset_rotated=False)
    for cond in CONDS:
        for role in ROLES:
            arrays[f"logits/clean/{cond}/{role}"] = arrays[f"logits/reference/{cond}/{role}"]
    found = host_measures(arrays, P)["detection"]
    assert found["direct"]["margin"] is None
    assert found["direct"]["tpr"]["rate"] == 1.0
    assert found["direct"]["fpr"]["rate"] == 0.0
    json.dumps(found, allow_nan=False)



def test_the_detector_figure_stays_legible_at_page_width(tmp_path: Path) -> None:
    """However many hosts, the figure is 8 inches wide with host labels of 9 points down
    its side (it was 1.1 inches wide per host, shrunk to the page), and its legend names
    the realised FPR's mark."""
    from matplotlib import pyplot as plt

    from kit.corpus import detector_report

    hosts = [row for row in read_json(
        ROOT / "claims/corpus/evidence/detectors/detectors/hosts.json")["hosts"] if row["hosted"]]
    drawn: list[Any] = []
    real = plt.subplots

    def keep(*args: Any, **kwargs: Any) -> Any:
        drawn.append(real(*args, **kwargs))
        return drawn[-1]

    for many in (hosts, hosts * 4):
        drawn.clear()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(plt, "subplots", keep)
            detector_report.tpr_figure(many, tmp_path)
        [(fig, ax)] = drawn
        assert fig.get_size_inches()[0] == 8
        labels = ax.get_yticklabels()
        assert len(labels) == len(many)
        assert min(label.get_fontsize() for label in labels) >= 9
        assert "realised FPR" in [t.get_text() for t in ax.get_legend().get_texts()]
        plt.close(fig)
