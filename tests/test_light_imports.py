"""Experiment files name models, optimizers and datasets; planning them must not pay for JAX."""

from __future__ import annotations

import subprocess
import sys


def test_naming_configs_does_not_import_jax() -> None:
    # Experiment files name models and optimizers; planning them must not pay for JAX.
    code = ("import sys, levanter, levanter.data, marin.report; "
            "levanter.AdamConfig; levanter.LlamaConfig; levanter.data.DatasetSpec; "
            "print(sorted(m for m in ('jax', 'optax', 'grain', 'orbax', 'haiku') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_naming_harness_settings_and_story_tasks_does_not_import_jax_or_the_harness() -> None:
    # Eval steps name their harness settings in configs; planning them must not pay for JAX or lm_eval.
    code = ("import sys, levanter.eval_harness as h, marin.experiment.story_tasks; h.HarnessConfig; h.TaskRunConfig; "
            "print(sorted(m for m in ('jax', 'lm_eval', 'datasets', 'tokenizers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
