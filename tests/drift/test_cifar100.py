"""The paper's substrate end to end: every stage on ``--substrate cifar100`` from synthetic
stand-ins of the pinned assets (tests/cifar_synth.py, pinned by a pins file of the sha256
computed here), shipped into a copy of the repository, and every ``cifar100`` rule of the
drift ledger decided there.

The run is the small protocol on a test split of 5 classes x 2 images (a 10-image sample:
the three models, the full 3 x 3 x 2 fault matrix, every rotation condition), then a
replay of the evidence stages, as ``verify --replay --stages`` makes it. Its numbers are
not the paper's: a value rule that misses is ``differs`` with both numbers shown, and
once a copy of the ledger holds the recomputed values, ``reproduced`` (``by design`` where a
half is a design number).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kit.claims.ledger import STATUSES, Outcome, _show, call, clear_cache, evaluate, load_ledger
from kit.claims.ship import ship
from kit.claims.verify import check_manifests
from kit.drift.assets import PINNED, load_pins
from kit.drift.protocol import write_small_protocol
from kit.drift.replay import compare_runs, prepare, write_report
from kit.drift.shipped import Evidence
from kit.drift.stages.fetch import run_fetch
from kit.drift.stages.pipeline import STAGES, reproduce, run_stage
from kit.errors import KitError
from kit.paths import ROOT
from kit.runfolder import Run
from tests.cifar_synth import ARCHIVE, FILE_NAMES, write_assets

CLASSES = 5  # test-split classes with 2 images each: a 10-image sample (5 + 5)
REPLAYED = ("score", "bootstrap", "sensitivity", "report")
VALUE_RULES = ("exact", "rounds_to", "abs_tol")
# design parameters the small protocol keeps: equal to the paper's before any rewrite, and
# graded ``by design`` (the kit is built to them), never ``reproduced``
DESIGN = ("A-001", "A-002", "A-003", "A-004", "A-005", "A-006", "A-007", "A-008", "A-016",
          "A-017", "A-025", "A-026", "A-027", "A-028", "A-029", "A-031", "A-033", "A-034",
          "A-035", "A-036", "A-037", "A-038", "A-040", "A-041", "A-042")
EVIDENCE = Path("claims/drift/evidence/cifar100")


@pytest.fixture(scope="module")
def assets(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(mirror folder of the synthetic assets, the pins file pinning them)."""
    mirror = tmp_path_factory.mktemp("cifar-assets") / "mirror"
    return mirror, write_assets(mirror, per_class=2, classes=CLASSES)


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory,
            assets: tuple[Path, Path]) -> Iterator[tuple[Run, Path]]:
    """(the finished run, a repository copy holding its shipped evidence)."""
    tmp = tmp_path_factory.mktemp("cifar-run")
    mirror, pins = assets
    protocol = write_small_protocol(tmp / "small.yaml", "cifar100", size=2 * CLASSES)
    options: dict[str, Any] = {"substrate": "cifar100", "protocol_file": protocol,
                               "backend": "venv"}
    first = tmp / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KIT_CACHE", str(tmp / "cache"))  # the asset store, not the repo's .kit
        run_stage("fetch", run_dir=first, assets=mirror, asset_pins=pins, **options)
    reproduce(STAGES[1:], run_dir=first, **options)
    replay = tmp / "replay"
    prepare(first, replay, REPLAYED, STAGES)
    reproduce(REPLAYED, run_dir=replay, **options)
    write_report(first, compare_runs(first, replay))
    root = tmp / "repo"
    for name in ("claims", "manifests", "locks"):
        shutil.copytree(ROOT / name, root / name)
    ship(first, root=root)
    clear_cache()
    yield Run(first), root
    clear_cache()
    shutil.rmtree(tmp)  # ~1.5 GB of faulty VGG-11 graphs


def cifar_rules(ledger: dict[str, Any]) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Claim id -> (claim, its cifar100 rule)."""
    return {c["id"]: (c, c["rules"]["cifar100"]) for c in ledger["claims"]
            if "cifar100" in c.get("rules", {})}


def decided(ledger: dict[str, Any], root: Path) -> dict[str, Outcome]:
    problems: list[str] = []
    outcomes = evaluate(ledger, root, problems)
    assert problems == []
    return {o.claim: o for o in outcomes if o.substrate == "cifar100"}


def misses(rule: dict[str, Any], value: Any, published: Any) -> bool:
    """Whether the recomputed value misses the published one under a value rule."""
    if isinstance(published, list):
        return not isinstance(value, list) or len(value) != len(published) or any(
            misses(rule, v, p) for v, p in zip(value, published, strict=True))
    if rule["rule"] == "exact":
        return bool(value != published)
    slack = rule["tol"] if rule["rule"] == "abs_tol" else 0.5 * 10.0 ** -rule["decimals"]
    return not abs(value - published) <= slack + 1e-9


def agreeing(rule: dict[str, Any]) -> str:
    """The status of a value rule whose every half agrees: ``reproduced`` where any half is
    a measured value (a design half beside it neither lends nor takes that status), else
    ``by design``."""
    halves = [rule, *rule.get("parts", ())]
    return "reproduced" if any(h.get("grade") != "design" for h in halves) else "by design"


def as_published(rule: dict[str, Any], value: Any) -> Any:
    """The recomputed value as the ledger would print it under ``rule``."""
    if isinstance(value, list):
        return [as_published(rule, v) for v in value]
    if rule["rule"] == "rounds_to" and isinstance(value, float):
        return round(value, int(rule["decimals"]))
    return value


def test_fetch_used_and_recorded_the_pins_file(shipped: tuple[Run, Path],
                                               assets: tuple[Path, Path]) -> None:
    run, _ = shipped
    mirror, pins = assets
    fetched = run.record("fetch")
    assert fetched["substrate"] == "cifar100"
    assert fetched["classes"] == 100
    assert fetched["images"] == 2 * CLASSES
    assert fetched["asset_pins"]["source"] == "pins file"
    assert fetched["asset_pins"]["file"] == pins.name
    assert fetched["asset_pins"]["file_sha256"] == hashlib.sha256(pins.read_bytes()).hexdigest()
    for model, name in FILE_NAMES.items():
        digest = hashlib.sha256((mirror / name).read_bytes()).hexdigest()
        source = fetched["models"][model]["source"]
        assert source["sha256"] == digest
        assert source["pin"] == f"sha256 {digest}"
    assert fetched["models"]["vgg11_bn"]["sketch_outputs"] == 8
    assert fetched["models"]["mobilenetv2_x0_5"]["sketch_outputs"] == 52


def test_shipped_copy_checks_out(shipped: tuple[Run, Path]) -> None:
    run, root = shipped
    assert check_manifests(root) == []
    assert json.loads((run.root / "replay.json").read_text())["identical"] is True
    assert (root / EVIDENCE / "replay.json").is_file()


def test_verify_refuses_paper_evidence_fetched_under_other_pins(
        shipped: tuple[Run, Path]) -> None:
    """The synthetic stand-ins decide every rule kind, but as the paper's evidence they
    are refused: only kit/drift/assets.py's pins can reproduce the paper."""
    from kit.claims.verify import paper_pin_problems

    _, root = shipped
    ledger = load_ledger(root / "claims" / "drift.yaml")
    [problem] = paper_pin_problems(root, [ledger])
    assert "fetch.json: the cifar100 evidence was fetched under other asset pins" in problem


def test_every_cifar100_rule_is_decided(shipped: tuple[Run, Path]) -> None:
    _, root = shipped
    ledger = load_ledger(root / "claims" / "drift.yaml")
    outcomes = decided(ledger, root)
    assert sorted(outcomes) == sorted(cifar_rules(ledger))
    assert {o.status for o in outcomes.values()} <= set(STATUSES) - {"not run here"}
    assert all(o.recomputed not in ("", "-") for o in outcomes.values())
    for claim in DESIGN:
        assert outcomes[claim].status == "by design", outcomes[claim]


def test_value_rules_differ_then_reproduce_from_the_recomputed_values(
        shipped: tuple[Run, Path]) -> None:
    """A value rule that misses is ``differs`` with both numbers shown; with the recomputed
    value in a copy of the ledger it is ``reproduced``, except where that value is not a
    number (the mean cosine of an empty discordant group is NaN, which equals nothing)."""
    _, root = shipped
    ledger = load_ledger(root / "claims" / "drift.yaml")
    evidence = Evidence(root / EVIDENCE)
    outcomes = decided(ledger, root)
    rewritten = copy.deepcopy(ledger)
    missed, unequal = [], []
    for claim_id, (claim, rule) in cifar_rules(rewritten).items():
        if rule["rule"] not in VALUE_RULES:
            continue
        value = call(rule.get("compute", claim["compute"]), evidence)
        outcome = outcomes[claim_id]
        # the other halves of a printed pair (each a value rule on the paper's substrate)
        halves = [(part, call(part["compute"], evidence)) for part in rule.get("parts", ())]
        assert all(part["rule"] in VALUE_RULES for part, _ in halves), claim_id
        missed_halves = [(part, v) for part, v in halves if misses(part, v, part["value"])]
        if not misses(rule, value, claim["value"]) and not missed_halves:
            assert outcome.status == agreeing(rule), outcome
            continue
        missed.append(claim_id)
        assert outcome.status == "differs", outcome
        for part, v in missed_halves:
            part["value"] = as_published(part, v)
        if not misses(rule, value, claim["value"]):
            continue
        assert outcome.recomputed == _show(value), outcome
        assert _show(claim["value"]) in outcome.rule, outcome
        claim["value"] = as_published(rule, value)
        if any(isinstance(v, float) and not math.isfinite(v)
               for v in (value if isinstance(value, list) else [value])):
            unequal.append(claim_id)
    assert missed  # a 10-image sample cannot give the paper's counts
    path = root / "claims" / "drift-rewritten.yaml"
    path.write_text(yaml.safe_dump(rewritten, sort_keys=False))
    again = decided(load_ledger(path), root)
    assert {c: again[c].status for c in missed} == {
        c: "differs" if c in unequal else agreeing(cifar_rules(rewritten)[c][1])
        for c in missed}


def test_wrong_hash_in_the_pins_fails_naming_the_file(tmp_path: Path,
                                                     assets: tuple[Path, Path],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    mirror, pins = assets
    monkeypatch.setenv("KIT_CACHE", str(tmp_path / "cache"))
    protocol = yaml.safe_load(write_small_protocol(tmp_path / "p.yaml", "cifar100").read_text())
    spec = json.loads(pins.read_text())
    spec["checkpoints"]["resnet20"]["sha256"] = "0" * 64
    wrong = tmp_path / "wrong-pins.json"
    wrong.write_text(json.dumps(spec))
    name = FILE_NAMES["resnet20"].replace(".", r"\.")
    with pytest.raises(KitError, match=rf"/{name}: sha256 [0-9a-f]{{64}} does not match "
                                       r"the pin 0{64}"):
        run_fetch(protocol, Run(tmp_path / "run"), "cifar100", mirror, wrong)
    spec["archive"]["sha256"] = "1" * 64
    wrong.write_text(json.dumps(spec))
    with pytest.raises(KitError, match=r"/cifar-100-python\.tar\.gz: sha256 .* does not "
                                       r"match the pin 1{64}"):
        run_fetch(protocol, Run(tmp_path / "run"), "cifar100", mirror, wrong)
    assert not (load_pins(wrong).store(tmp_path / "cache" / "assets") / ARCHIVE).exists()


def test_published_pins_refuse_the_synthetic_files(tmp_path: Path, assets: tuple[Path, Path],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a pins file the kit's own pins apply: the stand-ins are not CIFAR-100."""
    mirror, _ = assets
    monkeypatch.setenv("KIT_CACHE", str(tmp_path / "cache"))
    protocol = yaml.safe_load(write_small_protocol(tmp_path / "p.yaml", "cifar100").read_text())
    with pytest.raises(KitError, match=rf"/{ARCHIVE}: \d+ bytes \(sha256 [0-9a-f]{{64}}\), "
                                       rf"the pin for {ARCHIVE} says 169001437"):
        run_fetch(protocol, Run(tmp_path / "run"), "cifar100", mirror)
    assert load_pins(None) is PINNED


@pytest.mark.parametrize(("edit", "message"), [
    (lambda p: p["checkpoints"]["resnet20"].update(sha256="23dac2f1"), "64 lower-case hex"),
    (lambda p: p["checkpoints"]["resnet20"].pop("sha256"), "needs name and sha256"),
    (lambda p: p["archive"].update(name="../cifar.tar.gz"), "plain file name"),
    (lambda p: p["checkpoints"].update(resnet56={"name": "x.pt", "sha256": "a" * 64}),
     "resnet56"),
    (lambda p: p["members"].pop("cifar-100-python/meta"), "members must give"),
    (lambda p: p.update(bypass=True), "bypass"),
])
def test_pins_file_is_checked_at_the_boundary(tmp_path: Path, assets: tuple[Path, Path],
                                              edit: Any, message: str) -> None:
    spec = json.loads(assets[1].read_text())
    edit(spec)
    path = tmp_path / "pins.json"
    path.write_text(json.dumps(spec))
    with pytest.raises(KitError, match=rf"{re.escape(str(path))}: .*{message}"):
        load_pins(path)


def test_pins_file_is_refused_on_digits(tmp_path: Path, assets: tuple[Path, Path]) -> None:
    protocol = yaml.safe_load(write_small_protocol(tmp_path / "p.yaml").read_text())
    with pytest.raises(KitError, match="asset pins apply to the cifar100 substrate only"):
        run_fetch(protocol, Run(tmp_path / "run"), "digits", asset_pins=assets[1])


def test_a_mirror_missing_every_file_names_every_one(tmp_path: Path, assets: tuple[Path, Path],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """fetch checks the whole --assets mirror before copying anything: each pinned file it
    lacks is named (the archive and the three checkpoints), not only the first."""
    _, pins = assets
    monkeypatch.setenv("KIT_CACHE", str(tmp_path / "cache"))
    protocol = yaml.safe_load(write_small_protocol(tmp_path / "p.yaml", "cifar100").read_text())
    empty = tmp_path / "empty-mirror"
    empty.mkdir()
    with pytest.raises(KitError, match="4 of the 4 pinned files") as raised:
        run_fetch(protocol, Run(tmp_path / "run"), "cifar100", empty, pins)
    for name in (ARCHIVE, *(FILE_NAMES[m] for m in protocol["models"])):
        assert f"{empty / name}: missing" in str(raised.value)
    assert not (tmp_path / "run" / "fetch" / "fetch.json").exists()
