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
