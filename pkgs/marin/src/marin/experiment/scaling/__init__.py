"""``isoflop()``: an IsoFLOP ladder (training runs of every budget and size, their evals) and the
step that fits its scaling laws (:mod:`marin.experiment.scaling.fit`).

::

    ladder = isoflop("scaling/nano", budgets=[1e11, 3e11, 1e12], sizes=[tiny, small, medium],
                     data=tinystories, eval={"held-out": held_out}, batch_size=8, seq_len=128,
                     optimizer=AdamConfig(learning_rate=3e-3, warmup=10))
    steps = [ladder]        # the runs, their evals, then the fit: isoflop_fit.json and isoflop_fit.png

Each run of budget C and model of N parameters trains on D = C / (6N) tokens, that is
round(D / (batch_size * seq_len)) steps; a size whose run would be shorter than ``min_steps`` is
left out of that budget (and said so). N is ``num_params()`` of the config as given: set its
``vocab_size`` to the tokenizer's. The fit uses the parameters each run recorded.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from levanter.models.llama import LlamaConfig
from marin.execution.core.errors import InvalidStep
from marin.execution.core.lazy import StepHandle
from marin.execution.core.placeholders import output_path_of
from marin.execution.core.step import validate_step_name
from marin.experiment.results import metric_names, run_metrics
from marin.experiment.training.train import TrainLm, train_lm
from rigging import filesystem as fs

__all__ = ["FIT_FILE", "PLOT_FILE", "FitConfig", "IsoflopFitStep", "LadderRun", "isoflop", "isoflop_fit_step"]

logger = logging.getLogger(__name__)

FIT_FILE = "isoflop_fit.json"
PLOT_FILE = "isoflop_fit.png"
FIT_FORMAT = "marin.isoflop/v1"


@dataclass(frozen=True)
class LadderRun:
    """One run of the ladder as the fit reads it."""

    budget: float
    """Its compute budget (FLOPs)."""
    params: int
    """Its model's parameters as configured (the run's recorded count is preferred)."""
    tokens: int
    """Tokens it trains on: steps * batch_size * seq_len."""
    outputs: tuple[Any, ...]
    """The training step's output and its eval steps' (placeholders)."""


@dataclass(frozen=True)
class FitConfig:
    """What the fit step fits."""

    runs: tuple[LadderRun, ...]
    """Every run of the ladder."""
    objective: str
    """The loss fitted, as ``marin compare`` names it (``val_loss``, ``<eval set>.loss``)."""
    skipped: tuple[str, ...] = ()
    """The (budget, size) pairs left out, and why (shown in the fit)."""
    title: str = "IsoFLOP ladder"
    """The plot's title."""


def isoflop_fit_step(config: FitConfig, output_path: str) -> None:
    """Step function: fit the ladder's losses; write ``isoflop_fit.json`` and ``isoflop_fit.png``."""
    from marin.experiment.scaling.fit import Run, fit_isoflop, plot_isoflop

    runs = []
    for run in config.runs:
        outputs = [str(o) for o in run.outputs]
        metrics = run_metrics(outputs[0], outputs[1:])
        loss = metrics.get(config.objective)
        if loss is None:
            raise ValueError(f"run {outputs[0]} recorded no {config.objective}")
        runs.append(Run(budget=run.budget, params=metrics.get("params") or run.params, tokens=run.tokens, loss=loss))
    fit = fit_isoflop(runs)
    document = {"format": FIT_FORMAT, "objective": config.objective, "skipped": list(config.skipped), **fit.to_json()}
    fs.atomic_write(fs.join(output_path, FIT_FILE), json.dumps(document, indent=2))
    with tempfile.TemporaryDirectory(prefix="marin-isoflop-") as scratch:  # matplotlib writes local files
        plot_isoflop(fit, os.path.join(scratch, PLOT_FILE), config.title, config.objective)
        with open(os.path.join(scratch, PLOT_FILE), "rb") as f:
            fs.atomic_write(fs.join(output_path, PLOT_FILE), f.read())
    for budget in fit.budgets:
        where = f"N* = {budget.optimum_params:.4g}" if budget.optimum_params else "no minimum"
        print(f"C = {budget.budget:.3g}: {len(budget.runs)} runs, {where}" + ("" if budget.inside else " (outside)"))
    if fit.params_law is not None:
        law = fit.params_law
        interval = f", 95% [{law.ci95[0]:.3f}, {law.ci95[1]:.3f}]" if law.ci95 else ""
        print(f"N*(C) ∝ C^{law.exponent:.3f}" + (f" ± {law.stderr:.3f}" if law.stderr else "") + interval)


@dataclass(frozen=True, eq=False)
class IsoflopFitStep(StepHandle, fn=isoflop_fit_step):
    """Handle to a ladder's fit step; its runs (``train_lm`` handles) are ``runs``."""

    runs: tuple[TrainLm, ...] = ()
    """The ladder's training runs, by budget then size."""


def _tag(value: float) -> str:
    """A short name for a count: 3e11, 1.5e12, 120k, 2.4M."""
    if value >= 1e9:
        return f"{value:.2g}".replace("+", "")
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.0f}"


def _sizes(sizes: Sequence[LlamaConfig] | Callable[[float], Sequence[LlamaConfig]], budget: float) -> list[LlamaConfig]:
    found = list(sizes(budget) if callable(sizes) else sizes)
    if not found or not all(isinstance(s, LlamaConfig) for s in found):
        raise ValueError(f"sizes must be LlamaConfigs (or a function of the budget returning them), got {found!r}")
    counts = [s.num_params() for s in found]
    if len(set(counts)) != len(counts):
        raise ValueError(f"sizes must differ in parameters, got {counts}")
    return found


def isoflop(name: str, budgets: Sequence[float], sizes: Sequence[LlamaConfig] | Callable[[float], Sequence[LlamaConfig]],
            data: Any, eval: Any = None, *, optimizer: Any, batch_size: int, seq_len: int, min_steps: int = 10,
            objective: str | None = None, version: str = "v1", **settings: Any) -> IsoflopFitStep:
    """An IsoFLOP ladder and its fit.

    ``optimizer``, ``batch_size``, ``seq_len``, ``version`` and ``**settings`` are as for ``train_lm``,
    the same for every run.

    Args:
        name: names the runs (``<name>/<budget>-<params>``) and the fit (``<name>/fit``).
        budgets: compute budgets in FLOPs (6 * parameters * tokens).
        sizes: the model configs tried at every budget, or a model family function: budget → configs.
        data: a tokenized handle, or ``{handle: weight}`` as ``train_lm``'s ``datasets``.
        eval: what each run's eval step scores (``train_lm``'s ``evals``); None: no eval steps.
        min_steps: sizes whose run would train fewer steps than this are left out of a budget.
        objective: the loss fitted (default: the first eval set's ``.loss``, else ``val_loss``).

    Raises:
        InvalidStep: one line naming the ladder and what is wrong.
    """
    try:
        validate_step_name(f"{name}/fit")
        if not budgets or not all(isinstance(b, int | float) and not isinstance(b, bool) and b > 0 for b in budgets):
            raise ValueError(f"budgets must be positive numbers of FLOPs, got {budgets!r}")
        if isinstance(min_steps, bool) or not isinstance(min_steps, int) or min_steps < 1:
            raise ValueError(f"min_steps must be an int >= 1, got {min_steps!r}")
        datasets = data if isinstance(data, Mapping) else {data: 1.0}
        runs: list[TrainLm] = []
        ladder: list[LadderRun] = []
        skipped: list[str] = []
        for budget in sorted(float(b) for b in budgets):
            for model in _sizes(sizes, budget):
                params = model.num_params()
                steps = round(budget / (6 * params) / (batch_size * seq_len))
                if steps < min_steps:
                    skipped.append(f"C={budget:.3g} N={params}: {steps} steps < min_steps={min_steps}")
                    continue
                run = train_lm(name=f"{name}/{_tag(budget)}-{_tag(params)}", version=version, model=model,
                               optimizer=optimizer, datasets=datasets, batch_size=batch_size, seq_len=seq_len,
                               num_train_steps=steps, evals=eval, **settings)
                runs.append(run)
                outputs = (output_path_of(run), *(output_path_of(c) for c in run.companions()))
                ladder.append(LadderRun(budget, params, steps * batch_size * seq_len, outputs))
        if not ladder:
            raise ValueError(f"every run is shorter than min_steps={min_steps}: raise the budgets")
        labels = [d.label for d in runs[0].evals]
        objective = objective or (f"{labels[0]}.loss" if labels else "val_loss")
        if objective not in metric_names(labels):
            raise ValueError(f"objective {objective!r} is not a metric of the runs; metrics: "
                             f"{', '.join(metric_names(labels))}")
    except ValueError as e:
        raise InvalidStep(f"isoflop {name!r}: {e}") from None
    for line in skipped:
        logger.warning("isoflop %s: left out %s", name, line)
    config = FitConfig(runs=tuple(ladder), objective=objective, skipped=tuple(skipped), title=name)
    return IsoflopFitStep(name=f"{name}/fit", config=config, version=version, runs=tuple(runs))
