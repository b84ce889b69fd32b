"""The leaderboard of a report: each training run's quality against the compute it took, and the
Pareto frontier of those (no other run is both cheaper and better).

Quality is bits per byte on an eval set (the one scored for the most runs), or the validation loss
where no run has bits per byte; compute is model FLOPs (``marin.experiment.results``). Each entry
also carries what the run's ``speedrun.json`` says of it: wall time and hardware.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from marin.experiment.results import read_json_object
from marin.experiment.training.flops import SPEEDRUN_FILE
from marin.report.compare import Comparison
from rigging import filesystem as fs

__all__ = ["Leaderboard", "LeaderboardEntry", "leaderboard_of", "pareto_frontier"]


def pareto_frontier(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indexes of the points no other point beats on both coordinates (both lower is better), by
    increasing x. Of points equal in x the lowest y is kept; of equal points, the first."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], points[i][1], i))
    frontier: list[int] = []
    best_y = float("inf")
    for i in order:
        if points[i][1] < best_y:
            frontier.append(i)
            best_y = points[i][1]
    return frontier


@dataclass(frozen=True)
class LeaderboardEntry:
    """One run on the leaderboard."""

    label: str
    """``name-hash8`` as the comparison shows it."""
    hash: str
    model_flops: float
    score: float
    """The leaderboard's metric (lower is better)."""
    params: float | None = None
    mfu: float | None = None
    wall_s: float | None = None
    """Wall time of the run's (last) attempt, from ``speedrun.json``."""
    device: str | None = None
    """``<count> x <device kind>``, from ``speedrun.json``."""
    frontier: bool = False
    """On the Pareto frontier."""

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "hash": self.hash, "model_flops": self.model_flops, "score": self.score,
                "params": self.params, "mfu": self.mfu, "wall_s": self.wall_s, "device": self.device,
                "frontier": self.frontier}


@dataclass(frozen=True)
class Leaderboard:
    """Runs by model FLOPs, their ``metric`` and whether each is on the frontier."""

    metric: str
    entries: tuple[LeaderboardEntry, ...]

    @property
    def frontier(self) -> list[LeaderboardEntry]:
        return [e for e in self.entries if e.frontier]

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "entries": [e.to_json() for e in self.entries]}


def _metric(comparison: Comparison) -> str:
    """Bits per byte of the eval set scored (at the final parameters) for the most runs, else val_loss."""
    counts = {m: sum(1 for r in comparison.rows if r.metrics.get(m) is not None)
              for m in comparison.metrics if m.endswith(".bpb") and "@" not in m}
    best = max(counts.values(), default=0)
    return next((m for m, n in counts.items() if n == best), "val_loss") if best else "val_loss"


def _speedrun(files_folder: str) -> tuple[float | None, str | None]:
    record = read_json_object(fs.join(files_folder, SPEEDRUN_FILE)) or {}
    wall = record.get("wall_s")
    kind, count = record.get("device_kind"), record.get("device_count")
    device = f"{count} x {kind}" if kind and count else None
    return (float(wall) if isinstance(wall, int | float) else None), device


def leaderboard_of(comparison: Comparison) -> Leaderboard | None:
    """The leaderboard of the compared runs that recorded model FLOPs and the metric; None if none did."""
    metric = _metric(comparison)
    rows = [r for r in comparison.rows
            if r.metrics.get("model_flops") is not None and r.metrics.get(metric) is not None]
    if not rows:
        return None
    points = [(float(r.metrics["model_flops"]), float(r.metrics[metric])) for r in rows]  # type: ignore[arg-type]
    on_frontier = set(pareto_frontier(points))
    entries = []
    for i, row in enumerate(rows):
        wall, device = _speedrun(row.files_folder or row.output_path)
        entries.append(LeaderboardEntry(label=row.label, hash=row.hash, model_flops=points[i][0], score=points[i][1],
                                        params=row.metrics.get("params"), mfu=row.metrics.get("mfu"), wall_s=wall,
                                        device=device, frontier=i in on_frontier))
    entries.sort(key=lambda e: (e.model_flops, e.score, e.label))
    return Leaderboard(metric=metric, entries=tuple(entries))
