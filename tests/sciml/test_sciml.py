"""SciML framework: cards and their schema, the gate on hand-made cases for each
condition, every verdict class, the ledger and the statistics.

Also covers ``kit.sciml.checkpoints``, ``kit.sciml.config``, ``kit.sciml.fno``,
``kit.sciml.fno_study``, ``kit.sciml.gate``, ``kit.sciml.ledger``,
``kit.sciml.pinn_study``, ``kit.sciml.pipeline``, ``kit.sciml.run``,
``kit.sciml.solvers``, ``kit.sciml.verdicts`` (no test file of their own)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from kit.errors import ConfigError, KitError
from kit.paths import ROOT
from kit.sciml import checkpoints
from kit.sciml.cards import CARDS, load_card, load_cards
from kit.sciml.gate import GateFindings, decide
from kit.sciml.ledger import Ledger
from kit.sciml.stats import bootstrap_mean_ci, cliffs_delta, wilcoxon, wilson
from kit.sciml.verdicts import VERDICTS, domain_score, judge


def card(name: str = "fno-periodic-translation") -> dict:
    return load_card(CARDS / f"{name}.yaml")


def holding(c: dict, **over: object) -> GateFindings:
    fields = {"preconditions": {p: "holds" for p in c["preconditions"]},
              "boundary_compatibility": "holds", "output_mapping": "holds",
              "floor": 1e-7, "tolerance": 1e-5, **over}
    return GateFindings(**fields)  # type: ignore[arg-type]


def test_shipped_cards_validate() -> None:
    cards = load_cards()
    assert len(cards) == len(list(CARDS.glob("*.yaml"))) == 17
    assert {c["id"] for c in cards.values()} == set(cards)
    assert cards["p1-divergence-absolute"]["source_category"] == "conservation"


def test_schema_rejects_bad_cards(tmp_path: Path) -> None:
    bad = yaml.safe_load((CARDS / "fno-periodic-translation.yaml").read_text())
    bad["level"] = "vibes"
    path = tmp_path / "fno-periodic-translation.yaml"
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(ConfigError, match="level: 'vibes' is not one of"):
        load_card(path)
    del bad["level"]
    bad["tolerance"] = {"rule": "whatever we like"}
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(ConfigError, match="'level' is a required property"):
        load_card(path)
    good = yaml.safe_load((CARDS / "fno-periodic-translation.yaml").read_text())
    other = tmp_path / "renamed.yaml"
    other.write_text(yaml.safe_dump(good))
    with pytest.raises(ConfigError, match="must match the file name"):
        load_card(other)


def test_gate_admits_when_all_four_hold() -> None:
    c = card()
    assert decide(c, holding(c)).decision == "retained-executable"


def test_gate_rejects_without_basis_or_with_a_broken_boundary() -> None:
    c = card()
    assert decide({**c, "basis": ""}, holding(c)).decision == "rejected"
    assert decide(c, holding(c, boundary_compatibility="fails")).decision == "rejected"
    first = c["preconditions"][0]
    broken = holding(c, preconditions={**holding(c).preconditions, first: "fails"})
    assert decide(c, broken).decision == "rejected"
    measured = decide(c, holding(c, basis="fails", basis_why="density variation 0.25"))
    assert measured.decision == "rejected"
    assert measured.conditions["basis"]["why"].startswith("density variation 0.25")


def test_gate_downgrades_approximate_relations_to_ood_stress() -> None:
    c = card()
    decision = decide(c, holding(c, output_mapping="approximate"))
    assert decision.decision == "retained-as-OOD-stress"
    assert decision.rubric["output mapping"] == "approximate"


def test_gate_defers_when_the_floor_dominates_or_is_unmeasured() -> None:
    c = card()  # floor_margin 10
    assert decide(c, holding(c, floor=2e-6, tolerance=1e-5)).decision == "deferred"
    assert decide(c, holding(c, floor=None)).decision == "deferred"
    decision = decide(c, holding(c, preconditions={}))
    assert decision.decision == "deferred"
    assert "not measured" in decision.conditions["preconditions"]["why"]


def test_every_verdict_class_is_reachable() -> None:
    seen = {
        judge("c", "a", 1e-8, 1e-6).verdict,
        judge("c", "b", 5e-6, 1e-6, floor=1e-7).verdict,
        judge("c", "c", 1e-6, 1e-6, preconditions_met=False).verdict,
        judge("c", "d", 1.0, 1e-6, domain=0.51).verdict,
        judge("c", "e", 1.05e-6, 1e-6, floor=1e-7).verdict,
        judge("c", "f", float("nan"), 1e-6).verdict,
    }
    assert seen == set(VERDICTS)
    v = judge("c", "g", 1.1, 1e-6)
    assert v.ratio == pytest.approx(1.1e6)


def test_domain_score() -> None:
    assert domain_score(0.0) == 0.0
    assert domain_score(1.0) == 0.5
    assert domain_score(1.04) == pytest.approx(0.5098, abs=1e-4)
    with pytest.raises(ValueError, match="finite and >= 0"):
        domain_score(-1.0)


def test_ledger_refuses_verdicts_of_unadmitted_cards(tmp_path: Path) -> None:
    ledger = Ledger("subjects trained by the kit on data it generates")
    good, rejected = card(), card("fno-dirichlet-translation")
    ledger.decide(decide(good, holding(good)))
    ledger.decide(decide(rejected, holding(rejected, boundary_compatibility="fails")))
    ledger.add(judge(good["id"], "case-1", 1e-8, 1e-6))
    ledger.add(judge(good["id"], "case-2", 1.0, 1e-6))
    with pytest.raises(KitError, match=r"\(rejected\) cannot carry verdicts"):
        ledger.add(judge(rejected["id"], "case-1", 1e-8, 1e-6))
    assert ledger.counts() == {good["id"]: {"pass": 1, "fail": 1}}
    path = ledger.write(tmp_path / "ledger.json")
    assert '"decision": "rejected"' in path.read_text()


def test_statistics_against_known_values() -> None:
    low, high = wilson(5, 10)
    assert (round(low, 4), round(high, 4)) == (0.2366, 0.7634)
    assert cliffs_delta([3, 4, 5], [0, 1, 2]) == 1.0
    assert cliffs_delta([0, 1], [0, 1]) == 0.0
    x = np.arange(1.0, 21.0)
    assert wilcoxon(x + 1.0, x) < 0.001
    lo, hi = bootstrap_mean_ci(x, seed=0, resamples=2000)
    assert lo < x.mean() < hi


def test_sciml_run_on_a_tiny_configuration(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    import json
    import sys

    from kit.runfolder import check_manifest
    from kit.sciml.config import Config
    from kit.sciml.pipeline import run_pipeline

    config = Config.tiny(tmp_path / "cache", physicsnemo=Path(sys.executable))
    ledger = run_pipeline(config, tmp_path)
    decisions = {d["card"]: d["decision"] for d in ledger["decisions"]}
    assert decisions == {"p1-divergence-absolute": "deferred",
                         "fv-flux-conservation": "retained-executable",
                         "fno-periodic-translation": "retained-executable",
                         "fno-periodic-conservation": "retained-executable",
                         "fno-dirichlet-translation": "rejected",
                         "pinn-collocation-permutation": "retained-executable",
                         "pinn-boundary-residual": "retained-executable",
                         "pinn-reference-conservation": "retained-executable",
                         "mgn-node-permutation": "retained-executable",
                         "mgn-mirror-y": "retained-as-OOD-stress",
                         "mgn-mirror-y-exact": "retained-executable",
                         "mgn-continuity-absolute": "deferred",
                         "mgn-continuity-guard": "retained-executable",
                         "cmp-incompressible-continuity": "rejected",
                         "cmp-mirror-y": "rejected",
                         "cmp-node-permutation": "retained-executable",
                         "cmp-mass-conservation": "deferred"}
    assert ledger["counts"]["fv-flux-conservation"] == {"pass": 1}
    # an FNO without positional embedding is shift-equivariant even untrained
    assert ledger["counts"]["fno-periodic-translation"] == {"pass": 2 * 4}
    assert sum(ledger["counts"]["fno-periodic-conservation"].values()) == 2 * 4
    fno = json.loads((tmp_path / "fno.json").read_text())
    assert fno["dirichlet_rejected"] == 2
    assert fno["embedding_effect"]["grid"] > 1e3 * fno["embedding_effect"]["none"]
    assert fno["roster"]["heat_admitted"]["n"] == 2
    pinn = json.loads((tmp_path / "pinn.json").read_text())
    assert ledger["counts"]["pinn-collocation-permutation"] == {"pass": 4}  # vacuous
    assert pinn["summary"]["heat"]["mr_a"]["max_violation"] == 0.0
    assert sum(ledger["counts"]["pinn-boundary-residual"].values()) == 4
    assert -1 <= pinn["mr_b_comparison"]["cliffs_delta_heat_vs_burgers"] <= 1
    mgn = json.loads((tmp_path / "mgn.json").read_text())
    # 3 subjects (1 MGN, 1 PointMLP, 1 served through the PhysicsNeMo worker's pipe) x
    # (held-out frames + 1 frame of the other trajectory)
    cases = 3 * (len(mgn["heldout_frames"]) + 1)
    assert ledger["counts"]["mgn-node-permutation"] == {"pass": 2 * cases}
    assert set(ledger["counts"]["mgn-mirror-y"]) == {"out-of-relation-domain"}
    assert sum(ledger["counts"]["mgn-mirror-y"].values()) == cases
    assert sum(ledger["counts"]["mgn-mirror-y-exact"].values()) == 3 * 3
    assert [s["arch"] for s in mgn["subjects"]] == ["mgn", "pointmlp", "physicsnemo"]
    assert mgn["physicsnemo"].startswith("run: kit backend")
    assert {r["trajectory"] for r in mgn["subjects"][0]["cases"]} == {"train", "inflow0.8"}
    assert mgn["mirror_domain_score"] > 0.5
    assert sum(ledger["counts"]["mgn-continuity-guard"].values()) == cases
    faults = json.loads((tmp_path / "mgn_faults.json").read_text())
    assert len(faults["mutants"]) == 12
    assert faults["mutants"]["BC_zero_inflow"]["summary"]["any"]["n"] == 2  # 1 subject x 2
    assert set(faults["scale_sweep"]) == {"1.1", "1.25", "1.5", "2", "4"}
    assert len(faults["fraction_sweep"]) == 8
    # the unmutated pipeline is exactly permutation-equivariant on every trial
    assert not any(t["detected"]["permutation"] for t in faults["control"]["trials"])
    unified = json.loads((tmp_path / "unified.json").read_text())
    assert unified["size"] == 60
    assert unified["families"] == {"mgn": 12, "pinn": 24, "fno": 24}
    # the index-dependent probes break the permutation-class relations on the references
    labels = {e["name"]: e["labels"] for e in unified["entries"]}
    assert labels["pinn-heat-rows_zero-1"]["permutation"]
    assert labels["fno-burgers-transpose-1"]["permutation"]
    assert not any(labels["fno-heat-fixed_roll-3"].values())
    assert unified["reference_check"]["burgers_series_initial_max_error"] < 1e-6
    second = json.loads((tmp_path / "second_task.json").read_text())
    assert second["measured"]["density_variation"] > 0.05
    floor = json.loads((tmp_path / "operator_floor.json").read_text())
    assert {r["decision"] for r in floor["gate_per_resolution"]} == {"deferred"}
    assert check_manifest(tmp_path) == []
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("sciml:")]
    names = ["floor", "fno", "pinn", "mgn", "catalogue", "ledger", "report"]
    assert [line for line in said if ": step" in line and "done" not in line
            and "still running" not in line] \
        == [f"sciml: step {n}/7 {name}" for n, name in enumerate(names, 1)]
    assert said[-1].startswith("sciml: 7 steps in ")
    assert said[-1].endswith(f"; evidence in {tmp_path}")
    assert (tmp_path / "report" / "index.html").is_file()
    recomputed_claims_agree_with_the_run(tmp_path, fno, pinn)
    resumed_runs_keep_finished_steps(config, tmp_path, capsys)
    shipped_weights_replay_the_run(config, tmp_path)


def shipped_weights_replay_the_run(config: Any, run: Path) -> None:
    """The run carries every subject's checkpoint it used (``weights/``, under its
    manifest); a second run that starts from them alone, training nothing, writes the same
    records byte for byte; a subject they lack is refused, never trained."""
    from dataclasses import replace

    from kit.errors import KitError
    from kit.files import read_json, sha256
    from kit.runfolder import MANIFEST
    from kit.sciml import checkpoints
    from kit.sciml.pipeline import run_pipeline

    listed = read_json(run / MANIFEST)["files"]
    weights = {name.split("/", 1)[1]: (run / name, digest) for name, digest in listed.items()
               if name.startswith("weights/")}
    assert {name.split("/")[0] for name in weights} == {
        "sciml-fno-avx2", "sciml-pinn-avx2", "sciml-mgn-avx2", "sciml-physicsnemo-avx2"}
    assert all(sha256(path) == digest for path, digest in weights.values())
    again = run.parent / "from-shipped"
    try:
        cache = checkpoints.use_shipped(weights, run.parent / "shipped-cache")
        run_pipeline(replace(config, cache=cache), again)
        for name in ["ledger.json", "fno.json", "pinn.json", "mgn.json", "mgn_faults.json",
                     "unified.json", "second_task.json", *(f"weights/{n}" for n in weights)]:
            assert (again / name).read_bytes() == (run / name).read_bytes(), name
        missing = dict(list(weights.items())[1:])
        cache = checkpoints.use_shipped(missing, run.parent / "shipped-cache")
        with pytest.raises(KitError, match="the shipped SciML weights hold no"):
            run_pipeline(replace(config, cache=cache), run.parent / "lacking")
        bad = {name: (path, "0" * 64) for name, (path, _) in weights.items()}
        with pytest.raises(KitError, match="is not the shipped run manifest's"):
            checkpoints.use_shipped(bad, run.parent / "shipped-cache")
    finally:
        checkpoints._shipped = None


def resumed_runs_keep_finished_steps(config: Any, run: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A rerun keeps every finished step and writes the same bytes; a step whose state is
    gone (killed) runs again, with every step after it; another configuration is refused."""
    from dataclasses import replace

    from kit.errors import KitError
    from kit.runfolder import MANIFEST
    from kit.sciml.pipeline import run_pipeline

    before = {p.name: p.read_bytes() for p in run.glob("*.json")}
    assert run_pipeline(config, run)["counts"] == json.loads(before["ledger.json"])["counts"]
    said = capsys.readouterr().err.splitlines()
    assert sum(line.endswith(": kept from an earlier run") for line in said) == 7
    (run / "steps" / "catalogue.json").unlink()
    (run / "unified.json").unlink()
    run_pipeline(config, run)
    said = capsys.readouterr().err.splitlines()
    assert [line.split()[3].rstrip(":") for line in said
            if line.endswith("kept from an earlier run")] \
        == ["floor", "fno", "pinn", "mgn"]
    assert {p.name: p.read_bytes() for p in run.glob("*.json")} == before
    assert MANIFEST in before
    with pytest.raises(KitError, match="started with another configuration"):
        run_pipeline(replace(config, fv_cells=16), run)


def recomputed_claims_agree_with_the_run(run: Path, fno: dict, pinn: dict) -> None:
    import json

    from kit.sciml.recompute import RECOMPUTE_SCIML, SciEvidence

    ev = SciEvidence(run)
    floor = json.loads((run / "operator_floor.json").read_text())
    assert RECOMPUTE_SCIML["sciml.floor_fit"](ev, stat="slope") == floor["slope"]
    assert RECOMPUTE_SCIML["sciml.fno_translation_passes"](ev) == 8
    assert RECOMPUTE_SCIML["sciml.fno_dirichlet_rejected"](ev) == fno["dirichlet_rejected"]
    assert RECOMPUTE_SCIML["sciml.pinn_passes"](ev, relation="mr_b", pde="heat") == \
        pinn["summary"]["heat"]["mr_b"]["passes"]
    assert RECOMPUTE_SCIML["sciml.pinn_mean_ci"](ev, relation="mr_c", pde="heat") == \
        pinn["summary"]["heat"]["mr_c"]["mean_ratio_ci95"]
    unified = json.loads((run / "unified.json").read_text())
    assert RECOMPUTE_SCIML["sciml.unified_size"](ev) == 60
    assert RECOMPUTE_SCIML["sciml.unified_size"](ev, family="mgn") == 12
    for detector in ("permutation", "conservation", "boundary"):
        for field in ("true_positives", "false_positives", "targeted", "entries"):
            assert RECOMPUTE_SCIML["sciml.unified_pr"](ev, detector=detector, field=field) == \
                unified["labelled"][detector][field]
    assert RECOMPUTE_SCIML["sciml.unified_flagged"](ev) == unified["any_detector"]["count"]


def test_solvers_conserve_the_sum_to_rounding() -> None:
    from kit.sciml.solvers import initial_states, relative_drift, simulate

    u0 = initial_states(3, 16, seed=1)
    for pde in ("heat", "burgers"):
        u = simulate(u0, pde)
        assert relative_drift(u0, u).max() < 1e-14
        assert np.abs(u - u0).mean() > 1e-2  # and they do evolve the field


def test_untrained_fno_translation_equivariance_depends_on_the_embedding() -> None:
    from kit.sciml.fno import embedding_effect

    found = embedding_effect([[1, 0], [0, 3]])
    assert found["none"] < 1e-6
    assert found["grid"] > 1e-3


def test_an_fno_checkpoint_reloads_weights_only(tmp_path: Path) -> None:
    """neuraloperator's state dict carries its constructor arguments (a function among
    them); the cache keeps tensors only, so a weights-only load of it works, and a file
    that does not load is treated as missing rather than crashing the run."""
    from kit.sciml import checkpoints
    from kit.sciml.fno import Recipe, build

    model = build(Recipe("heat", 0, modes=4, hidden=4))
    path = tmp_path / "fno.pt"
    checkpoints.save(path, model, note=1)
    state = checkpoints.load(path)
    assert state is not None
    assert state["note"] == 1
    model.load_state_dict(state["model"])
    path.write_bytes(b"not a checkpoint")
    assert checkpoints.load(path) is None


def test_an_mr_card_with_a_yaml_alias_or_a_bad_byte_is_refused(tmp_path: Path) -> None:
    from kit.errors import FileFormatError
    from tests.test_files import billion_laughs

    text = (CARDS / "fno-periodic-translation.yaml").read_text()
    path = tmp_path / "fno-periodic-translation.yaml"
    path.write_text(text + billion_laughs())
    with pytest.raises(FileFormatError, match=r"translation\.yaml: a YAML alias \(\*\)"):
        load_card(path)
    path.write_bytes(text.encode() + b"\n# \xff\n")
    with pytest.raises(FileFormatError, match=r"translation\.yaml: not UTF-8 text \(byte 0xff"):
        load_card(path)


@pytest.mark.parametrize(("args", "says"), [
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--resimulat"], "unrecognized arguments: --resimulat"),
    (["--resimulate", "--deepmind", "x"], "not allowed with argument"),
])
def test_the_sciml_command_refuses_unknown_options_before_any_work(
        args: list[str], says: str, tmp_path: Path) -> None:
    """argparse in the library: a mistyped option exits 2 at once, not after the study."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "kit", "sciml", "--run", str(tmp_path / "r"),
                           *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert says in proc.stderr
    assert not (tmp_path / "r").exists()


def test_the_sciml_command_checks_a_deepmind_folder_before_building_anything(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kit.__main__ import main

    assert main(["sciml", "--run", str(tmp_path / "r"), "--deepmind", str(tmp_path / "none")]
                ) == 2
    assert capsys.readouterr().err.startswith(
        f"kit: error: {tmp_path / 'none' / 'meta.json'}: cannot read the dataset description")


def test_the_numerics_pin_holds_torch_to_avx2_in_a_fresh_process(tmp_path: Path) -> None:
    import platform
    import subprocess
    import sys

    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("the pin is x86-64's")
    code = ("from kit.sciml.checkpoints import pin_numerics; import os; "
            "print(pin_numerics(), os.environ['ONEDNN_MAX_CPU_ISA'])")
    env = {k: v for k, v in os.environ.items() if k not in checkpoints.NUMERICS}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True, cwd=ROOT).stdout.split()
    assert out == ["AVX2", "AVX2"]


def test_a_torch_that_chose_other_kernels_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import platform

    import torch

    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("the pin is x86-64's")
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    with pytest.raises(KitError, match="AVX512 kernels, not the AVX2"):
        checkpoints.pin_numerics()


def test_cached_subjects_live_under_the_pin(tmp_path: Path) -> None:
    path = checkpoints.cached_path("fno", "heat-0-abc", tmp_path)
    assert path == tmp_path / f"sciml-fno-{checkpoints.NUMERICS_TAG}" / "heat-0-abc.pt"
