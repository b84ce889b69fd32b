"""Optimizer configs that build Optax transformations."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

__all__ = ["AdamConfig", "Schedule"]


class Schedule(enum.Enum):
    """Shape of the learning rate after warmup."""

    COSINE = "cosine"
    LINEAR = "linear"
    CONSTANT = "constant"


@dataclasses.dataclass(frozen=True)
class AdamConfig:
    """AdamW with linear warmup, a decay schedule and global-norm gradient clipping."""

    learning_rate: float = 6e-4
    """Peak learning rate, reached at the end of warmup."""
    weight_decay: float = 0.0
    """Decoupled weight decay (AdamW), applied to matrices only (not norms scales)."""
    beta1: float = 0.9
    """Exponential decay of the first moment."""
    beta2: float = 0.95
    """Exponential decay of the second moment."""
    epsilon: float = 1e-8
    """Added to the denominator for numerical stability."""
    warmup: float = 0.01
    """Warmup length: a fraction of training if < 1, else a number of steps (an integer)."""
    schedule: Schedule = Schedule.COSINE
    """Decay after warmup: cosine, linear or constant (a ``Schedule`` or its string value)."""
    min_lr_ratio: float = 0.1
    """Final learning rate as a fraction of the peak (cosine and linear)."""
    max_grad_norm: float | None = 1.0
    """Clip gradients to this global norm; None disables clipping."""

    def __post_init__(self) -> None:
        if isinstance(self.schedule, str):
            try:
                object.__setattr__(self, "schedule", Schedule(self.schedule))
            except ValueError:
                raise ValueError(
                    f"schedule must be one of {[s.value for s in Schedule]}, got {self.schedule!r}") from None
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        for name in ("beta1", "beta2"):
            value = getattr(self, name)
            if not 0 <= value < 1:
                raise ValueError(f"{name} must be in [0, 1), got {value}")
        if not self.epsilon > 0:
            raise ValueError(f"epsilon must be > 0, got {self.epsilon}")
        if self.warmup < 0 or (self.warmup >= 1 and self.warmup != int(self.warmup)):
            raise ValueError(f"warmup must be a fraction in [0, 1) or a whole number of steps, got {self.warmup}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        if self.max_grad_norm is not None and not self.max_grad_norm > 0:
            raise ValueError(f"max_grad_norm must be > 0 or None, got {self.max_grad_norm}")

    def warmup_steps(self, num_train_steps: int) -> int:
        """Number of warmup steps for a run of ``num_train_steps``."""
        if self.warmup < 1:
            return int(round(self.warmup * num_train_steps))
        return int(self.warmup)

    def lr_schedule(self, num_train_steps: int) -> Any:
        """Learning rate as a function of the (0-based) step.

        (Named ``lr_schedule`` because ``schedule`` is the field choosing its shape.)
        """
        import jax.numpy as jnp  # deferred: naming an optimizer must not load JAX


        if num_train_steps <= 0:
            raise ValueError(f"num_train_steps must be > 0, got {num_train_steps}")
        warmup = min(self.warmup_steps(num_train_steps), num_train_steps)
        peak, floor = self.learning_rate, self.learning_rate * self.min_lr_ratio
        decay_steps = max(num_train_steps - warmup, 1)

        def lr(step: Any) -> Any:
            step = jnp.asarray(step, jnp.float32)
            # Warmup reaches the peak at step == warmup, so step 0 trains with a small, non-zero rate.
            warm = peak * jnp.minimum((step + 1) / max(warmup, 1), 1.0)
            frac = jnp.clip((step - warmup) / decay_steps, 0.0, 1.0)
            if self.schedule is Schedule.COSINE:
                decayed = floor + (peak - floor) * 0.5 * (1 + jnp.cos(jnp.pi * frac))
            elif self.schedule is Schedule.LINEAR:
                decayed = peak + (floor - peak) * frac
            else:
                decayed = jnp.asarray(peak, jnp.float32)
            return jnp.where(step < warmup, warm, decayed)

        return lr

    def build(self, num_train_steps: int) -> Any:
        """The Optax transformation: clip, AdamW with the schedule, decay on matrices only."""
        import jax
        import optax


        parts = []
        if self.max_grad_norm is not None:
            parts.append(optax.clip_by_global_norm(self.max_grad_norm))
        parts.append(optax.adamw(
            learning_rate=self.lr_schedule(num_train_steps),
            b1=self.beta1,
            b2=self.beta2,
            eps=self.epsilon,
            weight_decay=self.weight_decay,
            # Norm scales are vectors; decaying them towards zero only hurts.
            mask=lambda params: jax.tree.map(lambda p: p.ndim >= 2, params),
        ))
        return optax.chain(*parts)
