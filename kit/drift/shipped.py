"""Lazy, checked access to one drift evidence folder (a run folder or the shipped copy
under ``claims/drift/evidence/<substrate>``): records, the protocol copy, the per-case
tables (each checked against the sha256 ``score/score.json`` lists), and the analyses the
recompute functions share, each computed once."""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from kit.drift import analysis
from kit.drift import bootstrap as engine
from kit.drift.evidence import read_table, table_name
from kit.drift.grid import sensitivity
from kit.errors import KitError
from kit.files import load_npz, read_json, read_yaml, sha256
from kit.runfolder import inside, plain_name

Array = np.ndarray[Any, Any]


# A case's detector scores, and the true layer's ranks among the layer sketches.
SCORES = ("e_o_norm", "e_t_norm", "metamorphic", "mixed", "maximum", "cosine", "ratio")
RANKS = ("rank_direct", "rank_metamorphic", "rank_maximum")
NO_RANKS = ("the null (unmutated controls) has no layer ranks: the run records no per-layer "
            "sketches for its held-out controls")


class _NoRanks(dict[str, Array]):
    """A null's case table: its rank columns cannot be read (``NO_RANKS``)."""

    def __getitem__(self, key: str) -> Array:
        if key in RANKS:
            raise KitError(NO_RANKS)
        return super().__getitem__(key)


def controls_in_place(table: dict[str, Array], where: str) -> dict[str, Array]:
    """``table`` with every injected fault undone: each fault case's detector scores are
    those of its unmutated control (the held-out clean case of the same model and image);
    labels, roles and the rest stay. A fault case without its control is a KitError."""
    fault, role = table["fault"], table["role"]
    key = table["model"].astype(np.int64) * (1 << 32) + table["image"].astype(np.int64)
    controls = np.flatnonzero((fault == analysis.CLEAN) & (role == analysis.HELDOUT))
    order = controls[np.argsort(key[controls], kind="stable")]
    faulty = np.flatnonzero(fault != analysis.CLEAN)
    at = np.searchsorted(key[order], key[faulty])
    found = (at < len(order)) & (key[order][np.minimum(at, len(order) - 1)] == key[faulty])
    if not found.all():
        raise KitError(f"{where}: a fault case has no unmutated control of its model and "
                       "image, so no null can be built")
    null = dict(table)
    for column in SCORES:
        null[column] = table[column].copy()
        null[column][faulty] = table[column][order[at]]
    return _NoRanks(null)


class Evidence:
    """Lazy, checked access to one substrate's evidence folder."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def json(self, relative: str) -> Any:
        path = self.root / relative
        if not path.is_file():
            raise KitError(f"{path}: evidence file missing")
        return read_json(path)

    @cached_property
    def protocol(self) -> dict[str, Any]:
        path = self.root / "score" / "protocol.yaml"
        if not path.is_file():
            raise KitError(f"{path}: evidence file missing")
        return read_yaml(path)  # type: ignore[no-any-return]

    @cached_property
    def record(self) -> dict[str, Any]:
        return self.json("score/score.json")  # type: ignore[no-any-return]

    @cached_property
    def models(self) -> list[str]:
        return list(self.record["codes"]["models"])

    @cached_property
    def quantile(self) -> float:
        return float(self.protocol["calibration"]["quantile"])

    def table(self, cell: str = "cand", cond: str | None = None) -> dict[str, Array]:
        name = table_name(cell, cond or self.record["primary_condition"])
        if name not in self.record["tables"]:
            raise KitError(f"{self.root}/score/score.json: no table {name!r}")
        return self._tables(name)

    def _tables(self, name: str) -> dict[str, Array]:
        described = self.record["tables"][name]
        return self.memo(f"table/{name}",  # type: ignore[no-any-return]
                         lambda: read_table(self._listed(described["path"],
                                                         f"tables.{name}.path"), described))

    def _listed(self, name: object, field: str) -> Path:
        """A file ``score/score.json`` names, once it lies inside the evidence folder."""
        return inside(self.root, plain_name(name, self.root / "score/score.json", field),
                      self.root / "score/score.json", field)

    def _checked_npz(self, key: str) -> dict[str, Array]:
        entry = self.record[key]
        path = self._listed(entry["path"], f"{key}.path")
        if not path.is_file() or sha256(path) != entry["sha256"]:
            raise KitError(f"{path}: missing or its sha256 differs from score/score.json")
        return load_npz(path)

    @cached_property
    def layers(self) -> dict[str, Array]:
        return self._checked_npz("layers")

    @cached_property
    def clean(self) -> dict[str, Array]:
        return self._checked_npz("clean_logits")

    @cached_property
    def primary(self) -> dict[str, Any]:
        return analysis.primary(self.table(), self.models, self.quantile)

    @cached_property
    def rates(self) -> dict[str, Any]:
        """``primary`` without AUROC and AUPRC (the rates alone, read from ``primary`` when
        that is computed already)."""
        if "primary" in self.__dict__:
            return self.primary
        return analysis.primary(self.table(), self.models, self.quantile, free=False)

    @cached_property
    def localisation(self) -> dict[str, Any]:
        ranks = analysis.ranks_from_layers(self.table(), self.layers, self.models, self.quantile)
        return analysis.localisation(self.table(), self.models, ranks)

    @cached_property
    def sensitivity(self) -> dict[str, Any]:
        tables = {name: self._tables(name) for name in self.record["tables"]}
        reduced = np.asarray(self.json("split/split.json")["reduced_positions"])
        return sensitivity(self.record, tables, reduced, self.quantile)

    def memo(self, key: str, compute: Callable[[], Any]) -> Any:
        """Compute once per evidence folder (several claims read one analysis)."""
        cache = self.__dict__.setdefault("_memo", {})
        if key not in cache:
            cache[key] = compute()
        return cache[key]

    def images(self, role: str) -> Array:
        return np.array([r["position"] for r in self.json("split/split.json")["rows"]
                         if r["role"] == role], np.int64)

    def bootstrap(self, which: str) -> dict[str, Array]:
        """The fixed or nested replicates recomputed with the protocol's seeds."""
        boot, seeds = self.protocol["bootstrap"], self.protocol["seeds"]
        nested = which == "nested"

        def compute() -> dict[str, Array]:
            reps = engine.detection_replicates(
                self.table(), self.images("calibration"), self.images("heldout"),
                boot["nested_replicates" if nested else "fixed_replicates"],
                seeds["bootstrap_nested" if nested else "bootstrap_fixed"], nested,
                self.quantile, self.protocol["calibration"]["matched_fpr"])
            return {**reps, **engine.differences(reps)}

        return self.memo(f"bootstrap/{which}", compute)  # type: ignore[no-any-return]


class ControlNull(Evidence):
    """The null behind the detector and fault rows: the same evidence with every injected
    fault undone (``controls_in_place``), read by the same recompute functions. A rule that
    still passes here passes without any fault to find. The layer sketches and the rank
    columns are not the controls' (none were recorded for them): reading either is a
    KitError, so such rows keep their status and say that no null stands behind them."""

    def _tables(self, name: str) -> dict[str, Array]:
        base = Evidence._tables(self, name)
        return self.memo(f"null/{name}",  # type: ignore[no-any-return]
                         lambda: controls_in_place(base, f"{self.root}/{name}"))

    @cached_property
    def layers(self) -> dict[str, Array]:
        raise KitError(NO_RANKS)
