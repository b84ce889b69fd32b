"""The steps of a sweep: rounds that propose trials (and expand into them), the results, the best.

A sweep is a chain of *round* steps (:mod:`marin.execution.plan.expansion`). A round's output is
its proposals (``proposals.json``); its expansion is the trials it proposed (with their eval
steps) and the next round, which reads those trials' objectives; the last round expands into the
results step instead, which records every trial's objective. A grid or a random search is one
round; TPE proposes ``parallel`` trials a round. Trial ``k`` is the step ``<sweep>/trial-<k>``,
numbered in the order proposed, a content-hashed step like any other: a rerun finds it built.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from levanter.config import TrainLmConfig
from marin.execution.core.encoding import config_to_json
from marin.execution.core.identity import keep_identities
from marin.execution.core.lazy import Lazy, StepHandle
from marin.execution.core.placeholders import output_path_of
from marin.execution.core.step import Step, unhashed_field
from marin.execution.core.traits import StepTraits, step_function
from marin.execution.run.worker import current_step
from marin.execution.store.cache import copy_tree
from marin.experiment.results import run_metrics
from marin.experiment.sweeps.propose import propose
from marin.experiment.sweeps.space import Dimension, Direction, Method, with_fields
from marin.experiment.training.models import TrainedModelHandle
from rigging import filesystem as fs

__all__ = [
    "BEST_FILE",
    "PROPOSALS_FILE",
    "RESULTS_FILE",
    "SWEEP_FORMAT",
    "Best",
    "BestConfig",
    "FinishedTrial",
    "RoundConfig",
    "ResultsConfig",
    "Sweep",
    "SweepResults",
    "SweepSpec",
    "TrialTemplate",
    "best_step",
    "best_trial",
    "read_sweep_results",
    "sweep_results_step",
    "sweep_round_step",
]

PROPOSALS_FILE = "proposals.json"
RESULTS_FILE = "sweep_results.json"
BEST_FILE = "best.json"
SWEEP_FORMAT = "marin.sweep/v1"


@dataclass(frozen=True)
class SweepSpec:
    """What a sweep searches and how; part of every round's identity."""

    name: str
    """The sweep's name: its steps are ``<name>/round-<r>``, ``<name>/trial-<k>``, ``<name>/results``."""
    space: tuple[Dimension, ...]
    """The dimensions searched."""
    method: Method
    """Grid, random or TPE."""
    trials: int
    """How many trials in all."""
    seed: int
    """Seeds the proposals (each TPE round derives its own)."""
    objective: str
    """The metric compared, as ``marin compare`` names it (``val_loss``, ``<eval set>.bpb``)."""
    direction: Direction
    """Minimise or maximise it."""
    parallel: int
    """Trials a TPE round proposes at once (grid and random propose all at once)."""
    startup_trials: int
    """TPE proposes at random until this many trials have finished."""

    def __post_init__(self) -> None:
        for name in ("trials", "parallel"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be an int >= 0, got {self.seed!r}")
        if isinstance(self.startup_trials, bool) or not isinstance(self.startup_trials, int) or self.startup_trials < 0:
            raise ValueError(f"startup_trials must be an int >= 0, got {self.startup_trials!r}")
        if not isinstance(self.objective, str) or not self.objective:
            raise ValueError(f"objective must name a metric, got {self.objective!r}")

    @property
    def per_round(self) -> int:
        """Trials a round proposes (all of them, except in TPE)."""
        return self.parallel if self.method is Method.TPE else self.trials

    @property
    def rounds(self) -> int:
        return math.ceil(self.trials / self.per_round)

    def trial_name(self, index: int) -> str:
        return f"{self.name}/trial-{index}"

    def round_name(self, index: int) -> str:
        return f"{self.name}/round-{index}"

    @property
    def results_name(self) -> str:
        return f"{self.name}/results"

    def params(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """The field values of a trial's raw values."""
        return {dim.field: dim.value(raw[dim.field]) for dim in self.space}


@dataclass(frozen=True)
class TrialTemplate:
    """How a trial is made: a handle of ``handle`` over ``config`` with the trial's fields set."""

    handle: type
    """The trials' handle class (a ``StepHandle`` such as ``TrainLm``)."""
    config: Any
    """The trial config before the swept fields are set."""
    version: str = "v1"
    """The trials' version."""
    extra: tuple[tuple[str, Any], ...] = ()
    """The handle's other fields (a training run's ``evals``)."""
    resources: Any = unhashed_field(default=None)
    """Where trials run (never hashed)."""

    def trial(self, name: str, params: Mapping[str, Any]) -> Lazy:
        return self.handle(name=name, config=with_fields(self.config, params), version=self.version,
                           resources=self.resources, **dict(self.extra))


@dataclass(frozen=True)
class FinishedTrial:
    """A trial as later steps read it: its raw values, and the outputs holding its objective."""

    index: int
    """Its number, in the order proposed."""
    raw: tuple[tuple[str, Any], ...]
    """Its raw values by field (a sampler's view)."""
    outputs: tuple[Any, ...]
    """Its output and its companions' (eval steps): placeholders, folders when the reader runs."""


@dataclass(frozen=True)
class RoundConfig:
    """Round ``round`` of a sweep, after the trials of the rounds before it."""

    spec: SweepSpec
    """The sweep."""
    template: TrialTemplate
    """How its trials are made."""
    round: int = 0
    """Which round (0 is the sweep's head)."""
    earlier: tuple[FinishedTrial, ...] = ()
    """The trials of the rounds before, in index order: this round reads their objectives."""

    def __post_init__(self) -> None:
        if isinstance(self.round, bool) or not isinstance(self.round, int) or not 0 <= self.round < self.spec.rounds:
            raise ValueError(f"round must be in 0..{self.spec.rounds - 1}, got {self.round!r}")


@dataclass(frozen=True)
class ResultsConfig:
    """Every trial of a sweep, read once they are all built."""

    spec: SweepSpec
    """The sweep."""
    trials: tuple[FinishedTrial, ...]
    """All its trials, in index order."""


@dataclass(frozen=True)
class BestConfig:
    """The best trial of the sweep whose first round is ``head``."""

    spec: SweepSpec
    """The sweep."""
    head: Any
    """Its first round (a placeholder): the best step waits for all it expanded into."""


def _objective(spec: SweepSpec, trial: FinishedTrial) -> float:
    outputs = [str(o) for o in trial.outputs]
    metrics = run_metrics(outputs[0], outputs[1:])
    value = metrics.get(spec.objective)
    if value is None:
        known = ", ".join(f"{k}={v:.4g}" for k, v in metrics.items() if v is not None) or "none"
        raise ValueError(f"{spec.trial_name(trial.index)} ({outputs[0]}) recorded no {spec.objective}; "
                         f"its metrics: {known}")
    return value


def _write_json(path: str, document: Any) -> None:
    fs.atomic_write(path, json.dumps(document, indent=2, allow_nan=False))


def _expand_round(step: Step, output_path: str) -> list[Any]:
    """The trials a round proposed (read from its output), then the next round or the results."""
    config: RoundConfig = step.config
    spec = config.spec
    proposals = json.loads(fs.read_text(fs.join(output_path, PROPOSALS_FILE)))
    trials, finished = [], list(config.earlier)
    for entry in proposals["trials"]:
        raw = {dim.field: entry["raw"][dim.field] for dim in spec.space}
        trial = config.template.trial(spec.trial_name(entry["index"]), spec.params(raw))
        trials.append(trial)
        outputs = (output_path_of(trial), *(output_path_of(c) for c in trial.companions()))
        finished.append(FinishedTrial(entry["index"], tuple(raw.items()), outputs))
    if config.round + 1 < spec.rounds:
        after: Lazy = Sweep(name=spec.round_name(config.round + 1), config=dataclasses.replace(
            config, round=config.round + 1, earlier=tuple(finished)))
    else:
        after = SweepResults(name=spec.results_name, config=ResultsConfig(spec, tuple(finished)))
    return [*trials, after]


@step_function(StepTraits(expand=_expand_round))
def sweep_round_step(config: RoundConfig, output_path: str) -> None:
    """Propose this round's trials from the finished ones' objectives; write ``proposals.json``."""
    spec = config.spec
    finished = [(dict(t.raw), _objective(spec, t)) for t in config.earlier]
    first = config.round * spec.per_round
    count = min(spec.per_round, spec.trials - first)
    proposed = propose(spec.method, spec.space, round_index=config.round, count=count, seed=spec.seed,
                       finished=finished, direction=spec.direction, startup_trials=spec.startup_trials)
    document = {
        "format": SWEEP_FORMAT, "sweep": spec.name, "round": config.round, "method": spec.method.value,
        "objective": spec.objective,
        "finished": [{"index": t.index, "objective": v} for t, (_, v) in zip(config.earlier, finished, strict=True)],
        "trials": [{"index": first + i, "raw": raw, "params": config_to_json(spec.params(raw))}
                   for i, raw in enumerate(proposed)],
    }
    _write_json(fs.join(output_path, PROPOSALS_FILE), document)
    for trial in document["trials"]:
        print(f"{spec.trial_name(trial['index'])}: {trial['params']}")


def sweep_results_step(config: ResultsConfig, output_path: str) -> None:
    """Record every trial's values, objective and output folders (``sweep_results.json``)."""
    spec = config.spec
    trials = []
    for t in config.trials:
        raw = dict(t.raw)
        trials.append({"index": t.index, "name": spec.trial_name(t.index), "params": config_to_json(spec.params(raw)),
                       "raw": raw, "objective": _objective(spec, t), "output": str(t.outputs[0]),
                       "companions": [str(o) for o in t.outputs[1:]]})
    _write_json(fs.join(output_path, RESULTS_FILE), {
        "format": SWEEP_FORMAT, "sweep": spec.name, "objective": spec.objective,
        "direction": spec.direction.value, "trials": trials})


def best_trial(trials: Sequence[Mapping[str, Any]], direction: Direction) -> Mapping[str, Any]:
    """The trial with the lowest (or highest) ``objective``; ties go to the lowest ``index``.

    Raises:
        ValueError: no trial recorded an objective.
    """
    scored = [t for t in trials if isinstance(t.get("objective"), int | float) and math.isfinite(t["objective"])]
    if not scored:
        raise ValueError("no trial recorded an objective")
    sign = 1.0 if direction is Direction.MINIMIZE else -1.0
    return min(scored, key=lambda t: (sign * t["objective"], t["index"]))


def read_sweep_results(spec: SweepSpec, head: Any, reader: str) -> dict[str, Any]:
    """What the results step of the sweep whose first round is ``head`` (its folder) recorded, for the
    step ``reader`` that waited for the whole sweep (``sweep_results.json``).

    Raises:
        RuntimeError: not inside a runner (the sweep's expansion is the runner's to say).
        ValueError: the sweep expanded into no results step.
    """
    running = current_step()
    if running is None:
        raise RuntimeError(f"{reader} reads what its sweep expanded into: it runs only in a runner")
    found = dict(running.expanded(str(head)))
    if spec.results_name not in found:
        raise ValueError(f"{reader}: the sweep expanded into no {spec.results_name} step")
    return json.loads(fs.read_text(fs.join(found[spec.results_name], RESULTS_FILE)))


def best_step(config: BestConfig, output_path: str) -> None:
    """Pick the best trial of the sweep and copy its output here, with ``best.json`` saying which."""
    spec = config.spec
    results = read_sweep_results(spec, config.head, f"{spec.name}/best")
    winner = best_trial(results["trials"], spec.direction)
    files = copy_tree(winner["output"], output_path, records=False, link=True)
    _write_json(fs.join(output_path, BEST_FILE), {
        "format": SWEEP_FORMAT, "sweep": spec.name, "trial": winner["index"], "name": winner["name"],
        "params": winner["params"], "objective": winner["objective"], "objective_name": spec.objective,
        "direction": spec.direction.value, "source": winner["output"], "files": files})
    print(f"best of {len(results['trials'])} trials: {winner['name']} ({spec.objective} {winner['objective']:.6g}) "
          f"{winner['params']}")


class Sweep(StepHandle, fn=sweep_round_step):
    """Handle to a sweep: its first round, which expands into the trials (and the rounds after)."""

    @property
    def spec(self) -> SweepSpec:
        return self.config.spec


class SweepResults(StepHandle, fn=sweep_results_step):
    """Handle to a sweep's results step (``sweep_results.json``)."""


@dataclass(frozen=True, eq=False)
class Best(TrainedModelHandle, fn=best_step):
    """Handle to the best trial of a sweep, copied: fine-tune from it (``checkpoint(best(sweep))``)
    or evaluate it (``evaluate(name, best(sweep), ...)``)."""

    trained_as: Any = None
    """The trials' training config before the swept fields are set (None: trials are not training runs)."""

    def training_config(self) -> TrainLmConfig:
        if not isinstance(self.trained_as, TrainLmConfig):
            raise ValueError(f"{self.name}: the trials of its sweep are not train_lm(...) runs")
        return self.trained_as


# Moved from sweep_steps.py: what it defines keeps that name in every hash (and for workers and pickle).
keep_identities(globals(), "marin.experiment.sweep_steps")
