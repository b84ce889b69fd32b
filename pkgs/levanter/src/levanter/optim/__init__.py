"""Optimizer configs that build Optax transformations; the learning-rate schedule from optax's combinators.

Every schedule has up to three phases over a run of ``num_train_steps`` optimizer steps (0-based):
a linear warmup that reaches the peak on its last step, a phase at the peak (``wsd`` only), and a
decay from the peak to ``min_lr_ratio * peak`` that would reach its floor at step
``num_train_steps`` (one past the last step). The rate in use is kept in the optimizer state
(``optax.inject_hyperparams``), so what is logged is what was applied: see :func:`learning_rate`.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, ClassVar

from rigging.fields import added_field

__all__ = ["COMPACT_MOMENTS", "AdamConfig", "DecayShape", "Schedule", "layer_axes", "learning_rate"]


class Schedule(enum.Enum):
    """Shape of the learning rate after warmup."""

    COSINE = "cosine"
    """Cosine decay over every step after warmup."""
    LINEAR = "linear"
    """Linear decay over every step after warmup."""
    CONSTANT = "constant"
    """The peak rate until the end."""
    WSD = "wsd"
    """Warmup, stable at the peak, then decay over the last ``decay`` steps (``decay_shape``)."""


class DecayShape(enum.Enum):
    """How a ``wsd`` schedule falls from the peak to the floor; ``t`` runs from 0 to 1 over the decay."""

    LINEAR = "linear"
    """``1 - t``."""
    ONE_MINUS_SQRT = "1-sqrt"
    """``1 - sqrt(t)``: falls fast, then flattens near the floor."""
    COSINE = "cosine"
    """``(1 + cos(pi t)) / 2``."""


def _steps(value: float, num_train_steps: int) -> int:
    """A length given as a fraction of training (< 1) or a whole number of steps."""
    return int(round(value * num_train_steps)) if value < 1 else int(value)


def _is_length(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
            and (value < 1 or value == int(value)))


@dataclasses.dataclass(frozen=True)
class AdamConfig:
    """AdamW with linear warmup, a decay schedule and global-norm gradient clipping."""

    learning_rate: float = 6e-4
    """Peak learning rate, reached on the last warmup step."""
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
    """After warmup: cosine, linear, constant or wsd (a ``Schedule`` or its string value)."""
    min_lr_ratio: float = 0.1
    """Final learning rate as a fraction of the peak (every schedule but constant)."""
    max_grad_norm: float | None = 1.0
    """Clip gradients to this global norm; None disables clipping."""
    decay: float | None = None
    """``wsd`` only: length of the final decay, a fraction of training if < 1, else a number of steps."""
    decay_shape: DecayShape | None = None
    """``wsd`` only: linear (the default), 1-sqrt or cosine (a ``DecayShape`` or its string value)."""
    moment_dtype: str = added_field(default="float32")
    """Storage of Adam's moments: ``"float32"`` or ``"bfloat16"`` (half the memory; updates are
    still computed in float32). Changes the numbers, so it is part of a run's identity."""
    factored_second_moment: bool = added_field(default=False)
    """Keep the second moment of each matrix as its row and column means (Adafactor's factoring):
    ``rows + cols`` numbers instead of ``rows x cols``. Changes the numbers (part of the identity)."""

    moment_scheme: int | None = added_field(default=None)
    """Filled in, not chosen: the revision of the compact moments (``moment_dtype`` bfloat16 or
    ``factored_second_moment``) that computes the run, ``COMPACT_MOMENTS`` for them and None for
    float32 unfactored moments (optax's AdamW). Revision 2 rounds bfloat16 moments stochastically and
    factors only a leaf's own matrix axes (a stacked norm scale keeps a full moment); revision 1
    (rounding to nearest, stacked norm scales factored) is no longer computed. Being filled in it
    enters the identity of every compact-moment run, so no result of revision 1 (whose hashes lack
    the field) is taken for one of revision 2; float32 runs keep their hashes."""

    SCHEDULE_FIELDS: ClassVar[tuple[str, ...]] = ("warmup", "schedule", "min_lr_ratio", "decay", "decay_shape")
    """Fields that only shape the learning-rate schedule: runs differing in them (or in length) may
    still apply the same updates for a while (:meth:`first_step_apart`)."""

    def __post_init__(self) -> None:
        for name, kind in (("schedule", Schedule), ("decay_shape", DecayShape)):
            value = getattr(self, name)
            if isinstance(value, str):
                try:
                    object.__setattr__(self, name, kind(value))
                except ValueError:
                    raise ValueError(f"{name} must be one of {[s.value for s in kind]}, got {value!r}") from None
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
        if not _is_length(self.warmup):
            raise ValueError(f"warmup must be a fraction in [0, 1) or a whole number of steps, got {self.warmup}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        if self.moment_dtype not in _MOMENT_DTYPES:
            raise ValueError(f"moment_dtype must be one of {list(_MOMENT_DTYPES)}, got {self.moment_dtype!r}")
        if not isinstance(self.factored_second_moment, bool):
            raise ValueError(f"factored_second_moment must be a bool, got {self.factored_second_moment!r}")
        if self.moment_scheme not in (None, COMPACT_MOMENTS):
            raise ValueError(f"moment_scheme is filled in by AdamConfig ({COMPACT_MOMENTS}, the compact moments "
                             f"this code computes; leave it unset), got {self.moment_scheme!r}")
        compact = self.moment_dtype != "float32" or self.factored_second_moment
        object.__setattr__(self, "moment_scheme", COMPACT_MOMENTS if compact else None)
        if self.max_grad_norm is not None and not self.max_grad_norm > 0:
            raise ValueError(f"max_grad_norm must be > 0 or None, got {self.max_grad_norm}")
        if self.schedule is Schedule.WSD:
            if self.decay is None or not _is_length(self.decay) or self.decay == 0:
                raise ValueError("decay must be a fraction in (0, 1) or a whole number of steps for "
                                 f"schedule='wsd', got {self.decay!r}")
        else:
            for name in ("decay", "decay_shape"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} applies to schedule='wsd' only, got {name}={getattr(self, name)!r} "
                                     f"with schedule={self.schedule.value!r}")

    # ------------------------------------------------------------------ phases, in steps

    def warmup_steps(self, num_train_steps: int) -> int:
        """Number of warmup steps for a run of ``num_train_steps`` (at most the whole run)."""
        return min(_steps(self.warmup, num_train_steps), num_train_steps)

    def decay_start(self, num_train_steps: int) -> int:
        """The first step whose rate is below the peak by design (``num_train_steps``: never).

        For ``wsd`` this is where a longer run of the same schedule stops agreeing with a shorter
        one; cosine and linear decay right after warmup; constant never decays.
        """
        _check_steps(num_train_steps)
        if self.schedule is Schedule.CONSTANT:
            return num_train_steps
        if self.schedule is Schedule.WSD:
            return num_train_steps - _steps(self.decay, num_train_steps)
        return self.warmup_steps(num_train_steps)

    def check(self, num_train_steps: int) -> None:
        """Raise ``ValueError`` if the schedule's phases do not fit in ``num_train_steps``."""
        start = self.decay_start(num_train_steps)
        if self.schedule is Schedule.WSD and start < self.warmup_steps(num_train_steps):
            raise ValueError(
                f"decay ({num_train_steps - start} steps) and warmup ({self.warmup_steps(num_train_steps)} steps) "
                f"of schedule='wsd' do not fit in num_train_steps={num_train_steps}")

    # ------------------------------------------------------------------ the schedule

    def lr_schedule(self, num_train_steps: int) -> Any:
        """The ``optax.Schedule``: learning rate as a function of the (0-based) step.

        (Named ``lr_schedule`` because ``schedule`` is the field choosing its shape.)
        """
        import optax  # deferred: naming an optimizer must not load JAX

        self.check(num_train_steps)
        peak, floor = self.learning_rate, self.learning_rate * self.min_lr_ratio
        warmup = self.warmup_steps(num_train_steps)
        start = self.decay_start(num_train_steps)
        phases: list[tuple[int, Any]] = []
        if warmup:
            # Reaches the peak on the last warmup step, so step 0 trains with peak / warmup, not 0.
            phases.append((warmup, optax.linear_schedule(peak / warmup, peak, warmup - 1)))
        if start > warmup:
            phases.append((start - warmup, optax.constant_schedule(peak)))
        length = max(num_train_steps - start, 1)
        shape = self._decay_shape()
        if shape is None:
            tail = optax.constant_schedule(peak)
        elif shape is DecayShape.LINEAR:
            tail = optax.linear_schedule(peak, floor, length)
        elif shape is DecayShape.COSINE:
            tail = optax.cosine_decay_schedule(peak, length, alpha=self.min_lr_ratio)
        else:
            tail = _one_minus_sqrt(peak, floor, length)
        schedules = [fn for _, fn in phases] + [tail]
        boundaries = [sum(n for n, _ in phases[:i + 1]) for i in range(len(phases))]
        return optax.join_schedules(schedules, boundaries) if boundaries else tail

    def _decay_shape(self) -> DecayShape | None:
        """The shape of the final phase (None: no decay)."""
        if self.schedule is Schedule.WSD:
            return self.decay_shape or DecayShape.LINEAR
        return {Schedule.COSINE: DecayShape.COSINE, Schedule.LINEAR: DecayShape.LINEAR}.get(self.schedule)

    def learning_rates(self, num_train_steps: int, steps: int | None = None) -> Any:
        """The rates of steps ``0 .. steps - 1`` (default: the whole run) as a float32 numpy array."""
        import jax
        import jax.numpy as jnp
        import numpy as np

        count = num_train_steps if steps is None else steps
        return np.asarray(jax.vmap(self.lr_schedule(num_train_steps))(jnp.arange(count)), np.float32)

    def same_first_steps(self, num_train_steps: int, other: AdamConfig, other_num_train_steps: int,
                         steps: int) -> bool:
        """Whether this optimizer over ``num_train_steps`` and ``other`` over ``other_num_train_steps``
        apply identical updates (same hyperparameters, same rates) on steps ``0 .. steps - 1``.

        What "extend instead of retrain" asks: a ``wsd`` run can continue from a checkpoint of a
        shorter one taken before the shorter one's :meth:`decay_start`.
        """
        return steps <= self.first_step_apart(num_train_steps, other, other_num_train_steps)

    def first_step_apart(self, num_train_steps: int, other: AdamConfig, other_num_train_steps: int) -> int:
        """How many leading steps this optimizer over ``num_train_steps`` and ``other`` over
        ``other_num_train_steps`` apply identical updates on (at most the shorter run; 0 when a
        setting other than the schedule's shape differs)."""
        import numpy as np

        for f in dataclasses.fields(self):
            if f.name not in self.SCHEDULE_FIELDS and getattr(self, f.name) != getattr(other, f.name):
                return 0
        horizon = min(num_train_steps, other_num_train_steps)
        apart = np.flatnonzero(self.learning_rates(num_train_steps, horizon)
                               != other.learning_rates(other_num_train_steps, horizon))
        return int(apart[0]) if len(apart) else horizon

    def build(self, num_train_steps: int) -> Any:
        """The Optax transformation: clip, AdamW with the schedule, decay on matrices only.

        The learning rate is an injected hyperparameter: :func:`learning_rate` reads the rate of
        the latest update from the optimizer state.
        """
        return self._transformation(self.lr_schedule(num_train_steps))

    def at_rate(self, rate: Any) -> Any:
        """:meth:`build`'s transformation with ``rate`` in place of the schedule (the same state).

        A compiled training step takes the step's rate as an argument (``rate`` is then a traced
        scalar) and builds its update with this, so one program serves every schedule, peak and run
        length of a model: a sweep over learning rates, a branch and the run it branches from
        compile once. :meth:`rate_of_step` gives the rate :meth:`build`'s schedule would apply.
        """
        return self._transformation(lambda _count: rate)

    def rate_of_step(self, num_train_steps: int) -> Any:
        """``step -> rate`` (a float32 numpy scalar): what :meth:`build` applies at the (0-based) ``step``.

        Computed on the host CPU by the same schedule, compiled for one step at a time, so the rate is
        bit for bit the one the schedule gives inside a step and the accelerator's queue is never waited on.
        """
        import jax
        import jax.numpy as jnp
        import numpy as np

        cpu = jax.local_devices(backend="cpu")[0]  # this process's own: a rate is computed by each process
        schedule = jax.jit(self.lr_schedule(num_train_steps))  # runs where its argument is: the CPU

        def rate(step: int) -> Any:
            return np.asarray(schedule(jnp.asarray(step, jnp.int32, device=cpu)), np.float32)

        return rate

    def _transformation(self, schedule: Any) -> Any:
        import jax
        import optax

        # Norm scales are vectors (a stacked layer's norms are [layers, hidden]: still vectors);
        # decaying them towards zero only hurts.
        def matrices(params: Any) -> Any:
            return jax.tree_util.tree_map_with_path(lambda path, p: p.ndim - layer_axes(path) >= 2, params)

        def adamw(learning_rate: Any) -> Any:
            parts = []
            if self.max_grad_norm is not None:
                parts.append(optax.clip_by_global_norm(self.max_grad_norm))
            if self.moment_dtype == "float32" and not self.factored_second_moment:
                parts.append(optax.adamw(learning_rate=learning_rate, b1=self.beta1, b2=self.beta2, eps=self.epsilon,
                                         weight_decay=self.weight_decay, mask=matrices))
            else:
                from levanter.optim.moments import scale_by_compact_adam

                parts += [scale_by_compact_adam(self.beta1, self.beta2, self.epsilon, _MOMENT_DTYPES[self.moment_dtype],
                                                self.factored_second_moment),
                          optax.add_decayed_weights(self.weight_decay, matrices),
                          optax.scale_by_learning_rate(learning_rate)]
            return optax.chain(*parts)

        return optax.inject_hyperparams(adamw)(learning_rate=schedule)


COMPACT_MOMENTS = 2
"""The revision of compact moments this code computes (:attr:`AdamConfig.moment_scheme`)."""

_MOMENT_DTYPES = {"float32": "float32", "bfloat16": "bfloat16"}
"""The storage dtypes of Adam's moments, by the name a config gives."""


def layer_axes(path: Any) -> int:
    """How many leading axes of the leaf at ``path`` (a ``jax.tree_util`` key path) count layers: 1 for
    stacked layer weights (``layers/...``), else 0. What is left are the leaf's own axes: weight decay
    and the factored second moment look only at those (a stacked norm scale is still a vector)."""
    from levanter.models.layout import LAYERS

    return int(any(isinstance(getattr(k, "key", None), str) and k.key.startswith(f"{LAYERS}/") for k in path))


def learning_rate(opt_state: Any) -> Any:
    """The learning rate of the latest update, read from the state of :meth:`AdamConfig.build`."""
    return opt_state.hyperparams["learning_rate"]


def _check_steps(num_train_steps: int) -> None:
    if not isinstance(num_train_steps, int) or num_train_steps <= 0:
        raise ValueError(f"num_train_steps must be a positive int, got {num_train_steps!r}")


def _one_minus_sqrt(peak: float, floor: float, length: int) -> Any:
    """``floor + (peak - floor) * (1 - sqrt(t))`` with ``t = step / length`` clipped to [0, 1]."""
    import jax.numpy as jnp

    def schedule(step: Any) -> Any:
        t = jnp.clip(jnp.asarray(step, jnp.float32) / length, 0.0, 1.0)
        return floor + (peak - floor) * (1.0 - jnp.sqrt(t))

    return schedule
