"""Benchmark tasks as eval steps: one step per (checkpoint, task), whoever asks for it.

``evaluate(name, model, tasks=[...])`` makes one :class:`TaskEval` step per task, named
``evals/<model name>/<task>`` (``evals/<model name>/step-<N>/<task>`` for a kept checkpoint) with
the model's hash, the checkpoint, the task and the harness's settings in its config: two calls
asking for the same checkpoint and task make the same step, built once, and adding a task to a
list builds only that task's step. The step runs the task through lm-eval
(:func:`levanter.eval_harness.evaluate_model`) and leaves lm-eval's ``results.json`` and
``samples_<task>.jsonl`` in its output; ``evaluate``'s own step gathers the scores.

A task is an lm-eval task (or group) name (its key holds lm-eval's version: its prompts and
metrics are lm-eval's code), the path of a task YAML file with local data (its key holds the
digest of the file and of the data files it names), or a YAML file in a step's output, e.g. a
``story_tasks(...)`` step (its key holds that step's hash).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml

from levanter.eval_harness.config import HarnessConfig, TaskRunConfig
from levanter.eval_harness.scores import RESULTS_FILE
from marin.execution.core.identity import keep_identities
from marin.execution.core.lazy import StepHandle
from marin.execution.core.placeholders import OutputPath
from marin.execution.core.step import Step
from marin.execution.core.traits import StepTraits, step_function
from marin.experiment.tasks.story import StoryTasks
from marin.experiment.tasks.word_problems import WordProblems
from marin.experiment.training.models import FINAL
from rigging.fields import added_field

__all__ = ["TaskEval", "TaskEvalConfig", "check_checkpoint", "check_task_data", "harness_eval_step", "task_evals"]

_YAML = (".yaml", ".yml")
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_.+=-]")


def check_checkpoint(checkpoint: Any) -> None:
    """Raise ValueError unless ``checkpoint`` is ``"final"`` or a step number > 0."""
    ok = checkpoint == FINAL or (isinstance(checkpoint, int) and not isinstance(checkpoint, bool) and checkpoint > 0)
    if not ok:
        raise ValueError(f"checkpoint must be 'final' or a step number > 0, got {checkpoint!r}")


@dataclass(frozen=True)
class TaskEvalConfig:
    """One benchmark task run on one checkpoint of one training step."""

    model: Any
    """The training step (a placeholder resolved to its output folder)."""
    checkpoint: int | str
    """``"final"`` (the final parameters) or the step number of a kept checkpoint."""
    task: Any
    """An lm-eval task, group or tag name, the path of a task YAML file, or a placeholder for a
    YAML file in a step's output."""
    harness: HarnessConfig = HarnessConfig()
    """How the model answers the harness's requests (batch shape, context, end token, precision)."""
    num_fewshot: int | None = None
    """Few-shot examples per prompt (None: the task's own default)."""
    limit: int | float | None = None
    """Documents scored: a count, or a share below 1.0 (None: all)."""
    bootstrap_iters: int = 1000
    """Bootstrap resamples for the standard errors of non-mean metrics (0: none)."""
    seed: int = 0
    """Seed of the harness's random number generators (few-shot sampling)."""
    task_digest: str | None = None
    """SHA-256 of a local task YAML file and the local data files it names (None otherwise)."""
    lm_eval_version: str | None = None
    """lm-eval's version, for a task it defines (None for a YAML file)."""
    ema: bool = added_field(default=False)
    """Score the run's average of its parameters (``ema=`` of its training) instead of the parameters."""

    def __post_init__(self) -> None:
        check_checkpoint(self.checkpoint)
        if not isinstance(self.harness, HarnessConfig):
            raise ValueError(f"harness must be a HarnessConfig, got {type(self.harness).__name__}")
        self.run_config("task")  # its checks name the bad setting

    def run_config(self, spec: str) -> TaskRunConfig:
        """The harness's settings for running ``spec`` (this config's task, its path resolved)."""
        return TaskRunConfig(tasks=(spec,), num_fewshot=self.num_fewshot, limit=self.limit,
                             bootstrap_iters=self.bootstrap_iters, seed=self.seed)


# lm-eval's results record dates and timings; its requests run the model.
@step_function(StepTraits(volatile_files=(RESULTS_FILE,), accelerator=True))
def harness_eval_step(config: TaskEvalConfig, output_path: str) -> None:
    """Step function: run the task on the checkpoint; write lm-eval's ``results.json`` and samples."""
    # JAX, the model and lm-eval load only where the step runs, not where it is planned.
    from levanter.eval import read_tokenizer_json
    from levanter.eval_harness.run import evaluate_model
    from levanter.generate import load_model
    from levanter.sharding import MeshConfig, make_mesh

    model_output = str(config.model)
    model_config, params = load_model(model_output, None if config.checkpoint == FINAL else int(config.checkpoint),
                                      ema=config.ema)
    scores = evaluate_model(model_config, params, read_tokenizer_json(model_output), config.run_config(str(config.task)),
                            config.harness, mesh=make_mesh(MeshConfig()), output_dir=output_path, name=model_output)
    for task, found in scores.items():
        shown = ", ".join(f"{m} {v:.4f}" + (f" ± {found.stderr[m]:.4f}" if m in found.stderr else "")
                          for m, v in found.metrics.items())
        print(f"{task} ({found.samples} documents): {shown}")


class TaskEval(StepHandle, fn=harness_eval_step):
    """Handle to the eval step of one task; its output holds lm-eval's ``results.json`` and samples."""


@dataclass(frozen=True)
class _Task:
    label: str  # the task's name in step names
    spec: Any  # what the harness is given: a name, a YAML path or a placeholder for one
    digest: str | None = None
    builtin: bool = False


def _label(text: str) -> str:
    return _NOT_IN_NAME.sub("_", text) or "task"


def _yaml_stem(path: str, what: str) -> str:
    base = os.path.basename(path.rstrip("/"))
    if not base.endswith(_YAML):
        raise ValueError(f"task {what} must name a task YAML file (*.yaml, *.yml), got {path!r}")
    return base.rsplit(".", 1)[0]


class _TolerantLoader(yaml.SafeLoader):
    """YAML that reads lm-eval's ``!function`` tags as nothing (only data file names are wanted)."""


_TolerantLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def _local_files(value: Any, base: str) -> list[str]:
    """The local files among ``data_files`` (a path, a list of them, or split -> either)."""
    if isinstance(value, str):
        path = value if os.path.isabs(value) else os.path.join(base, value)
        return [path] if "://" not in value and os.path.isfile(path) else []
    if isinstance(value, dict):
        return [f for v in value.values() for f in _local_files(v, base)]
    if isinstance(value, list | tuple):
        return [f for v in value for f in _local_files(v, base)]
    return []


def _yaml_digest(path: str) -> str:
    """SHA-256 over a task YAML file and the local data files it names (relative to its folder)."""
    with open(path, "rb") as f:
        text = f.read()
    spec = yaml.load(text, Loader=_TolerantLoader) or {}
    kwargs = spec.get("dataset_kwargs") if isinstance(spec, dict) else None
    files = _local_files((kwargs or {}).get("data_files"), os.path.dirname(path)) if isinstance(kwargs, dict) else []
    digest = hashlib.sha256(text)
    for name in sorted(set(files)):
        with open(name, "rb") as f:
            digest.update(b"\0" + os.path.relpath(name, os.path.dirname(path)).encode() + b"\0" + f.read())
    return digest.hexdigest()


_TASK_HANDLES = (StoryTasks, WordProblems)
"""Handles of steps that write harness tasks (each has ``task_files()``)."""


def _tasks_of(tasks: Any) -> list[_Task]:
    """``evaluate``'s ``tasks`` as tasks (a handle of generated tasks: each of its tasks)."""
    items = [tasks] if isinstance(tasks, (str, OutputPath, *_TASK_HANDLES)) else tasks
    if not isinstance(items, list | tuple) or not items:
        raise ValueError(f"tasks must be a non-empty list of task names, YAML files, story_tasks(...) or "
                         f"word_problems(...), got {tasks!r}")
    out: list[_Task] = []
    for item in items:
        if isinstance(item, _TASK_HANDLES):
            out += [_Task(_yaml_stem(f.sub_path, "file"), f) for f in item.task_files()]
        elif isinstance(item, OutputPath):
            out.append(_Task(_label(_yaml_stem(item.sub_path, f"file of step {item.step.name!r}")), item))
        elif isinstance(item, str) and item and (item.endswith(_YAML) or os.sep in item):
            if not os.path.isfile(item):
                raise ValueError(f"task YAML file {item!r} does not exist")
            out.append(_Task(_label(_yaml_stem(item, "file")), os.path.abspath(item), _yaml_digest(item)))
        elif isinstance(item, str) and item.strip() == item and item:
            out.append(_Task(_label(item), item, builtin=True))
        else:
            raise ValueError(f"a task must be an lm-eval task name, a task YAML file, story_tasks(...) or word_problems(...), "
                             f"got {item!r}")
    labels = [t.label for t in out]
    if len(set(labels)) != len(labels):
        raise ValueError(f"tasks must be distinct, got {labels}")
    return out


@functools.cache
def _lm_eval_version() -> str:
    return importlib.metadata.version("lm_eval")


def task_evals(model: Any, model_name: str, checkpoint: int | str, tasks: Any, *, harness: HarnessConfig,
               num_fewshot: int | None = None, limit: int | float | None = None, bootstrap_iters: int = 1000,
               seed: int = 0, ema: bool = False) -> tuple[TaskEval, ...]:
    """One :class:`TaskEval` per task of ``tasks`` (see the module docstring), on ``checkpoint`` of ``model``.

    Raises:
        ValueError: a task that is none of the accepted kinds, a YAML file that does not exist,
            a task given twice, or a bad setting.
    """
    folder = f"evals/{model_name}" if checkpoint == FINAL else f"evals/{model_name}/step-{checkpoint}"
    folder += "/ema" if ema else ""
    return tuple(
        TaskEval(name=f"{folder}/{t.label}", config=TaskEvalConfig(
            model=model, checkpoint=checkpoint, task=t.spec, harness=harness, num_fewshot=num_fewshot, limit=limit,
            bootstrap_iters=bootstrap_iters, seed=seed, task_digest=t.digest,
            lm_eval_version=_lm_eval_version() if t.builtin else None, ema=ema))
        for t in _tasks_of(tasks))


def check_task_data(steps: Iterable[Step]) -> None:
    """Before a run: check that the tasks named by the task eval steps among ``steps`` (by name or
    local YAML file) have their data on this machine. Tasks in other steps' outputs are made by the run.

    Raises:
        levanter.eval_harness.UnknownTask: a task name lm-eval does not know.
        levanter.eval_harness.TaskDataUnavailable: a task's dataset is not here (one line naming
            the task, the dataset and what to do).
    """
    specs = sorted({s.config.task for s in steps if s.fn is harness_eval_step and isinstance(s.config.task, str)})
    if specs:
        # lm-eval's task index: only when a run is about to evaluate tasks.
        from levanter.eval_harness.tasks import check_task_data as check

        check(specs)


# Moved from task_eval.py: what it defines keeps that name in every hash (and for workers and pickle).
keep_identities(globals(), "marin.experiment.task_eval")
