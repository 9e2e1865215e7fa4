"""The plan reproduce-all prints before it starts, and its progress lines.

Each step's expected time here comes from the CPU seconds it took when it last ran in
full (``kit/reproduce/costs.toml``, with the machine and the source of each figure): the
CPU seconds divided by this machine's cores and by the share of its cores the step kept
busy where it was measured. A step that needs more disk than is free is refused before
anything runs.
"""

from __future__ import annotations

import os
import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path

from kit.errors import ConfigError, KitError
from kit.heartbeat import minutes
from kit.runfolder import say

COSTS = Path(__file__).with_name("costs.toml")
NUMBER = (int, float)
FIELDS: dict[str, type | tuple[type, ...]] = {
    "cpu_s": NUMBER, "wall_s": NUMBER, "cores": int, "disk_mb": NUMBER, "source": str}


@dataclass(frozen=True)
class Cost:
    """What one step took when it last ran in full, where it was measured."""

    cpu_s: float
    wall_s: float
    cores: int
    disk_mb: float
    source: str

    def expected_s(self, cores: int) -> float:
        """Its wall time on ``cores`` cores: the CPU seconds over the cores it would keep
        busy, at the share of its own cores it kept busy when measured."""
        busy = min(1.0, self.cpu_s / (self.wall_s * self.cores)) if self.wall_s else 1.0
        return self.cpu_s / (max(1, cores) * busy)


def load_costs(small: bool, path: Path = COSTS, models: dict[str, str] | None = None
               ) -> dict[str, Cost]:
    """The recorded cost of every step of the full (or the small) configuration; a step
    whose models come from ``models`` (``train`` or ``shipped``) takes the cost recorded
    for that source where there is one (``[full.sciml-shipped]``)."""
    try:
        table = tomllib.loads(path.read_text())["small" if small else "full"]
    except (tomllib.TOMLDecodeError, KeyError) as exc:
        raise ConfigError(f"{path}: not the kit's cost table ({exc})") from None
    costs = {}
    for step, entry in table.items():
        wrong = [k for k, kind in FIELDS.items() if not isinstance(entry.get(k), kind)]
        if wrong or set(entry) - set(FIELDS):
            raise ConfigError(f"{path}: [{'small' if small else 'full'}.{step}] needs exactly "
                              f"{', '.join(FIELDS)}; wrong or missing: {', '.join(wrong)}")
        costs[step] = Cost(**entry)
    for step, source in (models or {}).items():
        if f"{step}-{source}" in costs:
            costs[step] = costs[f"{step}-{source}"]
    return costs


def print_plan(steps: list[str], kept: set[str], costs: dict[str, Cost], runs: Path,
               refuse: bool = True) -> float:
    """Print the steps, what each needs on disk and how long it should take here; refuse
    (``refuse``) or warn when the steps to run need more disk than is free. Returns the
    expected seconds."""
    cores = os.cpu_count() or 1
    missing = [s for s in steps if s not in costs]
    if missing:
        raise ConfigError(f"{COSTS}: no recorded cost for {', '.join(missing)}")
    todo = [s for s in steps if s not in kept]
    total = sum(costs[s].expected_s(cores) for s in todo)
    disk = sum(costs[s].disk_mb for s in todo)
    say(f"reproduce-all: plan on {cores} cores, into {runs}: {len(steps)} steps "
        f"({len(steps) - len(todo)} already finished), about {minutes(total)}, about "
        f"{disk / 1024:.1f} GB of disk")
    for number, step in enumerate(steps, 1):
        cost = costs[step]
        state = "finished, kept" if step in kept else \
            f"about {minutes(cost.expected_s(cores))}, {cost.disk_mb:.0f} MB"
        say(f"reproduce-all:   {number}. {step}: {state} ({cost.cpu_s:.0f} CPU s recorded: "
            f"{cost.source})")
    runs.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(runs).free / 2**20
    if disk > free:
        short = (f"{runs}: {free:.0f} MB free, the plan needs about {disk:.0f} MB; free "
                 "space or give another --runs folder")
        if refuse:
            raise KitError(short)
        say(f"reproduce-all: not enough disk to run: {short}")
    return total


@dataclass
class Clock:
    """Elapsed time, and the time the unfinished steps should still take: their recorded
    costs scaled by the pace of the steps finished so far (the ratio of the time they took
    to the time they were expected to take), so a cold cache or a busy machine shows in
    the estimate after the first step instead of staying at the plan's figure."""

    expected: dict[str, float]
    started: float
    taken: float = 0.0  # wall seconds the finished steps took
    planned: float = 0.0  # what they were expected to take

    def pace(self) -> float:
        """Actual over expected time of the finished steps (1 before any finished)."""
        return self.taken / self.planned if self.planned > 0 else 1.0

    def left(self, running: str | None = None, running_s: float = 0.0) -> float:
        """Seconds the unfinished steps should still take at the pace so far; the running
        step counts what it still has of its own scaled expectation."""
        pace = self.pace()
        total = 0.0
        for step, seconds in self.expected.items():
            total += max(0.0, seconds * pace - running_s) if step == running else seconds * pace
        return total

    def line(self, now: float, running: str | None = None, running_s: float = 0.0) -> str:
        pace = self.pace()
        note = f" at {pace:.1f}x the recorded costs so far" if abs(pace - 1) >= 0.05 else ""
        return (f"elapsed {minutes(now - self.started)}, about "
                f"{minutes(self.left(running, running_s))} left{note}")

    def finish(self, step: str, wall_s: float) -> None:
        planned = self.expected.pop(step, None)
        if planned is not None:
            self.taken, self.planned = self.taken + wall_s, self.planned + planned
