"""Benchmark tasks through EleutherAI's lm-evaluation-harness, with a levanter model as its ``LM``.

* :class:`~levanter.eval_harness.lm.LevanterLM`: the model answering ``loglikelihood``,
  ``loglikelihood_rolling`` and ``generate_until`` requests, packed many to a row (``packing``)
  and scored on the device or mesh (``scoring``).
* :func:`~levanter.eval_harness.run.run_tasks`: the harness's evaluator over task names or task
  YAML files, writing ``results.json`` and ``samples_<task>.jsonl`` as lm-eval writes them.
* :class:`~levanter.eval_harness.config.HarnessConfig`,
  :class:`~levanter.eval_harness.config.TaskRunConfig`: their settings (importing them loads
  neither JAX nor lm_eval; names are loaded on first use).
"""

from __future__ import annotations

from rigging.lazy import lazy_getattr

__all__ = [
    "RESULTS_FILE",
    "HarnessConfig",
    "LevanterLM",
    "PackStats",
    "TaskDataUnavailable",
    "TaskRunConfig",
    "UnknownTask",
    "load_tasks",
    "run_tasks",
    "samples_file",
]

_WHERE = {
    "HarnessConfig": "levanter.eval_harness.config",
    "TaskRunConfig": "levanter.eval_harness.config",
    "LevanterLM": "levanter.eval_harness.lm",
    "PackStats": "levanter.eval_harness.packing",
    "TaskDataUnavailable": "levanter.eval_harness.tasks",
    "UnknownTask": "levanter.eval_harness.tasks",
    "load_tasks": "levanter.eval_harness.tasks",
    "RESULTS_FILE": "levanter.eval_harness.run",
    "run_tasks": "levanter.eval_harness.run",
    "samples_file": "levanter.eval_harness.run",
}

__getattr__ = lazy_getattr(__name__, _WHERE)
