"""Proposing a sweep's trials: a grid, random draws, or a round of Optuna's TPE.

Pure functions of the sweep's spec, the round and the finished trials' results: the same inputs
always propose the same trials, which is what lets a sweep killed mid-way be finished by a rerun
that proposes exactly what an uninterrupted run would have.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

from marin.experiment.sweeps.space import Choice, Dimension, Direction, Method

__all__ = ["Finished", "grid_size", "propose", "round_seed"]

Finished = tuple[Mapping[str, Any], float]
"""A finished trial as a sampler sees it: its raw values by field, and its objective."""


def round_seed(seed: int, round_index: int) -> int:
    """The seed of round ``round_index`` of a sweep seeded ``seed``: distinct per round (so the
    random start-up suggestions of two rounds never repeat), the same on every machine."""
    import numpy as np  # only in a round step's process

    return int(np.random.SeedSequence([seed, round_index]).generate_state(1)[0])


def _grid(space: Sequence[Dimension]) -> list[dict[str, Any]]:
    ranges = []
    for dim in space:
        if not isinstance(dim, Choice):
            raise ValueError(f"a grid needs a list of values for {dim.field!r}")
        ranges.append(range(len(dim.values)))
    return [{dim.field: i for dim, i in zip(space, combo, strict=True)} for combo in itertools.product(*ranges)]


def grid_size(space: Sequence[Dimension]) -> int:
    """How many trials a grid over ``space`` has."""
    return math.prod(len(dim.values) for dim in space if isinstance(dim, Choice))


def _random(space: Sequence[Dimension], count: int, seed: int) -> list[dict[str, Any]]:
    import numpy as np  # only in a round step's process

    rng = np.random.default_rng(seed)
    return [{dim.field: dim.sample(rng) for dim in space} for _ in range(count)]


def _tpe(space: Sequence[Dimension], count: int, seed: int, finished: Sequence[Finished], direction: Direction,
         startup_trials: int) -> list[dict[str, Any]]:
    # Optuna (and its SQLAlchemy, alembic, ...) takes a second to import: only a TPE round loads it.
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    distributions = {dim.field: dim.distribution() for dim in space}
    # constant_liar: the trials asked in this round and not told yet count as already scored
    # (pessimistically), so one round's trials spread out instead of piling on one point.
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup_trials, constant_liar=count > 1)
    study = optuna.create_study(direction=direction.value, sampler=sampler)
    for values, objective in finished:  # in index order: the study is the same whoever rebuilds it
        study.add_trial(optuna.trial.create_trial(params=dict(values), distributions=distributions, value=objective))
    proposed = []
    for _ in range(count):
        trial = study.ask(distributions)
        proposed.append({dim.field: trial.params[dim.field] for dim in space})
    return proposed


def propose(method: Method, space: Sequence[Dimension], *, round_index: int, count: int, seed: int,
            finished: Sequence[Finished] = (), direction: Direction = Direction.MINIMIZE,
            startup_trials: int = 0) -> list[dict[str, Any]]:
    """The raw values of the trials round ``round_index`` proposes: ``count`` of them (a grid: all).

    Args:
        method: grid, random or TPE.
        space: the dimensions.
        round_index: which round (TPE seeds each round apart with :func:`round_seed`).
        count: how many trials to propose (ignored by a grid).
        seed: the sweep's seed.
        finished: the trials finished before this round, in index order (TPE only).
        direction: whether TPE minimises or maximises the objective.
        startup_trials: TPE proposes at random until this many trials have finished.
    """
    if method is Method.GRID:
        return _grid(space)
    if method is Method.RANDOM:
        return _random(space, count, round_seed(seed, round_index))
    return _tpe(space, count, round_seed(seed, round_index), finished, direction, startup_trials)
