"""Running harness tasks for a model and writing their results as lm-eval writes them.

The harness's own evaluator runs the tasks (``lm_eval.simple_evaluate`` with the model as an
``LM`` instance) and its own ``EvaluationTracker`` writes the files, into a scratch folder; they
are then published under fixed names (the tracker stamps them with the time):

* ``results.json``: ``results`` (task -> ``acc,none``, ``acc_stderr,none``, ...), ``configs``,
  ``versions``, ``n-shot``, ``config`` (with the model's description), ``task_hashes``, ...
* ``samples_<task>.jsonl``: one line per document, as ``log_samples`` gives them (``doc_id``,
  ``doc``, ``target``, ``arguments``, ``resps``, ``filtered_resps``, the metrics, hashes).

Nothing is downloaded: the model is ours, and task data comes from local files or the hub cache
(``levanter.eval_harness.tasks``).
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import tempfile
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import lm_eval.utils
from lm_eval import simple_evaluate
from lm_eval.api.model import LM
from lm_eval.loggers import EvaluationTracker

from levanter.eval_harness.config import HarnessConfig, TaskRunConfig
from levanter.eval_harness.scores import RESULTS_FILE, TaskScores, samples_file, task_scores
from levanter.eval_harness.tasks import load_tasks
from rigging import filesystem as fs

__all__ = ["RESULTS_FILE", "evaluate_model", "run_tasks", "samples_file"]

_NO_FORK = "DISABLE_MULTIPROC"

logger = logging.getLogger(__name__)


def run_tasks(lm: LM, config: TaskRunConfig, output_dir: str | None = None) -> dict[str, Any]:
    """Evaluate ``lm`` on ``config.tasks`` with the harness; write its files into ``output_dir`` (any fsspec URL).

    Returns:
        The harness's results (as in ``results.json``), its per-task samples under ``"samples"``.

    Raises:
        levanter.eval_harness.tasks.UnknownTask: a task is not known.
        levanter.eval_harness.tasks.TaskDataUnavailable: a task's dataset is not on this machine.
        RuntimeError: the harness's tracker could not write a file.
    """
    with _templates_compiled_once():  # building a task renders its templates too
        return _run_tasks(lm, config, output_dir)


def _run_tasks(lm: LM, config: TaskRunConfig, output_dir: str | None) -> dict[str, Any]:
    manager, built = load_tasks(config.tasks, config.include_paths)
    tracker = EvaluationTracker()
    with tempfile.TemporaryDirectory(prefix="lm-eval-") as scratch:
        tracker.output_path = os.path.join(scratch, RESULTS_FILE) if output_dir is not None else None
        with _bootstrap_in_process(), _transformers_version_from_metadata():
            results = simple_evaluate(
                model=lm, tasks=built, task_manager=manager,
                num_fewshot=config.num_fewshot, limit=config.limit, log_samples=True, evaluation_tracker=tracker,
                bootstrap_iters=config.bootstrap_iters, random_seed=config.seed, numpy_random_seed=config.seed,
                torch_random_seed=config.seed, fewshot_random_seed=config.seed)
        if results is None:
            raise RuntimeError("the harness returned no results (not the process of rank 0)")
        results["transformers_version"] = _transformers_version()
        samples = results.pop("samples")
        if output_dir is not None:
            _publish(tracker, results, samples, scratch, output_dir)
    results["samples"] = samples
    return results


def evaluate_model(model_config: Any, params: Any, tokenizer_json: str, tasks: TaskRunConfig,
                   harness: HarnessConfig = HarnessConfig(), *, mesh: Any = None, output_dir: str | None = None,
                   name: str = "levanter") -> dict[str, TaskScores]:
    """Run ``tasks`` on a model in hand (a trainer's parameters, or a checkpoint's) and return its scores.

    Args:
        model_config: the model's shape (a ``LlamaConfig``).
        params: its parameters (a Haiku params tree, possibly sharded on ``mesh``).
        tokenizer_json: the text of its ``tokenizer.json``.
        tasks: the tasks and the harness's settings.
        harness: batch shape, end token and precision of the requests.
        mesh: the ``jax.sharding.Mesh`` to run on (None: the default device).
        output_dir: where to write ``results.json`` and the samples (None: nowhere).
        name: how the results name the model.

    Returns:
        Task (and group) -> :class:`~levanter.eval_harness.scores.TaskScores`;
        :func:`~levanter.eval_harness.scores.flat_metrics` names them ``<task>.<metric>`` for a tracker.
    """
    # The model's module loads JAX: only when a model is evaluated, not when results are read.
    from levanter.eval_harness.lm import LevanterLM

    lm = LevanterLM(model_config, params, tokenizer_json, harness, mesh=mesh, name=name)
    return task_scores(run_tasks(lm, tasks, output_dir))


@contextlib.contextmanager
def _bootstrap_in_process() -> Iterator[None]:
    """Bootstrap standard errors in this process: the harness otherwise forks a pool (its
    ``DISABLE_MULTIPROC`` switch, read when it bootstraps), and forking a process whose JAX runtime
    has threads running can deadlock the children."""
    previous = os.environ.get(_NO_FORK)
    os.environ[_NO_FORK] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(_NO_FORK, None)
        else:
            os.environ[_NO_FORK] = previous


@contextlib.contextmanager
def _transformers_version_from_metadata() -> Iterator[None]:
    """The harness stamps its results with ``transformers_version`` by importing transformers: 1.5 s
    of a 9 s task evaluation here, for one string. While it runs it is told transformers is absent
    (its ``is_transformers_available``, read when it stamps); :func:`run_tasks` then writes the
    version from the package's metadata into the same key."""
    saved = lm_eval.utils.is_transformers_available
    lm_eval.utils.is_transformers_available = lambda: False
    try:
        yield
    finally:
        lm_eval.utils.is_transformers_available = saved


@contextlib.contextmanager
def _templates_compiled_once() -> Iterator[None]:
    """The harness renders a task's prompt templates (``doc_to_text``, ``doc_to_target``,
    ``doc_to_choice``) with Jinja through ``lm_eval.utils.apply_template``, which compiles the
    template's source again for every document and every call: 1,403 compilations, about 2 CPU
    seconds, for a 200-document multiple-choice task, a quarter of its evaluation on the CPU
    (lm-evaluation-harness issue #1286). While it runs, each source is compiled once, in the
    harness's own Jinja environment, and rendered per document as before: the same text."""
    saved = lm_eval.utils.apply_template
    compiled: dict[str, Any] = {}

    def apply_template(template: str, doc: dict) -> str:
        found = compiled.get(template)
        if found is None:
            found = compiled[template] = lm_eval.utils.env.from_string(template)
        return found.render(**doc)

    lm_eval.utils.apply_template = apply_template
    try:
        yield
    finally:
        lm_eval.utils.apply_template = saved


def _transformers_version() -> str:
    """What the harness writes as ``transformers_version``: the installed version, or ``N/A``."""
    try:
        return version("transformers")
    except PackageNotFoundError:
        return "N/A"


def _publish(tracker: EvaluationTracker, results: dict[str, Any], samples: dict[str, Any], scratch: str,
             output_dir: str) -> None:
    # The tracker logs and swallows its own write errors: every file it should have written is checked.
    tracker.save_results_aggregated(results=results, samples=samples)
    written = {RESULTS_FILE: _one(scratch, "results_*.json", "results")}
    for task in results["configs"]:
        tracker.save_results_samples(task_name=task, samples=samples[task])
        written[samples_file(task)] = _one(scratch, f"samples_{glob.escape(task)}_*.jsonl", f"samples of {task}")
    # Samples first, results last: a folder with results.json holds everything.
    for name in sorted(written, key=lambda n: n == RESULTS_FILE):
        with open(written[name], "rb") as f:
            fs.atomic_write(fs.join(output_dir, name), f.read())
    logger.info("lm-eval results of %d tasks written to %s", len(results["configs"]), output_dir)


def _one(folder: str, pattern: str, what: str) -> str:
    found = glob.glob(os.path.join(glob.escape(folder), pattern))
    if len(found) != 1:
        raise RuntimeError(f"lm-eval's tracker did not write the {what} file into {folder} (found {found})")
    return found[0]
