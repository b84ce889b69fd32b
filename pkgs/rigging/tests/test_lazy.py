"""rigging.lazy: package attributes load on first use, and only then."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rigging.lazy import lazy_getattr


def test_names_resolve_on_first_use_and_unknown_names_raise() -> None:
    getattr_ = lazy_getattr("pkg", {"dumps": "json", "sqrt": "math"})
    import json
    import math

    assert getattr_("dumps") is json.dumps and getattr_("sqrt") is math.sqrt
    with pytest.raises(AttributeError, match="module 'pkg' has no attribute 'nope'"):
        getattr_("nope")


def test_naming_configs_does_not_import_jax() -> None:
    # Experiment files name models and optimizers; planning them must not pay for JAX.
    code = ("import sys, levanter, levanter.data, marin.report; "
            "levanter.AdamConfig; levanter.LlamaConfig; levanter.data.DatasetSpec; "
            "print(sorted(m for m in ('jax', 'optax', 'grain', 'orbax', 'haiku') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
