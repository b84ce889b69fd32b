"""How long a plan will take and how many accelerator-hours it will use, from earlier builds.

A step's estimate comes from the durations recorded in the provenance of earlier successful
builds of the same name, the nearest configs first (fewest hashed fields that differ, not
counting inputs). A config says how its work scales by naming fields whose product is that
work (:attr:`~marin.execution.core.traits.StepTraits.scale_fields` of its step function; a
training step names steps, batch size and sequence length, so its work is tokens): with builds at two or more scales the estimate is a fitted
``start-up + per-unit × work``, with one it is that build's duration scaled by the ratio of the
work. A step never built before has no estimate; nothing is guessed.

The plan's total is the sum of the steps' estimates; its wall time is the greedy schedule the
runner would follow with ``max_parallel`` slots; its critical path is the longest chain of
dependent steps; accelerator-hours are added up per type from each step's ``ResourceConfig``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from marin.execution.core.encoding import flatten_config, holds_dependency
from marin.execution.core.traits import traits_of
from marin.execution.plan.model import Action, Plan, PlannedStep
from marin.execution.plan.resources import resources_of, schedule_resources
from marin.execution.store.provenance_record import Provenance
from rigging.durations import format_duration, parse_duration

__all__ = [
    "OverBudget",
    "PlanEstimate",
    "StepEstimate",
    "estimate_plan",
    "estimate_step",
    "over_budget",
    "format_duration",
    "parse_duration",
    "schedule",
    "work_of",
]

@dataclass(frozen=True)
class StepEstimate:
    """The estimate of one step that would run."""

    name: str
    seconds: float | None
    """Predicted wall time (None: no estimate)."""
    basis: str
    """Where the number comes from, in words ("2 earlier builds, fitted over num_train_steps")."""
    resource: str | None = None
    """The accelerator type it holds (``TPU v4-32``, ``GPU H100``), None for CPU only."""
    accelerator_hours: float | None = None
    """Slice-hours (TPU) or device-hours (GPU) it would use; None without an estimate or accelerator."""
    bytes: int | None = None
    """What its output would take: the mean size of the nearest earlier builds (None: none known)."""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "seconds": self.seconds, "basis": self.basis, "resource": self.resource,
                "accelerator_hours": self.accelerator_hours, "bytes": self.bytes}


@dataclass(frozen=True)
class PlanEstimate:
    """The estimate of a whole plan: per step (by plan position), total, wall time, critical path."""

    steps: dict[int, StepEstimate]
    total_s: float
    """Sum of the known estimates."""
    wall_s: float
    """The runner's schedule with ``max_parallel`` slots (steps without an estimate count as 0)."""
    max_parallel: int
    critical_path: list[int]
    """Plan positions of the longest chain of dependent steps, first to last."""
    critical_path_s: float
    accelerator_hours: dict[str, float] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    resources: dict[int, Any] = field(default_factory=dict, compare=False, repr=False)
    """What each step asks (an iris ``ResourceConfig``, by position): how the schedule queued them."""
    accelerator: Any = field(default=None, compare=False, repr=False)
    """The host's accelerator the steps queued for (an iris ``HostAccelerator``), None for none."""

    @property
    def total_bytes(self) -> int:
        """What the steps with a size estimate would write."""
        return sum(e.bytes for e in self.steps.values() if e.bytes is not None)

    @property
    def unknown(self) -> list[int]:
        """Positions of the steps without an estimate."""
        return [pos for pos, e in self.steps.items() if e.seconds is None]

    def dominating(self, limit: int = 3, *, by_accelerator: bool = False) -> list[StepEstimate]:
        """The steps that cost the most (seconds, or accelerator-hours), largest first."""
        key = (lambda e: e.accelerator_hours or 0.0) if by_accelerator else (lambda e: e.seconds or 0.0)
        ranked = sorted((e for e in self.steps.values() if key(e) > 0), key=key, reverse=True)
        return ranked[:limit]

    def to_json(self) -> dict[str, Any]:
        return {
            "steps": [{"position": pos, **e.to_json()} for pos, e in sorted(self.steps.items())],
            "total_s": self.total_s,
            "wall_s": self.wall_s,
            "max_parallel": self.max_parallel,
            "critical_path": [self.names[pos] for pos in self.critical_path],
            "critical_path_s": self.critical_path_s,
            "accelerator_hours": dict(self.accelerator_hours),
            "bytes": self.total_bytes,
            "no_estimate": [self.names[pos] for pos in self.unknown],
        }


# -- work and scale ---------------------------------------------------------------------------

def _decode_number(encoded: str | None) -> float | None:
    """The number a flattened config value holds (``["int", "100"]``, ``["float", hex]``), or None."""
    if encoded is None:
        return None
    try:
        value = json.loads(encoded)
    except ValueError:
        return None
    if isinstance(value, list) and len(value) == 2:
        tag, payload = value
        try:
            if tag == "int":
                return float(int(payload))
            if tag == "float" and payload != "nan":
                return float.fromhex(payload)
        except (TypeError, ValueError):
            return None
    return None


def work_of(flat: Mapping[str, str], fields: Sequence[str]) -> float | None:
    """The product of the ``fields`` of a flattened config (None if one is missing or not a number)."""
    if not fields:
        return None
    work = 1.0
    for name in fields:
        value = _decode_number(flat.get(name))
        if value is None or value <= 0:
            return None
        work *= value
    return work


def _distance(old: Mapping[str, str], new: Mapping[str, str], ignore: set[str], inputs: set[str]) -> int:
    """How many hashed fields differ, not counting the scale fields or inputs (``inputs``: the
    keys whose new value points at another step's output, and whose old value did too)."""
    count = 0
    for key in set(old) | set(new):
        if key in ignore:
            continue
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        if key in inputs and a is not None and holds_dependency(a):
            continue
        count += 1
    return count


def _fit(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """Least-squares ``seconds = start + per_unit * work`` over (work, seconds); None if degenerate."""
    n = len(points)
    mean_w = sum(w for w, _ in points) / n
    mean_t = sum(t for _, t in points) / n
    var = sum((w - mean_w) ** 2 for w, _ in points)
    if var == 0:
        return None
    slope = sum((w - mean_w) * (t - mean_t) for w, t in points) / var
    if slope <= 0:
        return None  # noise, not a scale: fall back to the ratio
    start = mean_t - slope * mean_w
    if start < 0:
        # A negative start-up cost is an artefact of noise: go through the origin instead.
        slope = sum(w * t for w, t in points) / sum(w * w for w, _ in points)
        start = 0.0
    return start, slope


def _resource_of(resources: Any) -> tuple[str | None, float]:
    """(accelerator type, units held per second of wall time): slices for TPU, devices for GPU."""
    # iris's request types: only when estimating.
    from iris.cluster import GpuConfig, TpuConfig

    match resources.accelerator:
        case TpuConfig(type=tpu_type):
            return f"TPU {tpu_type}", 1.0
        case GpuConfig(type=gpu_type, count=count):
            return f"GPU {gpu_type}", float(count * resources.num_hosts)
    return None, 0.0


def estimate_step(planned: PlannedStep, earlier: Sequence[tuple[str, Provenance]],
                  hashes: Mapping[int, str], accelerator: Any = None) -> StepEstimate:
    """The estimate of one step from ``earlier`` builds of its name: (output path, provenance) pairs.

    ``accelerator``: the host's (an iris ``HostAccelerator``), which a step that computes on the
    accelerator and says nothing of its resources asks for (:func:`~marin.execution.plan.resources.resources_of`).
    """
    step = planned.step
    resource, units = _resource_of(resources_of(step, accelerator))
    fields = traits_of(step.fn).scale_fields
    inputs: set[str] = set()
    new_flat = flatten_config(step.config, hashes, dependency_keys=inputs)
    new_work = work_of(new_flat, fields)
    rows: list[tuple[int, float | None, float]] = []  # (distance, work, seconds)
    sizes: list[tuple[int, int]] = []  # (distance, output bytes)
    for _path, prov in earlier:
        duration, old_flat = prov.duration_s, prov.config_flat
        if old_flat is None:
            continue
        old_flat = {k: v for k, v in old_flat.items() if isinstance(v, str)}
        distance = _distance(old_flat, new_flat, set(fields), inputs)
        if prov.output_bytes is not None:
            sizes.append((distance, prov.output_bytes))
        if duration is not None and duration >= 0:
            rows.append((distance, work_of(old_flat, fields), float(duration)))
    size = _nearest_size(sizes)
    if not rows:
        return StepEstimate(step.name, None, "no estimate: never built before", resource, bytes=size)
    nearest = min(d for d, _, _ in rows)
    near = [(w, t) for d, w, t in rows if d == nearest]
    differ = "same config" if nearest == 0 else f"nearest config, {nearest} field(s) differ"
    scaled = [(w, t) for w, t in near if w is not None]
    seconds: float
    if new_work is not None and len({w for w, _ in scaled}) >= 2:
        fit = _fit(scaled)
        if fit is not None:
            seconds = fit[0] + fit[1] * new_work
            basis = f"{len(near)} earlier build(s), {differ}, fitted over {' x '.join(fields)}"
        else:
            seconds = sum(t * new_work / w for w, t in scaled) / len(scaled)
            basis = f"{len(near)} earlier build(s), {differ}, scaled by {' x '.join(fields)}"
    elif new_work is not None and scaled:
        seconds = sum(t * new_work / w for w, t in scaled) / len(scaled)
        basis = f"{len(near)} earlier build(s), {differ}, scaled by {' x '.join(fields)}"
    else:
        seconds = sum(t for _, t in near) / len(near)
        basis = f"{len(near)} earlier build(s), {differ}"
    hours = seconds / 3600.0 * units if resource is not None else None
    return StepEstimate(step.name, seconds, basis, resource, hours, size)


def _nearest_size(sizes: Sequence[tuple[int, int]]) -> int | None:
    """The mean output size of the nearest earlier builds: (config distance, bytes) each. Not scaled
    by the work: a model's size does not grow with the steps it trains."""
    if not sizes:
        return None
    nearest = min(d for d, _ in sizes)
    near = [b for d, b in sizes if d == nearest]
    return round(sum(near) / len(near))


# -- the schedule ------------------------------------------------------------------------------

def schedule(durations: Mapping[int, float], deps: Mapping[int, Sequence[int]], max_parallel: int,
             *, running: Mapping[int, float] | None = None, resources: Mapping[int, Any] | None = None,
             capacity: Any = None, accelerator: Any = None) -> float:
    """Wall time of the runner's schedule: at most ``max_parallel`` steps at once, each started (in
    position order) as soon as its inputs are done and, given a ``capacity``, this machine has room
    for it: iris's simulation of admission (:func:`iris.simulate.simulate`).

    Args:
        durations: seconds of each step still to run, by position (others count as done).
        deps: the inputs of each step, by position.
        max_parallel: slots.
        running: steps already running and the seconds they have left (they hold slots at 0).
        resources: each step's iris ``ResourceConfig`` (default: one CPU).
        capacity: what one host offers (an iris ``MachineCapacity``); None: room for everything
            but ``accelerator``.
        accelerator: the host's accelerator (an iris ``HostAccelerator``), shared in slots by the
            steps that ask for it: they queue for it as the runner queues them.
    """
    # iris's package imports fray's clients and with them Ray (~0.8 s): only when estimating.
    from iris.admission import Demand, MachineCapacity
    from iris.cluster import ResourceConfig
    from iris.simulate import Priority, SimCluster, SimStep, simulate

    running = dict(running or {})
    known = set(durations) | set(running)
    asked = {pos: (resources or {}).get(pos) or ResourceConfig() for pos in known}
    steps = [SimStep(str(pos), asked[pos], durations.get(pos, 0.0),
                     tuple(str(d) for d in deps.get(pos, ()) if d in known)) for pos in sorted(known)]
    hosts = max((r.num_hosts for r in asked.values()), default=1)
    if capacity is None:
        # Room for every step at once: only the slots and the inputs order them.
        total = Demand(cpus=1.0)
        for r in asked.values():
            total = total + Demand.per_host(r)
        capacity = MachineCapacity(cpus=total.cpus, memory=total.memory, gpus=total.gpus, tpu_chips=total.tpu_chips,
                                   accelerator=accelerator)
    result = simulate(steps, SimCluster(hosts, capacity), max_parallel=max_parallel, priority=Priority.GIVEN_ORDER,
                      running={str(pos): left for pos, left in running.items()})
    return result.makespan


def _critical_path(durations: Mapping[int, float], deps: Mapping[int, Sequence[int]]) -> tuple[list[int], float]:
    """The longest chain of dependent steps by duration (positions are in dependency order)."""
    best: dict[int, tuple[float, int | None]] = {}
    for pos in sorted(durations):
        before = [(best[d][0], d) for d in deps.get(pos, ()) if d in best]
        length, prev = max(before) if before else (0.0, None)
        best[pos] = (length + durations[pos], prev)
    if not best:
        return [], 0.0
    last = max(best, key=lambda p: (best[p][0], -p))
    total = best[last][0]
    path = []
    cursor: int | None = last
    while cursor is not None:
        path.append(cursor)
        cursor = best[cursor][1]
    return path[::-1], total


def estimate_plan(plan: Plan, max_parallel: int, capacity: Any = None, accelerator: Any = None) -> PlanEstimate:
    """Estimates of every step the plan would build (cached, fetched and reused steps cost nothing
    to estimate: they are not rebuilt), its total, wall time, critical path and accelerator-hours.

    ``capacity``: what this machine offers the steps (an iris ``MachineCapacity``), when they run
    here: the wall time then accounts for steps that cannot run side by side. ``accelerator``:
    this host's (an iris ``HostAccelerator``), when steps run here: the steps that compute on it
    ask for it by default and queue for it (the wall time counts them one slot at a time)."""
    hashes = plan.hashes()
    steps: dict[int, StepEstimate] = {}
    for pos, p in enumerate(plan.steps):
        if p.action is Action.RUN:
            steps[pos] = estimate_step(p, plan.earlier_builds(p.name), hashes, accelerator)
    durations = {pos: e.seconds or 0.0 for pos, e in steps.items()}
    deps = {pos: plan.steps[pos].deps for pos in steps}
    asked = schedule_resources({pos: plan.steps[pos].step for pos in steps}, accelerator)
    path, path_s = _critical_path(durations, deps)
    hours: dict[str, float] = {}
    for e in steps.values():
        if e.resource is not None and e.accelerator_hours is not None:
            hours[e.resource] = hours.get(e.resource, 0.0) + e.accelerator_hours
    return PlanEstimate(
        steps=steps,
        total_s=sum(durations.values()),
        wall_s=schedule(durations, deps, max_parallel, capacity=capacity, resources=asked, accelerator=accelerator),
        max_parallel=max_parallel,
        critical_path=path,
        critical_path_s=path_s,
        accelerator_hours=hours,
        names={pos: plan.steps[pos].name for pos in steps},
        resources=asked,
        accelerator=accelerator,
    )



# -- budgets ----------------------------------------------------------------------------------

class OverBudget(RuntimeError):
    """The plan's estimate exceeds the budget it was given; the message names the steps that dominate."""


def over_budget(estimate: PlanEstimate, *, seconds: float | None = None,
                accelerator_hours: float | None = None) -> str | None:
    """Why the plan does not fit the budget (wall time under its parallelism, or accelerator-hours
    of every type together), naming the steps that cost the most; None when it fits.

    Steps without an estimate count as nothing: a budget can refuse a plan, never pass one on a
    guess (the plan says which steps it could not estimate).
    """
    if seconds is not None and not seconds > 0:
        raise ValueError(f"budget must be > 0 seconds, got {seconds}")
    if accelerator_hours is not None and not accelerator_hours > 0:
        raise ValueError(f"accelerator-hour budget must be > 0, got {accelerator_hours}")
    if seconds is not None and estimate.wall_s > seconds:
        top = ", ".join(f"{e.name} ({format_duration(e.seconds)})" for e in estimate.dominating())
        return (f"the plan's estimate, {format_duration(estimate.wall_s)} with -j {estimate.max_parallel}, "
                f"exceeds the budget of {format_duration(seconds)}; most of it: {top}")
    used = sum(estimate.accelerator_hours.values())
    if accelerator_hours is not None and used > accelerator_hours:
        kinds = ", ".join(f"{kind} {hours:.2f} h" for kind, hours in sorted(estimate.accelerator_hours.items()))
        top = ", ".join(f"{e.name} ({e.accelerator_hours:.2f} h {e.resource})"
                        for e in estimate.dominating(by_accelerator=True))
        return (f"the plan would use {used:.2f} accelerator-hours ({kinds}), over the budget of "
                f"{accelerator_hours:g}; most of it: {top}")
    return None
