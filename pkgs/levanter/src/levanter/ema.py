"""An exponential moving average of the trained parameters, kept beside them.

With ``TrainerConfig(ema=EmaConfig(decay=d))`` (``train_lm(..., ema=d)``) every step updates
``ema = d * ema + (1 - d) * params`` after the optimizer's update; the average starts at the run's
initial parameters. It lives in the training state (``TrainState.ema``), so every checkpoint holds
it beside the raw parameters under ``ema``, and the final average is written as
``final/ema_params.npz`` (:data:`EMA_PARAMS_FILE`) beside ``final/params.npz``.
``levanter.generate.load_model(..., ema=True)`` reads either. Importing this module does not import JAX.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

__all__ = ["EMA_PARAMS_FILE", "EmaConfig", "ema_config", "ema_update"]

EMA_PARAMS_FILE = "ema_params.npz"
"""The final average's file name in a run's ``final/`` folder."""


@dataclasses.dataclass(frozen=True)
class EmaConfig:
    """How fast the average forgets: each step keeps ``decay`` of it (part of a run's identity)."""

    decay: float = 0.999
    """In (0, 1): close to 1 averages over about ``1 / (1 - decay)`` steps."""

    def __post_init__(self) -> None:
        d = self.decay
        if isinstance(d, bool) or not isinstance(d, int | float) or not math.isfinite(d) or not 0 < d < 1:
            raise ValueError(f"ema decay must be a number in (0, 1), got {d!r}")
        object.__setattr__(self, "decay", float(d))


def ema_config(value: Any) -> EmaConfig | None:
    """``value`` as an :class:`EmaConfig`: one already, a decay, or None (no average).

    Raises:
        ValueError: anything else, or a decay outside (0, 1).
    """
    if value is None or isinstance(value, EmaConfig):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"ema must be a decay in (0, 1) or an EmaConfig, got {value!r}")
    return EmaConfig(decay=float(value))


def ema_update(average: Any, params: Any, decay: float) -> Any:
    """``decay * average + (1 - decay) * params``, leaf by leaf (in the average's dtype)."""
    import jax

    return jax.tree.map(lambda e, p: (decay * e + (1.0 - decay) * p).astype(e.dtype), average, params)
