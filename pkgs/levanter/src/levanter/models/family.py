"""What the trainer asks of a model config, and the model families a run's config may name.

The trainer never names a model: it asks the config object (:class:`ModelConfig`) for its Haiku
transform, its parameter count and FLOPs, and how its heads divide over a mesh. A second family
is a second config class with these methods, added to :data:`MODEL_FAMILIES` so that a saved
``config.json`` can say which class to read it back as. Importing this module does not import JAX.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from levanter.models.llama import LlamaConfig
from rigging import filesystem as fs

__all__ = ["DEFAULT_FAMILY", "MODEL_FAMILIES", "RUN_CONFIG_FILE", "ModelConfig", "model_config_from_dict",
           "model_family", "read_model_config"]

RUN_CONFIG_FILE = "config.json"
"""Where a training run records, in its output folder, the config it trained with (its model's
vocabulary and context resolved: what was built, not what was asked for)."""


class ModelConfig(Protocol):
    """A frozen dataclass describing a decoder the trainer can build and account for.

    ``vocab_size`` and ``max_seq_len`` are fields: the trainer replaces them
    (``dataclasses.replace``) with the data's vocabulary and a longer training context.
    """

    vocab_size: int
    max_seq_len: int

    def build(self, compute_dtype: Any = None, shard: Callable[..., Any] | None = None, impl: Any = None) -> Any:
        """The model: ``init(rng, tokens)``, ``apply(params, None, tokens, segment_ids=None)`` returning
        float32 logits as a Haiku transform's, ``hidden(params, tokens, segment_ids=None)`` (the final
        hidden states) and ``head(params)`` (the ``[hidden, vocab]`` output projection) for the
        blockwise loss; ``shard`` places activations on a mesh; ``impl`` (``levanter.models.impl.Impl``)
        says how it runs (remat, attention kernel), never what it computes."""
        ...

    def num_params(self) -> int:
        """Exact number of parameters of the model."""
        ...

    def flops_per_token(self, seq_len: int, *, causal: bool = False) -> float:
        """Training FLOPs (forward and backward) per token at context ``seq_len`` (``causal``: the
        attention products halved for the causal mask, MaxText's count)."""
        ...

    def linear_shapes(self) -> Mapping[str, tuple[int, int]]:
        """``(in, out)`` of each linear module by name: what LoRA may adapt (``levanter.lora``)."""
        ...

    def sharding_units(self) -> Mapping[str, int]:
        """Counts of indivisible units per logical axis (``{"heads": 8}``): a mesh never cuts one in two."""
        ...


MODEL_FAMILIES: Mapping[str, type] = {"llama": LlamaConfig}
"""Config class of each model family, by the name a serialised run config records."""

DEFAULT_FAMILY = "llama"
"""The family of a serialised config that names none (every config written before families had names)."""


def model_family(config: Any) -> str:
    """The family name of model config ``config``.

    Raises:
        ValueError: ``config`` is not an instance of a class in :data:`MODEL_FAMILIES`.
    """
    for name, cls in MODEL_FAMILIES.items():
        if isinstance(config, cls):
            return name
    raise ValueError(f"model must be a {' or '.join(c.__name__ for c in MODEL_FAMILIES.values())}, "
                     f"got {type(config).__name__}")


def model_config_from_dict(fields: Mapping[str, Any], family: str | None = None) -> Any:
    """The model config of family ``family`` (None: :data:`DEFAULT_FAMILY`) with ``fields``.

    Raises:
        ValueError: ``family`` is not in :data:`MODEL_FAMILIES`.
    """
    name = DEFAULT_FAMILY if family is None else family
    if name not in MODEL_FAMILIES:
        raise ValueError(f"model family must be one of {sorted(MODEL_FAMILIES)}, got {name!r}")
    return MODEL_FAMILIES[name](**fields)


def read_model_config(output_path: str) -> Any:
    """The model a training run recorded in ``<output_path>/config.json`` (vocabulary resolved)."""
    saved = json.loads(fs.read_text(fs.join(output_path, RUN_CONFIG_FILE)))
    return model_config_from_dict(saved["model"], saved.get("model_family"))
