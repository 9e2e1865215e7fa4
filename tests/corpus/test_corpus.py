"""The real-defect corpus: one case end to end on the two releases the default tests build
(Pad fused into AveragePool, issue 22177: wrong in 1.20.1 with optimisation on, right in
1.29.0), the reproduction rule (kit.corpus.rule) on numbers that pass and fail it, the
recompute side (kit.corpus.recompute) against the run's own decisions and the shipped
evidence, the report (kit.corpus.report), the case registry (kit.corpus.cases, kit.corpus.case)
and the refusals before any job (kit.corpus.pipeline). Every case module builds a checked
model here: kit.corpus.cases.avgpool_asym_pads, kit.corpus.cases.avgpool_ceil_include_pad,
kit.corpus.cases.pad_avgpool_fusion, kit.corpus.cases.cast_chain_fp16,
kit.corpus.cases.layernorm_fusion_axis, kit.corpus.cases.resize_nearest_tie,
kit.corpus.cases.pad_maxpool_fusion, kit.corpus.cases.simplified_layernorm_pow,
kit.corpus.cases.reduce_noop_empty_axes, kit.corpus.cases.layernorm_large_mean,
kit.corpus.cases.minmax_nan, kit.corpus.cases.quantizelinear_fp16_truncate,
kit.corpus.cases.gemm_transpose_identity_perm, kit.corpus.cases.qdq_conv_bias_scale,
kit.corpus.cases.reduce_empty_set, kit.corpus.cases.simplified_layernorm_fusion_axis,
kit.corpus.cases.maxpool_ceil_pad_window, kit.corpus.cases.qdq_gemm_alpha_bias,
kit.corpus.cases.qdq_split_output_params, kit.corpus.cases.qdq_resize_linear,
kit.corpus.cases.qdq_propagation_const_dq, kit.corpus.cases.matmul_scale_leading_dims; the
shared interval helper kit.stats gives the rate's Wilson interval. The crash-only table
(kit.corpus.crashes): one crash case end to end, its rule, its recompute and the shipped
table."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kit.__main__ import main
from kit.corpus import rule
from kit.corpus.cases import CASES, by_id
from kit.corpus.pipeline import run_corpus
from kit.corpus.recompute import RECOMPUTE_CORPUS, CorpusEvidence
from kit.errors import ConfigError, KitError
from kit.files import read_json
from kit.paths import ROOT

PAIR = ["1.20.1", "1.29.0"]


@pytest.fixture(scope="module")
def fusion_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("corpus") / "run"
    run_corpus(folder, releases=PAIR, cases=["pad-avgpool-fusion"], workers=1)
    return folder


def test_one_case_end_to_end_reproduces_at_its_level_only(fusion_run: Path) -> None:
    evidence = read_json(fusion_run / "corpus" / "cases.json")
    (case,) = evidence["cases"]
    assert case["decision"]["reproduced"] is True
    d = case["deviations"]
    assert d["1.20.1"]["enable_all"] > 0.1                     # the fused pool divides wrongly
    assert d["1.20.1"]["disable_all"] < 1e-6                   # no fusion, no defect
    assert d["1.29.0"]["enable_all"] < 1e-6                    # fixed
    assert case["decision"]["observed_affected"] == {"disable_all": [], "enable_all": ["1.20.1"]}
    assert case["polygraphy"] == {"fixed": "1.29.0", "affected": "1.20.1", "mismatch": True}
    assert evidence["summary"]["reproduced"] == 1
    assert (fusion_run / "report" / "deviation-map.png").stat().st_size > 0
    assert "pad-avgpool-fusion" in (fusion_run / "report" / "cases.md").read_text()


def test_a_rerun_keeps_every_output_and_writes_the_same_bytes(fusion_run: Path) -> None:
    before = (fusion_run / "manifest.json").read_bytes()
    outputs = sorted((fusion_run / "cases").rglob("outputs/*/*.npz"))
    assert len(outputs) == 4
    stamps = [p.stat().st_mtime_ns for p in outputs]
    run_corpus(fusion_run, releases=PAIR, cases=["pad-avgpool-fusion"], workers=1)
    assert [p.stat().st_mtime_ns for p in outputs] == stamps
    assert (fusion_run / "manifest.json").read_bytes() == before


def test_an_output_without_its_record_runs_again(fusion_run: Path) -> None:
    """A worker killed between an output and its record leaves the output alone: the rerun
    runs that job again (and only it), and the record comes back byte for byte."""
    outputs = sorted((fusion_run / "cases").rglob("outputs/*/*.npz"))
    record = outputs[0].with_suffix(".meta.json")
    kept = record.read_bytes()
    stamps = [p.stat().st_mtime_ns for p in outputs]
    record.unlink()
    run_corpus(fusion_run, releases=PAIR, cases=["pad-avgpool-fusion"], workers=1)
    assert record.read_bytes() == kept
    again = [p.stat().st_mtime_ns for p in outputs]
    assert again[0] != stamps[0]
    assert again[1:] == stamps[1:]


def test_the_recompute_side_decides_from_the_raw_outputs(fusion_run: Path) -> None:
    ev = CorpusEvidence(fusion_run)
    recorded = read_json(fusion_run / "corpus" / "cases.json")["cases"][0]
    assert ev.decisions["pad-avgpool-fusion"]["decision"] == recorded["decision"]
    assert RECOMPUTE_CORPUS["corpus.case_reproduced"](ev, "pad-avgpool-fusion") is True
    out = fusion_run / "cases" / "pad-avgpool-fusion" / "outputs" / "1.20.1" / "enable_all.npz"
    saved = out.read_bytes()
    try:  # the fixed release's output put in place of the affected one: no longer reproduces
        out.write_bytes((out.parent.parent / "1.29.0" / "enable_all.npz").read_bytes())
        assert CorpusEvidence(fusion_run).decisions["pad-avgpool-fusion"]["decision"][
            "reproduced"] is False
        out.unlink()
        with pytest.raises(KitError, match="records no error for it"):
            _ = CorpusEvidence(fusion_run).decisions
    finally:
        out.write_bytes(saved)


def test_the_rule_on_numbers_that_pass_and_fail() -> None:
    case = {"level": "disable_all", "affected": ["1.21.1"], "fixed": ["1.25.1"]}

    def decide(bad: float | None, good: float | None) -> dict[str, object]:
        return rule.decide(case, {"1.21.1": {"disable_all": bad, "enable_all": 0.0},
                                  "1.25.1": {"disable_all": good, "enable_all": 0.0}}, 2.0)

    assert decide(0.3, 1e-7)["reproduced"] is True
    assert decide(1e-4, 0.0)["reproduced"] is False            # under t = 1e-4 * s = 2e-4
    assert decide(5e-4, 1e-5)["reproduced"] is False           # under 100 x the envelope
    assert decide(0.3, 1e-3)["reproduced"] is False            # the fix does not match
    assert decide(None, 0.0)["reproduced"] is False            # the affected release did not run
    assert decide(math.inf, 0.0)["reproduced"] is True
    assert rule.scale({"y": __import__("numpy").array([-3.0, 2.0])}) == 3.0


def test_a_nan_counts_only_where_the_reference_has_none() -> None:
    import numpy as np

    want = {"y": np.array([[1.0, np.nan, np.inf]], np.float32)}
    assert rule.deviation({"y": np.array([[1.5, np.nan, np.inf]])}, want, "t") == 0.5
    assert rule.deviation({"y": np.array([[1.0, 2.0, np.inf]])}, want, "t") == math.inf
    assert rule.deviation({"y": np.array([[np.nan, np.nan, np.inf]])}, want, "t") == math.inf
    assert rule.deviation({"y": np.array([[1.0, np.nan, -np.inf]])}, want, "t") == math.inf
    assert rule.deviation({"y": np.array([[1.0, np.nan]])}, want, "t") == math.inf  # shape


def test_the_hypotheses_on_the_shipped_evidence() -> None:
    ev = CorpusEvidence(ROOT / "claims" / "corpus" / "evidence" / "kit")
    recorded = {c["id"]: c["decision"] for c in ev.record["cases"]}
    assert {i: c["decision"] for i, c in ev.decisions.items()} == recorded
    assert sorted(recorded) == sorted(c.id for c in CASES)
    assert RECOMPUTE_CORPUS["corpus.rate"](ev, "listed") == len(CASES)
    low, high = RECOMPUTE_CORPUS["corpus.rate"](ev, "wilson95")  # type: ignore[misc]
    assert 0 < low < high <= 1


HYPOTHESES = ("k1_every_case_reproduces", "k2_ranges_as_declared", "k3_rate_at_least_paper",
              "k4_kernel_defects", "k5_polygraphy_flags_all")


def test_the_first_committed_deviation_counts_a_nan_on_both_sides_as_inf() -> None:
    """Version 1 of the deviation (protocol 4ff34ba, code 927619b): any element whose
    difference is not finite makes d infinite, a NaN or an infinity on both sides included;
    version 2 (02e59e2) counts those as agreement. Finite outputs give the same d."""
    import numpy as np

    want = {"y": np.array([[1.0, np.nan, np.inf]], np.float32)}
    same = {"y": np.array([[1.0, np.nan, np.inf]])}
    assert rule.deviation(same, want, "t", rule.REVISED) == 0.0
    assert rule.deviation(same, want, "t", rule.FROZEN) == math.inf
    finite = {"y": np.array([[1.0, 2.0, 3.0]], np.float32)}
    for version in rule.RULE_VERSIONS:
        assert rule.deviation({"y": np.array([[1.5, 2.0, 3.0]])}, finite, "t", version) == 0.5
    with pytest.raises(KitError, match="unknown corpus rule version"):
        rule.deviation(same, want, "t", 3)


def test_the_first_committed_rule_gives_one_fewer_on_the_shipped_evidence() -> None:
    """Under the rule first committed, minmax-nan (its fixed releases NaN where the
    reference is NaN) does not reproduce and no release of it deviates, so K1 and K2 fail;
    under the revision all twenty-two (protocol version 4) reproduce. No other case's
    deviations change."""
    ev = CorpusEvidence(ROOT / "claims" / "corpus" / "evidence" / "kit")
    frozen, revised = ev.decisions_under(rule.FROZEN), ev.decisions_under(rule.REVISED)
    assert [i for i, c in frozen.items() if not c["decision"]["reproduced"]] == ["minmax-nan"]
    assert (len(ev.reproduced(rule.FROZEN)), len(ev.reproduced(rule.REVISED))) == (21, 22)
    assert [i for i in frozen if frozen[i]["deviations"] != revised[i]["deviations"]] == [
        "minmax-nan"]
    assert frozen["minmax-nan"]["range"] == {
        "extra": [], "missing": ["1.15.1", "1.16.3", "1.17.3", "1.18.1"]}
    assert revised["minmax-nan"]["range"] == {"extra": [], "missing": []}
    found = {version: [RECOMPUTE_CORPUS[f"corpus.{name}"](ev, rule_version=version)
                       for name in HYPOTHESES] for version in rule.RULE_VERSIONS}
    # K4 fails under both rules since protocol version 4 (10 of 22 at disable_all): its
    # seven cases came from a search aimed at the optimiser (revisions, not_a_finding)
    assert found == {rule.FROZEN: [False, False, True, False, True],
                     rule.REVISED: [True, True, True, False, True]}
    with pytest.raises(KitError, match="unknown corpus rule version"):
        ev.decisions_under(0)


def test_the_report_names_its_rule_and_the_count_the_claims_page_decides_on(
        tmp_path: Path) -> None:
    from kit.corpus.report import write_report

    page = write_report(ROOT / "claims" / "corpus" / "evidence" / "kit", tmp_path / "report")
    text = page.read_text()
    assert "version 2 (02e59e2" in text
    assert "21 of 22: the rule as first committed" in text
    assert "decide apart on minmax-nan" in text


def test_the_ledger_decides_k1_k5_by_the_frozen_rule_with_the_revision_beside(
        tmp_path: Path) -> None:
    """C-001..C-005 compute under version 1 and show version 2 beside, with the revision the
    protocol's revisions file records; they are labelled not a finding (consistency), so K1
    and K2, which fail under the frozen rule, differ, and the revised rule's outcome never
    takes their place. The revisions live apart from the protocol because the shipped records
    hold the protocol's sha256."""
    import shutil

    from kit.claims.ledger import evaluate, load_ledger
    from kit.files import read_yaml, sha256

    protocol = ROOT / "kit" / "protocols" / "corpus.yaml"
    record = read_json(ROOT / "claims" / "corpus" / "evidence" / "kit" / "corpus" / "corpus.json")
    assert record["protocol_sha256"] == sha256(protocol)
    revision = read_yaml(ROOT / "kit" / "protocols" / "corpus.revisions.yaml")["revisions"][0]
    ledger = load_ledger(ROOT / "claims" / "corpus.yaml")
    hypotheses = [c for c in ledger["claims"] if c["kind"] == "hypothesis"
                  and "kit" in c["rules"]]
    assert [c["compute"]["function"] for c in hypotheses] == [f"corpus.{h}" for h in HYPOTHESES]
    for claim in hypotheses:
        rules = claim["rules"]["kit"]
        assert claim["compute"]["args"] == {"rule_version": rule.FROZEN}
        assert rules["revised"]["compute"]["args"] == {"rule_version": rule.REVISED}
        assert "not_a_finding" in rules
        assert "threshold" in rules
        assert {k: rules["revised"]["revision"][k] for k in ("commit", "date")} == {
            "commit": revision["commit"], "date": revision["date"]}
        assert rules["revised"]["revision"]["evidence_existed"] is revision["evidence_existed"]
    detectors = read_yaml(ROOT / "kit" / "protocols" / "corpus-detectors.revisions.yaml")
    j_rules = {c["id"]: c["rules"]["detectors"] for c in ledger["claims"]
               if c["kind"] == "hypothesis" and "detectors" in c["rules"]}
    assert all("threshold" in r and "revised" not in r for r in j_rules.values())
    assert {i for i, r in j_rules.items() if "not_a_finding" in r} == {"C-027"}
    assert j_rules["C-027"]["not_a_finding"] == detectors["not_a_finding"]["J1"]
    shutil.copytree(ROOT / "claims" / "corpus" / "evidence" / "kit",
                    tmp_path / "claims" / "corpus" / "evidence" / "kit")
    found = {o.claim: o for o in evaluate(ledger, tmp_path) if o.substrate == "kit"}
    assert {c: found[c].status for c in ("C-001", "C-002", "C-003", "C-004", "C-005")} == {
        "C-001": "hypothesis fails", "C-002": "hypothesis fails", "C-003": "consistent",
        "C-004": "hypothesis fails", "C-005": "consistent"}
    assert "revised rule (02e59e2" in found["C-001"].rule
    assert "-> consistent (shown beside" in found["C-001"].rule
    assert found["C-001"].note.startswith("not a finding: ")


def test_every_case_builds_a_loadable_model_with_a_batch_axis() -> None:
    import onnx

    for case in CASES:
        built = case.build(8101)
        onnx.checker.check_model(built.model, full_check=True)
        assert built.model.ir_version == 8
        assert max(o.version for o in built.model.opset_import) <= 19
        names = {n.name for n in built.model.graph.node}
        assert set(case.ground_truth) <= names, case.id
        assert not {i.name for i in built.model.graph.initializer} & set(built.inputs)
        assert set(case.affected).isdisjoint(case.fixed), case.id
        assert case.cnn_op or case.relation, case.id


def test_bad_names_are_refused_before_any_job(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="no case 'nope'"):
        by_id("nope")
    assert main(["corpus", "--run", str(tmp_path / "run"), "--releases", "1.99.0"]) == 2
    assert "release(s) 1.99.0 not in the corpus's releases" in capsys.readouterr().err
    assert main(["corpus", "--run", str(tmp_path / "run"), "--cases", "nope"]) == 2
    assert not (tmp_path / "run" / "cases").exists()


def test_the_deviation_map_keeps_infinite_apart_from_not_run(tmp_path: Path) -> None:
    """An infinite d (wrong shape, NaN) is magenta, an exact match white, a release that did
    not run black: three different colours, never one for two meanings."""
    import numpy as np
    from PIL import Image

    from kit.corpus.report import deviation_map

    case = {"id": "c", "level": "disable_all", "affected": ["1.15.1"],
            "deviations": {"1.15.1": {"disable_all": math.inf},
                           "1.16.3": {"disable_all": 0.0},
                           "1.17.3": {"disable_all": None}}}
    deviation_map({"releases": ["1.15.1", "1.16.3", "1.17.3"], "cases": [case]}, tmp_path)
    pixels = np.asarray(Image.open(tmp_path / "deviation-map.png").convert("RGB")).reshape(-1, 3)
    def count(colour: tuple[int, int, int]) -> int:
        return int((pixels == colour).all(axis=1).sum())

    assert count((255, 0, 255)) > 100  # the infinite cell, whole
    assert count((0, 0, 0)) > 100  # the release that did not run


def test_a_crash_only_case_goes_to_its_own_table(tmp_path: Path) -> None:
    """ReduceMax over an empty axis raises on 1.20.1 and runs right on 1.29.0: recorded in
    corpus/crashes.json (the error without the run folder's path), never among the rate's
    cases; the recompute side finds the same from which outputs exist."""
    folder = tmp_path / "run"
    run_corpus(folder, releases=PAIR, cases=["reducemax-empty-axis"], workers=1)
    assert read_json(folder / "corpus" / "cases.json")["cases"] == []
    crash = read_json(folder / "corpus" / "crashes.json")["crashes"][0]
    assert crash["decision"]["reproduced"] is True
    assert crash["decision"]["fails"] == ["1.20.1"]
    error = crash["errors"]["1.20.1"]["disable_all"]
    assert "<run>" in error
    assert str(folder) not in error
    assert "ReduceMax" in error
    assert crash["deviations"]["1.29.0"]["disable_all"] == 0.0
    ev = CorpusEvidence(folder)
    assert ev.crashes["reducemax-empty-axis"]["reproduced"] is True
    (folder / "cases" / "reducemax-empty-axis" / "outputs" / "1.29.0" / "disable_all.npz"
     ).unlink()
    with pytest.raises(KitError, match="records no error"):
        _ = CorpusEvidence(folder).crashes
    assert "Crash-only defects" in (folder / "report" / "index.html").read_text()


def test_the_crash_rule_needs_the_affected_to_fail_and_the_fixed_to_be_right() -> None:
    from kit.corpus.crashes import decide_crash

    case = {"level": "disable_all", "affected": ["a"], "fixed": ["b"]}
    assert decide_crash(case, {"a": {"disable_all": None}, "b": {"disable_all": 0.0}},
                        1e-4)["reproduced"] is True
    assert decide_crash(case, {"a": {"disable_all": 0.0}, "b": {"disable_all": 0.0}},
                        1e-4)["reproduced"] is False
    assert decide_crash(case, {"a": {"disable_all": None}, "b": {"disable_all": 1.0}},
                        1e-4)["reproduced"] is False
    assert decide_crash(case, {"a": {"disable_all": None}, "b": {"disable_all": None}},
                        1e-4)["reproduced"] is False


def test_the_shipped_crash_table() -> None:
    ev = CorpusEvidence(ROOT / "claims" / "corpus" / "evidence" / "kit")
    assert RECOMPUTE_CORPUS["corpus.crashes_as_declared"](ev, "listed") == 2
    assert RECOMPUTE_CORPUS["corpus.crashes_as_declared"](ev) == 2
