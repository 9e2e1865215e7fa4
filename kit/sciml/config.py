"""The SciML study's configuration: every size the pipeline takes, the full study's by
default, ``Config.tiny()`` for the tests and ``Config.null()`` for the null subjects.
``identity`` is what a resumed run folder must have been started with (the cache folder is
not part of it: it changes where models are kept, never what they are)."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

from kit.files import canonical_json
from kit.sciml import pinn
from kit.sciml.cylinder import Flow
from kit.sciml.fno import Recipe
from kit.sciml.mgn_study import HELDOUT_FLOWS
from kit.sciml.mgn_train import Subject
from kit.sciml.second_task import Airfoil


@dataclass(frozen=True)
class Config:
    """Sizes of one SciML run (defaults: the full study)."""

    refinements: range = range(1, 10)
    fv_cells: int = 256
    fno_roster: int = 15
    fno_seeds: int = 3
    fno_recipe: Recipe | None = None
    pinn_roster: int = 15
    pinn_recipe: pinn.Recipe | None = None
    mgn_roster: int = 6
    mgn_flow: Flow | None = None
    mgn_subject: Subject | None = None
    mgn_permutations: int = 5
    airfoil: Airfoil | None = None
    mgn_heldout: tuple[Flow, ...] = HELDOUT_FLOWS
    mgn_pointmlp: int = 3
    physicsnemo: Path | None = None
    physicsnemo_backend: str = "physicsnemo"
    cache: Path | None = None
    mgn_source: Path | None = None
    mgn_resimulate: bool = False
    untrained: bool = False  # the null subjects (``null``)

    @classmethod
    def tiny(cls, cache: Path, physicsnemo: Path | None = None) -> Config:
        """Seconds, not hours: one or two of everything, a few training steps, coarse
        meshes; ``physicsnemo`` (with the ``kit`` backend) serves the kit's own
        MeshGraphNet through the PhysicsNeMo worker's protocol."""
        return cls(refinements=range(1, 5), fv_cells=32, fno_roster=2, fno_seeds=1,
                   fno_recipe=Recipe("heat", 0, modes=4, hidden=4, steps=3, batch=4,
                                     train_cases=8),
                   pinn_roster=2,
                   pinn_recipe=pinn.Recipe("heat", 0, width=8, depth=1, steps=5,
                                           collocation=20),
                   mgn_roster=1, mgn_flow=Flow(nx=32, ny=16, spinup=2, frames=3, stride=1),
                   mgn_subject=Subject(0, latent=8, steps=1, train_steps=2),
                   mgn_permutations=2, airfoil=Airfoil(max_area=2e-3, segments=80),
                   mgn_heldout=(Flow(inflow=0.8, nx=32, ny=16, spinup=2, frames=2, stride=1),),
                   mgn_pointmlp=1, physicsnemo=physicsnemo,
                   physicsnemo_backend="physicsnemo" if physicsnemo is None else "kit",
                   cache=cache)

    @classmethod
    def null(cls, physicsnemo: Path | None = None, cache: Path | None = None) -> Config:
        """The null subjects: the full study with every subject untrained (no optimiser
        step: the seeded initial weights of the same architectures; the MeshGraphNets keep
        the normalisers their training frames give, which are data statistics, not
        learning), through the same probes, so every rule can be checked against a
        subject that learned nothing (``kit.claims.null``)."""
        return cls(fno_recipe=Recipe("heat", 0, steps=0),
                   pinn_recipe=pinn.Recipe("heat", 0, steps=0),
                   mgn_subject=Subject(0, train_steps=0), physicsnemo=physicsnemo,
                   cache=cache, untrained=True)

    def identity(self) -> str:
        """The sha256 of every field but ``cache`` (and of whether PhysicsNeMo runs, not
        where its interpreter is)."""
        described = {f.name: _plain(getattr(self, f.name)) for f in fields(self)
                     if f.name not in ("cache", "physicsnemo")}
        described["physicsnemo"] = self.physicsnemo is not None
        return hashlib.sha256(canonical_json(described)).hexdigest()


def _plain(value: Any) -> Any:
    if isinstance(value, range):
        return list(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    return str(value) if isinstance(value, Path) else value
