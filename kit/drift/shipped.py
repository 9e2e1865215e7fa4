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
from kit.drift.localise import KINDS
from kit.errors import KitError
from kit.files import load_npz, read_json, read_yaml, sha256
from kit.runfolder import inside, plain_name

Array = np.ndarray[Any, Any]


# A case's detector scores, and the true layer's ranks among the layer sketches.
SCORES = ("e_o_norm", "e_t_norm", "metamorphic", "mixed", "maximum", "cosine", "ratio")
RANKS = ("rank_direct", "rank_metamorphic", "rank_maximum")
CONTROL_LAYERS = "score/control-layers.npz"
GRID_LAYERS = "score/grid-layers.npz"
NO_RANKS = ("the null (unmutated controls) has no layer ranks: the evidence holds no per-layer "
            f"scores of its held-out controls ({CONTROL_LAYERS}, written by runs since 7 Dec "
            "2026) or none of this table's layers")


class _NoRanks(dict[str, Array]):
    """A null's case table without rank columns: reading one is a KitError (``NO_RANKS``)."""

    def __missing__(self, key: str) -> Array:
        if key in RANKS:
            raise KitError(NO_RANKS)
        raise KeyError(key)


def _controls_of(table: dict[str, Array], where: str) -> tuple[Array, Array]:
    """(every fault row, the row of its unmutated control: the held-out clean case of the
    same model and image). A fault case without its control is a KitError."""
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
    return faulty, order[at]


def controls_in_place(table: dict[str, Array], where: str,
                      ranks: dict[str, Array] | None = None) -> dict[str, Array]:
    """``table`` with every injected fault undone: each fault case's detector scores are
    those of its unmutated control; labels, roles and the rest stay. Its rank columns are
    ``ranks`` (per kind, from ``controls_in_layers``), or without them absent."""
    faulty, control = _controls_of(table, where)
    null = {name: column for name, column in table.items() if name not in RANKS}
    for column in SCORES:
        null[column] = table[column].copy()
        null[column][faulty] = table[column][control]
    if ranks is None:
        return _NoRanks(null)
    return {**null, **{f"rank_{kind}": ranks[kind].astype(np.int16) for kind in ranks}}


def controls_in_layers(table: dict[str, Array], layers: dict[str, Array],
                       controls: dict[str, Array], models: list[str], where: str
                       ) -> dict[str, Array]:
    """A localised table's per-layer scores (``layers``: its clean calibration and fault
    rows) with each fault row's scores those of its unmutated control (``controls``: the
    clean held-out rows', as ``score/control-layers.npz`` keeps them per table)."""
    faulty, control = _controls_of(table, where)
    control_of = np.full(len(table["model"]), -1, np.int64)
    control_of[faulty] = control
    out = dict(layers)
    for name in models:
        rows = layers[f"{name}/rows"]
        fault = table["fault"][rows] != analysis.CLEAN
        held = _array(controls, f"{name}/rows", where).astype(np.int64)
        order = np.argsort(held, kind="stable")
        wanted = control_of[rows[fault]]
        at = order[np.minimum(np.searchsorted(held[order], wanted), len(held) - 1)]
        if len(held) == 0 or (held[at] != wanted).any():
            raise KitError(f"{where}: a fault case's control of {name} has no layer scores")
        for kind in KINDS:
            scores, theirs = layers[f"{name}/{kind}"], _array(controls, f"{name}/{kind}", where)
            if theirs.shape != (len(held), scores.shape[1]):
                raise KitError(f"{where}: the controls' {name}/{kind} scores have shape "
                               f"{theirs.shape}, not {(len(held), scores.shape[1])}")
            out[f"{name}/{kind}"] = scores.copy()
            out[f"{name}/{kind}"][fault] = theirs[at]
    return out


def _array(arrays: dict[str, Array], key: str, where: str) -> Array:
    if key not in arrays:
        raise KitError(f"{where}: the controls' layer scores have no array {key!r}")
    return arrays[key]


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

    @property
    def ranked(self) -> bool:
        """Whether every localised table's rank columns can be read."""
        return True

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
        return sensitivity(self.record, tables, reduced, self.quantile, self.ranked)

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
    still passes here passes without any fault to find. A localised table's layer scores
    and ranks are its controls' (``controls_in_layers``, from ``score/control-layers.npz``);
    evidence made before that file existed has no null ranks: reading them is a KitError,
    so such rows keep their status and say that no null stands behind them."""

    def _tables(self, name: str) -> dict[str, Array]:
        base = Evidence._tables(self, name)
        return self.memo(f"null/{name}",  # type: ignore[no-any-return]
                         lambda: self._null_table(name, base))

    def _null_table(self, name: str, base: dict[str, Array]) -> dict[str, Array]:
        where = f"{self.root}/{name}"
        found = self._layers_of(name)
        if found is None:
            return controls_in_place(base, where)
        layers = controls_in_layers(base, *found, self.models, where)
        return controls_in_place(base, where, analysis.ranks_from_layers(
            base, layers, self.models, self.quantile))

    def _layers_of(self, name: str) -> tuple[dict[str, Array], dict[str, Array]] | None:
        """(a localised table's layer scores, its controls'), or None where the evidence
        lacks either."""
        return self.memo(f"layers-of/{name}",  # type: ignore[no-any-return]
                         lambda: self._read_layers(name))

    def _read_layers(self, name: str) -> tuple[dict[str, Array], dict[str, Array]] | None:
        described = self.record["tables"][name]
        if not described.get("localisation") or not (self.root / CONTROL_LAYERS).is_file():
            return None
        if described["condition"] == self.record["primary_condition"]:
            layers = self._checked_npz("layers")
        elif (self.root / GRID_LAYERS).is_file():
            layers = _prefixed(self.memo("grid-layers", lambda: load_npz(
                self.root / GRID_LAYERS)), name)
        else:
            return None
        controls = _prefixed(self.memo("control-layers", lambda: load_npz(
            self.root / CONTROL_LAYERS)), name)
        return (layers, controls) if layers and controls else None

    @property
    def ranked(self) -> bool:
        """Whether every localised table has null ranks."""
        return all(self._layers_of(name) is not None
                   for name, d in self.record["tables"].items() if d.get("localisation"))

    @cached_property
    def layers(self) -> dict[str, Array]:
        name = table_name("cand", self.record["primary_condition"])
        found = self._layers_of(name)
        if found is None:
            raise KitError(NO_RANKS)
        return controls_in_layers(Evidence._tables(self, name), *found, self.models,
                                  f"{self.root}/{name}")


def _prefixed(arrays: dict[str, Array], table: str) -> dict[str, Array]:
    """The arrays of one table in a file keyed ``<table>/<model>/...``."""
    return {key[len(table) + 1:]: value for key, value in arrays.items()
            if key.startswith(f"{table}/")}
