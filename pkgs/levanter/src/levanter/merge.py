"""Averaging the parameters of several checkpoints (of one run, or of runs of one shape).

:func:`average_models` reads each checkpoint as ``levanter.generate.load_model`` does (a LoRA run's
adapters folded into its base, or the average ``ema`` kept beside the parameters) and returns their
weighted mean, accumulated in float64 in the order given and stored as float32: the same
checkpoints and weights give the same bytes, whoever merges them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["average_models", "normalized_weights"]


def normalized_weights(weights: Sequence[float] | None, count: int) -> tuple[float, ...]:
    """``weights`` (None: equal) scaled to sum to 1.

    Raises:
        ValueError: not ``count`` of them, one negative or not finite, or all 0.
    """
    if weights is None:
        return (1.0 / count,) * count
    values = list(weights)
    if len(values) != count:
        raise ValueError(f"weights must give one weight per checkpoint ({count}), got {len(values)}")
    if any(isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w) or w < 0 for w in values):
        raise ValueError(f"weights must be finite numbers >= 0, got {values}")
    total = float(sum(values))
    if not total > 0:
        raise ValueError(f"weights must not all be 0, got {values}")
    return tuple(float(w) / total for w in values)


def _shape(config: Any) -> dict[str, Any]:
    return {k: v for k, v in dataclasses.asdict(config).items() if k != "max_seq_len"}


def average_models(sources: Sequence[tuple[str, int | None]], weights: Sequence[float] | None = None, *,
                   ema: bool = False) -> tuple[Any, dict[str, dict[str, np.ndarray]]]:
    """The model config of the first source and the weighted mean of the sources' parameters.

    Args:
        sources: ``(training output folder, checkpoint step or None for the final parameters)``.
        weights: one per source (None: equal), normalised to sum to 1.
        ema: average the runs' averages of their parameters (``levanter.ema``) instead.

    Raises:
        ValueError: no source, bad weights, or sources of different shapes (the message names two).
    """
    from levanter.generate import load_model

    if not sources:
        raise ValueError("a merge needs at least one checkpoint, got none")
    scale = normalized_weights(weights, len(sources))
    first_config, total = None, None
    first_name = ""
    for (path, step), w in zip(sources, scale, strict=True):
        config, params = load_model(path, step, ema=ema)
        name = f"{path} ({'final' if step is None else f'step {step}'})"
        if first_config is None:
            first_config, first_name = config, name
            total = {m: {n: np.zeros(np.shape(v), np.float64) for n, v in names.items()} for m, names in params.items()}
        elif _shape(config) != _shape(first_config):
            differ = [f"{k} {a} != {b}" for k, a in _shape(first_config).items() if (b := _shape(config)[k]) != a]
            raise ValueError(f"checkpoints from runs of different shapes: {first_name} and {name} differ in "
                             f"{', '.join(differ)}")
        assert total is not None
        for module, names in params.items():
            for n, value in names.items():
                total[module][n] += w * np.asarray(value, np.float64)
    assert total is not None
    return first_config, {m: {n: v.astype(np.float32) for n, v in names.items()} for m, names in total.items()}
