"""``reference_logprobs()``: a frozen model's log-probs of every preference pair, scored once as a step.

Every DPO run that compares with the same model on the same pairs reads this one step: a sweep
over four betas scores its reference once (``marin plan`` shows one reference step), and adding
a fifth beta scores nothing. Output: ``levanter.dpo.reference``'s layout (per split, a Parquet
table of the chosen and rejected completions' summed log-probs and lengths).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from levanter.config import ComputeDtype
from marin.execution.core.errors import InvalidStep
from marin.execution.core.lazy import Lazy, StepHandle, lower
from marin.execution.core.step import Step
from marin.execution.core.traits import StepTraits, step_function
from marin.experiment.posttrain.data import TokenizedPreference, preference_chat_step
from marin.experiment.training.models import training_config
from rigging.fields import unhashed_field

__all__ = ["ReferenceLogprobs", "ReferenceLogprobsConfig", "check_preference_data", "reference_logprobs",
           "reference_logprobs_step"]


@dataclass(frozen=True)
class ReferenceLogprobsConfig:
    """Which model scores which preference pairs."""

    model: Any
    """The reference model (a training step or handle; its final parameters)."""
    data: Any
    """The tokenized preference pairs (a ``preference_chat(...)`` handle)."""
    ema: bool = False
    """Score with the model's average of its parameters (``ema=`` of its training) instead."""
    compute_dtype: ComputeDtype = ComputeDtype.FLOAT32
    """Precision of the forward pass: the DPO runs that read the log-probs compute in the same one,
    so that a policy that is still its reference has a margin of 0."""
    batch_size: int = unhashed_field(default=8)
    """Pairs scored at once (does not change the log-probs)."""


# It runs the model; reference.json names the model's and the data's folders.
@step_function(StepTraits(volatile_files=("reference.json",), accelerator=True))
def reference_logprobs_step(config: ReferenceLogprobsConfig, output_path: str) -> None:
    """Step function: score every pair of every split with the reference model."""
    from levanter.dpo.reference import score_pairs

    counts = score_pairs(str(config.model), str(config.data), output_path, batch_size=config.batch_size, ema=config.ema,
                         compute_dtype=ComputeDtype(config.compute_dtype).jnp)
    print("reference log-probs of " + ", ".join(f"{n} {split} pairs" for split, n in counts.items()))


class ReferenceLogprobs(StepHandle, fn=reference_logprobs_step):
    """Handle to a reference log-probs step; ``dpo(..., reference=...)`` reads it."""


def check_preference_data(handle: str, name: str, data: Any) -> None:
    """Raise :class:`InvalidStep` naming ``handle`` unless ``data`` is a ``preference_chat(...)`` handle or its step."""
    if isinstance(data, TokenizedPreference) or (isinstance(data, Step) and data.fn is preference_chat_step):
        return
    shown = lower(data).name if isinstance(data, Lazy | Step) else repr(data)
    raise InvalidStep(f"{handle} {name!r}: data must be a preference_chat(...) handle (tokenized preference pairs), "
                      f"got {type(data).__name__} {shown}")


def reference_logprobs(name: str, model: Any, data: Any, *, ema: bool = False,
                       compute_dtype: ComputeDtype | str = ComputeDtype.FLOAT32, batch_size: int = 8,
                       version: str = "v1") -> ReferenceLogprobs:
    """A step scoring every pair of ``data`` with ``model``'s final parameters (the DPO reference).

    Args:
        name: the step's name.
        model: a trained model: a ``train_lm(...)`` handle (the SFT model), or any model handle.
        data: a ``preference_chat(...)`` handle.
        ema: score with the model's average of its parameters (it must train with ``ema=``).
        compute_dtype: ``"float32"`` or ``"bfloat16"``: the precision of the DPO runs that read it.
        batch_size: pairs scored at once (not part of the step's identity).

    Raises:
        InvalidStep: ``model`` is not a trained model, ``data`` not preference pairs, or ``ema`` asked of a
            model trained without it; the message names the handle and the argument.
    """
    try:
        trained = training_config(model)
    except ValueError as e:
        raise InvalidStep(f"reference_logprobs {name!r}: model: {e}") from None
    check_preference_data("reference_logprobs", name, data)
    if ema and trained.trainer.ema is None:
        raise InvalidStep(f"reference_logprobs {name!r}: ema=True, but {lower(model).name} trains without ema=")
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
        raise InvalidStep(f"reference_logprobs {name!r}: batch_size must be a positive int, got {batch_size!r}")
    try:
        dtype = ComputeDtype(compute_dtype)
    except ValueError:
        raise InvalidStep(f"reference_logprobs {name!r}: compute_dtype must be one of "
                          f"{[d.value for d in ComputeDtype]}, got {compute_dtype!r}") from None
    return ReferenceLogprobs(name=name, config=ReferenceLogprobsConfig(model=model, data=data, ema=ema,
                                                                       compute_dtype=dtype, batch_size=batch_size),
                             version=version)
