"""How large ``make experiments`` builds: at full size, or at the smoke size the test suite runs.

``EXPERIMENTS_SCALE=smoke marin run experiments/`` builds every experiment with every kind of step it
has (training, branches, sweeps, fits, curation, evaluations), each on a handful of training steps
and documents: the same graphs at a fraction of the cost. Both sizes are ordinary configs, so a smoke
build is a different step (another hash) from the full one: neither is ever served for the other.
The default, and what ``make experiments`` builds, is ``full``.

An experiment file picks each size-bearing value with :func:`sized` (``num_train_steps=sized(300, 30)``);
values that are the same at both sizes stay plain literals. ``experiments.train_nano`` (the model
``make train-nano`` builds and the test suite shares) has one size only; the seed example
(``tutorials/train_tiny_model.py``) trains 2 steps of ``train_nano``'s shape at smoke size, whose
compiled programs the build already holds (its own test trains 2 of the example's shape, verbatim).
"""

from __future__ import annotations

import os
from typing import TypeVar

__all__ = ["SCALES", "scale", "sized"]

SCALES = ("full", "smoke")
_VARIABLE = "EXPERIMENTS_SCALE"

T = TypeVar("T")


def scale() -> str:
    """``"full"`` or ``"smoke"``, from ``EXPERIMENTS_SCALE`` (default ``full``).

    Raises:
        ValueError: for any other value, naming the variable.
    """
    value = os.environ.get(_VARIABLE, "full")
    if value not in SCALES:
        raise ValueError(f"{_VARIABLE} must be one of {', '.join(SCALES)}, got {value!r}")
    return value


def sized(full: T, smoke: T) -> T:
    """``full``, or ``smoke`` when the experiments are built at smoke size."""
    return smoke if scale() == "smoke" else full
