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
