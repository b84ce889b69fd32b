"""Benchmark tasks during training: a training-loop hook that runs the harness on the current
parameters and returns the scores to log (``<task>.<metric>``), as Marin's trainer does."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from levanter.eval_harness.config import HarnessConfig, TaskRunConfig
from levanter.eval_harness.run import evaluate_model
from levanter.eval_harness.scores import flat_metrics
from levanter.training.hooks import Hook, StepInfo

__all__ = ["task_eval_hook"]


def task_eval_hook(model_config: Any, tokenizer_json: str, tasks: Sequence[str], *, harness: HarnessConfig,
                   num_fewshot: int | None = None, limit: int | float | None = None, mesh: Any = None) -> Hook:
    """A hook scoring the trainer's parameters on ``tasks`` (lm-eval names or task YAML paths).

    Args:
        model_config: the model being trained.
        tokenizer_json: the text of its data's ``tokenizer.json``.
        harness: the batch shape and context of the harness's rows.
        num_fewshot: few-shot examples per prompt (None: each task's default).
        limit: documents per task (a count, or a share below 1.0; None: all).
        mesh: the trainer's mesh (the parameters stay where they are).
    """
    run = TaskRunConfig(tasks=tuple(str(t) for t in tasks), num_fewshot=num_fewshot, limit=limit)

    def scores(info: StepInfo) -> dict[str, float]:
        return flat_metrics(evaluate_model(model_config, info.state.params, tokenizer_json, run, harness, mesh=mesh))

    return scores
