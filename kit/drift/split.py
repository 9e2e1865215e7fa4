"""The class-balanced round-robin sample and its calibration / held-out roles.

Each class's images are shuffled by a generator seeded from the protocol; the sample then
takes the next image of class 0, 1, ..., C-1 in turn until it holds ``n`` images (so
every class gives n / C). Within each class, picks alternate calibration, held-out,
calibration, ... so both roles are class-balanced too. The reduced sub-split of the
sensitivity grid keeps the first ``k`` of each role in sample order. Images outside the
sample are the training pool of the ``digits`` substrate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kit.errors import KitError

Array = np.ndarray[Any, Any]
ROLES = ("calibration", "heldout")


@dataclass(frozen=True)
class Sample:
    """Source image indices in sample order, their classes and roles."""

    index: Array  # int64, into the source dataset
    label: Array  # int64
    role: Array   # str: calibration | heldout

    def of_role(self, role: str, limit: int | None = None) -> Array:
        """Sample positions of ``role`` in sample order (the first ``limit`` of them)."""
        positions = np.flatnonzero(self.role == role)
        return positions if limit is None else positions[:limit]


def round_robin_sample(labels: Array, n: int, seed: int) -> Sample:
    """The ``n``-image class-balanced round-robin sample of ``labels``."""
    classes = np.unique(labels)
    if n % (2 * len(classes)) != 0:
        raise KitError(f"sample size {n} must be a multiple of 2 x {len(classes)} classes")
    per_class = n // len(classes)
    rng = np.random.default_rng(seed)
    queues = []
    for c in classes:
        members = np.flatnonzero(labels == c)
        if len(members) < per_class:
            raise KitError(f"class {c} has {len(members)} images, the sample needs {per_class}")
        queues.append(members[rng.permutation(len(members))][:per_class])
    order = np.stack(queues, axis=1).reshape(-1)          # pick j of every class, then j+1
    pick = np.repeat(np.arange(per_class), len(classes))  # j for each sampled image
    role = np.where(pick % 2 == 0, ROLES[0], ROLES[1])
    sample = Sample(index=order.astype(np.int64), label=labels[order].astype(np.int64),
                    role=role)
    check_disjoint(sample)
    return sample


def check_disjoint(sample: Sample) -> None:
    """Every source image appears once; the roles share none."""
    if len(np.unique(sample.index)) != len(sample.index):
        raise KitError("the sample repeats a source image")
    cal = set(sample.index[sample.role == ROLES[0]].tolist())
    held = set(sample.index[sample.role == ROLES[1]].tolist())
    if cal & held:
        raise KitError(f"calibration and held-out share {len(cal & held)} images")


def training_pool(n_source: int, sample: Sample) -> Array:
    """Source indices outside the sample, ascending."""
    return np.setdiff1d(np.arange(n_source), sample.index)
