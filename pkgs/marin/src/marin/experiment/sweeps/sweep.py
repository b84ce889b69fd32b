"""``sweep()``: a hyperparameter search as steps whose outputs decide the next steps; ``best()``.

::

    sw = sweep("sweeps/nano-lr", base=dict(version="v1", model=llama_nano, optimizer=AdamConfig(...),
                                            datasets={data: 1.0}, batch_size=8, seq_len=128,
                                            num_train_steps=60, evals={"held-out": held_out}),
               space={"optimizer.learning_rate": ("log_uniform", 1e-3, 3e-2),
                      "optimizer.warmup": ("int", 0, 20)},
               method="tpe", trials=8, parallel=2, objective="held-out.bpb")
    winner = best(sw)                                   # <name>/best: a copy of the best trial
    steps = [evaluate("evals/nano-lr-best", winner, {...})]

Trial ``k`` is the training step ``<name>/trial-<k>``; ``marin compare`` on the sweep shows every
trial with the fields it varies. Rerunning a finished sweep trains nothing; a sweep killed mid-way
is finished by a rerun that repeats no finished trial and proposes what an uninterrupted run would
(same seed and results, same proposals). See :mod:`marin.experiment.sweeps.steps` for the steps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from marin.execution.core.errors import InvalidStep
from marin.execution.core.identity import keep_identities
from marin.execution.core.lazy import StepHandle
from marin.execution.core.placeholders import output_path_of
from marin.execution.core.step import validate_step_name
from marin.experiment.results import metric_names
from marin.experiment.sweeps.propose import grid_size
from marin.experiment.sweeps.space import Direction, Method, parse_space
from marin.experiment.sweeps.steps import Best, BestConfig, RoundConfig, Sweep, SweepSpec, TrialTemplate
from marin.experiment.training.train import TrainLm, TrainLmConfig, train_lm

__all__ = ["Best", "Sweep", "best", "sweep"]

_HANDLE_FIELDS = ("name", "config", "version", "resources")


def _template(name: str, base: Any) -> TrialTemplate:
    """The trials' template: ``train_lm``'s keywords (checked now, as ``train_lm`` checks them), or
    a handle of any one-step kind whose config the sweep varies (a cheap stand-in in tests)."""
    if isinstance(base, Mapping):
        if "name" in base:
            raise ValueError("base holds train_lm's keywords but name (trials are named <name>/trial-<k>)")
        try:
            handle = train_lm(name=f"{name}/trial", **base)
        except TypeError as e:
            raise ValueError(f"base: {e}") from None
    elif isinstance(base, StepHandle) and getattr(type(base), "step_fn", None) is not None:
        handle = base
    else:
        raise ValueError(f"base must be train_lm's keywords or a step handle, got {type(base).__name__}")
    extra = tuple((f.name, getattr(handle, f.name)) for f in dataclasses.fields(handle) if f.name not in _HANDLE_FIELDS)
    return TrialTemplate(handle=type(handle), config=handle.config, version=handle.version, extra=extra,
                         resources=handle.resources)


def _check_objective(objective: str, template: TrialTemplate) -> None:
    if template.handle is not TrainLm:
        return  # another kind of trial names its own metrics
    labels = [data.label for data in dict(template.extra).get("evals", ())]
    known = metric_names(labels)
    if objective not in known:
        raise ValueError(f"objective {objective!r} is not a metric of the trials; metrics: {', '.join(known)}")


def sweep(name: str, base: Mapping[str, Any] | StepHandle, space: Mapping[str, Any], method: str | Method = "grid",
          trials: int | None = None, seed: int = 0, objective: str = "val_loss",
          direction: str | Direction = "minimize", parallel: int = 1, *, startup_trials: int | None = None) -> Sweep:
    """A sweep over ``space``: training runs of ``base`` with the swept fields set, ``objective`` compared.

    Args:
        name: the sweep's name; its steps are ``<name>/round-<r>``, ``<name>/trial-<k>`` and
            ``<name>/results`` (and ``<name>/best`` with :func:`best`).
        base: ``train_lm``'s keywords but ``name`` (``version``, ``model``, ``optimizer``,
            ``datasets``, ``batch_size``, ``seq_len``, ``num_train_steps``, ``evals``, ...). A step
            handle instead makes each trial a handle of its kind with its config varied.
        space: config field, named as ``marin compare`` names it (``optimizer.learning_rate``,
            ``trainer.num_train_steps``, ``model.hidden_dim``), to a list of values (a grid; a
            choice otherwise), ``("uniform" | "log_uniform", low, high)``, ``("int", low, high)``
            or ``("choice", [values])``.
        method: ``"grid"`` (every combination of the lists), ``"random"`` (``trials`` draws) or
            ``"tpe"`` (Optuna's TPE, ``parallel`` trials a round, each round reading the finished
            trials' objectives). Grid and random trials are all proposed at once.
        trials: how many trials (a grid: its size, which it must equal when given).
        seed: seeds the proposals.
        objective: the metric compared, as ``marin compare`` names it: ``val_loss``, ``loss``,
            ``<eval set>.loss``, ``<eval set>.bpb`` (eval sets from ``base``'s ``evals``).
        direction: ``"minimize"`` or ``"maximize"`` it.
        parallel: trials a TPE round proposes at once (``constant_liar`` keeps them apart).
        startup_trials: TPE proposes at random until this many trials finished (default: half
            the trials, at least one round's, at most 10).

    Raises:
        InvalidStep: one line naming the sweep and what is wrong (a space field, the method ...).
    """
    try:
        validate_step_name(f"{name}/round-0")
        method = Method(method) if not isinstance(method, Method) else method
        direction = Direction(direction) if not isinstance(direction, Direction) else direction
        template = _template(name, base)
        dims = parse_space(space, method, template.config)
        if method is Method.GRID:
            size = grid_size(dims)
            if trials is not None and trials != size:
                raise ValueError(f"a grid over this space has {size} trials, got trials={trials!r}")
            trials = size
        elif trials is None:
            raise ValueError(f"method {method.value!r} needs trials=N")
        _check_objective(objective, template)
        spec = SweepSpec(name=name, space=dims, method=method, trials=trials, seed=seed, objective=objective,
                         direction=direction, parallel=parallel, startup_trials=startup_trials or 0)
        if startup_trials is None:
            spec = dataclasses.replace(spec, startup_trials=min(10, max(parallel, trials // 2)))
    except ValueError as e:
        raise InvalidStep(f"sweep {name!r}: {e}") from None
    return Sweep(name=spec.round_name(0), config=RoundConfig(spec=spec, template=template))


def best(swept: Sweep) -> Best:
    """The best trial of ``swept``: a step (``<name>/best``) that waits for the whole sweep, picks
    the trial with the lowest (``direction="maximize"``: highest) objective (ties: the lowest trial
    index), writes ``best.json`` (trial, params, objective) and a copy of the trial's output files
    (hard links where local). ``checkpoint(best(sw))`` fine-tunes from it; ``evaluate(name,
    best(sw), ...)`` evaluates it.
    """
    if not isinstance(swept, Sweep):
        raise InvalidStep(f"best() takes a sweep(...), got {type(swept).__name__}")
    spec, template = swept.spec, swept.config.template
    trained_as = template.config if isinstance(template.config, TrainLmConfig) else None
    return Best(name=f"{spec.name}/best", config=BestConfig(spec=spec, head=output_path_of(swept)),
                trained_as=trained_as)


# Moved from sweep.py: what it defines keeps that name in every hash (and for workers and pickle).
keep_identities(globals(), "marin.experiment.sweep")
