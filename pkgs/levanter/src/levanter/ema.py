"""An exponential moving average of the trained parameters, kept beside them.

With ``TrainerConfig(ema=EmaConfig(decay=d))`` (``train_lm(..., ema=d)``) every step moves the
average towards the parameters the optimizer just made. It is debiased as optax's
``ema(debias=True)`` is: after ``n`` updates it is ``sum_k (1 - d) d^(n-k) p_k / (1 - d^n)`` over
the updated parameters ``p_1 .. p_n``, so the weights it started from count for nothing and a run
shorter than its window ``1 / (1 - d)`` gets about the mean of its steps (without debiasing, 100
steps at ``d = 0.999`` leave 90.5% of the starting weights in the average). The update is the
recurrence ``ema = d_n ema + (1 - d_n) p_n`` with ``d_n = d (1 - d^(n-1)) / (1 - d^n)``, and the
count ``n`` is kept beside the average (``TrainState.ema_steps``), so an average that a branch adds
counts from the branch. It lives in the training state (``TrainState.ema``), so every checkpoint
holds it beside the raw parameters under ``ema``, and the final average is written as
``final/ema_params.npz`` (:data:`EMA_PARAMS_FILE`) beside ``final/params.npz``.
``levanter.generate.load_model(..., ema=True)`` reads either. Importing this module does not import JAX.

With LoRA the trained parameters are the factors ``A`` and ``B``, and an average of each is not
the average of the weights the model computes with (``ema(A) ema(B) != ema(A B)``): a run refuses
``ema=`` with ``lora=`` (``TrainLmConfig``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

__all__ = ["EMA_PARAMS_FILE", "EmaConfig", "averaged_step", "ema_config", "ema_update"]

EMA_PARAMS_FILE = "ema_params.npz"
"""The final average's file name in a run's ``final/`` folder."""


@dataclasses.dataclass(frozen=True)
class EmaConfig:
    """How fast the average forgets: each step keeps ``decay`` of it (part of a run's identity)."""

    decay: float = 0.999
    """In (0, 1): the average's window is about ``1 / (1 - decay)`` steps (the default: the last
    ~1,000 steps; a run of 100 steps gets nearly the mean of its 100 steps, a little more of the late ones)."""
    debias: bool = True
    """Count the updates and divide out the weight the start would keep (optax's ``ema(debias=True)``):
    the average starts at the first update's parameters. False: the plain recurrence from the
    starting parameters (which keep ``decay^n`` of it after ``n`` steps)."""

    def __post_init__(self) -> None:
        d = self.decay
        if isinstance(d, bool) or not isinstance(d, int | float) or not math.isfinite(d) or not 0 < d < 1:
            raise ValueError(f"ema decay must be a number in (0, 1), got {d!r}")
        object.__setattr__(self, "decay", float(d))
        if not isinstance(self.debias, bool):
            raise ValueError(f"ema debias must be a bool, got {self.debias!r}")

    def decay_at(self, held: Any) -> Any:
        """The decay of the update that makes the average's ``held + 1``-th (``held``: the updates it
        holds, an integer array): ``decay (1 - decay^held) / (1 - decay^(held + 1))`` when debiased
        (0 for the first update), else ``decay``."""
        import jax.numpy as jnp

        if not self.debias:
            return jnp.float32(self.decay)
        log_d = jnp.log(jnp.float32(self.decay))
        n = jnp.asarray(held, jnp.float32)
        # 1 - d^k as -expm1(k log d): exact for the small k where 1 - d^k is tiny.
        return jnp.float32(self.decay) * jnp.expm1(n * log_d) / jnp.expm1((n + 1.0) * log_d)


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


def ema_update(average: Any, params: Any, decay: Any) -> Any:
    """``decay * average + (1 - decay) * params``, leaf by leaf (in the average's dtype)."""
    import jax

    return jax.tree.map(lambda e, p: (decay * e + (1.0 - decay) * p).astype(e.dtype), average, params)


def averaged_step(step: Any, config: EmaConfig) -> Any:
    """``step`` (``(state, *args) -> (state, metrics)``, a ``TrainState`` with an average) followed by
    the move of the state's average towards the updated parameters, counted in ``ema_steps``."""

    def stepped(state: Any, *args: Any) -> Any:
        new, metrics = step(state, *args)
        held = new.ema_steps
        return new.replace(ema=ema_update(new.ema, new.params, config.decay_at(held)), ema_steps=held + 1), metrics

    return stepped
