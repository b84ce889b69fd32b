"""Where a training run starts: random (the default), weights made elsewhere, or another run's checkpoint.

``TrainerConfig.initialize_from`` holds one of the variants below (a small typed union); each
names what it reads. :func:`initial_params` loads the parameters of an ``HfCheckpoint`` or
``TrainedModel`` for the configured model; a ``CheckpointStart`` is restored whole by the trainer
(parameters, optimizer state, step, key, data position). A run that has checkpoints of its own
resumes from them instead: the starting point matters only at step 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from levanter.models.llama import LlamaConfig
from rigging.fields import added_field

__all__ = ["CheckpointStart", "HfCheckpoint", "InitializeFrom", "TrainedModel", "initial_params",
           "initialize_from_dict", "initialize_kinds", "initialize_to_dict"]


@dataclasses.dataclass(frozen=True)
class HfCheckpoint:
    """Parameters from a Hugging Face Llama checkpoint; the optimizer state starts fresh."""

    repo: str
    """A folder (local or fsspec URL) with ``config.json`` and safetensors weights, or a Hub model id."""
    revision: str | None = None
    """Branch, tag or commit of a Hub id (None: ``main``)."""

    def __post_init__(self) -> None:
        if not isinstance(self.repo, str) or not self.repo:
            raise ValueError(f"repo must name an HF checkpoint folder or Hub model id, got {self.repo!r}")
        if self.revision is not None and (not isinstance(self.revision, str) or not self.revision):
            raise ValueError(f"revision must be a non-empty string or None, got {self.revision!r}")


@dataclasses.dataclass(frozen=True)
class TrainedModel:
    """The final parameters of another training run (fine-tuning); the optimizer state starts fresh.

    The vocabulary grows to the configured model's (new special tokens of a chat template): old
    embedding rows and output columns are kept as they were (``levanter.models.vocab``).
    """

    path: Any
    """The run's output folder (a training step or handle until the runner resolves it)."""
    ema: bool = added_field(default=False)
    """Start from the run's average of its parameters (``levanter.ema``) instead of its parameters."""

    def __post_init__(self) -> None:
        if self.path is None or (isinstance(self.path, str) and not self.path):
            raise ValueError(f"path must name a trained model's output, got {self.path!r}")
        if not isinstance(self.ema, bool):
            raise ValueError(f"ema must be a bool, got {self.ema!r}")


@dataclasses.dataclass(frozen=True)
class CheckpointStart:
    """Continue from a checkpoint of another run (a branch, or an extension of a shorter run).

    The run continues from ``step``: parameters, optimizer state, step counter and PRNG key come
    from the checkpoint, and so does the data position unless ``reset_data_loader``.
    """

    checkpoint_path: Any
    """The other run's checkpoint folder (``levanter.checkpoint.checkpoint_dir`` of its output; a
    placeholder for a training step's output until the runner resolves it)."""
    step: int
    """Which of its committed checkpoints."""
    reset_data_loader: bool = False
    """Read the data from the start instead of where the other run was."""
    metrics_path: Any = None
    """The other run's ``metrics.jsonl``: its rows up to ``step`` begin this run's (curves start at 0)."""

    def __post_init__(self) -> None:
        if self.checkpoint_path is None or (isinstance(self.checkpoint_path, str) and not self.checkpoint_path):
            raise ValueError(f"checkpoint_path must name a checkpoint folder, got {self.checkpoint_path!r}")
        if not isinstance(self.step, int) or isinstance(self.step, bool) or self.step <= 0:
            raise ValueError(f"step must be a positive int, got {self.step!r}")
        if not isinstance(self.reset_data_loader, bool):
            raise ValueError(f"reset_data_loader must be a bool, got {self.reset_data_loader!r}")


InitializeFrom = HfCheckpoint | TrainedModel | CheckpointStart
"""The starting points a run may name."""

# The tag of each variant in a serialised TrainerConfig.
_KINDS: dict[str, type] = {"hf_checkpoint": HfCheckpoint, "trained_model": TrainedModel,
                           "checkpoint": CheckpointStart}


def initialize_kinds() -> list[str]:
    """Names of the variant types, for messages."""
    return sorted(cls.__name__ for cls in _KINDS.values())


def initial_params(init: InitializeFrom, config: LlamaConfig) -> dict[str, dict[str, Any]]:
    """The parameters ``init`` names, shaped for the model ``config`` describes (host arrays)."""
    if isinstance(init, HfCheckpoint):
        from levanter.compat.hf_checkpoint import load_hf_params, resolve_hf_folder

        return load_hf_params(resolve_hf_folder(init.repo, init.revision), config)
    if isinstance(init, TrainedModel):
        return _trained_params(str(init.path), config, init.ema)
    if isinstance(init, CheckpointStart):
        raise TypeError("a CheckpointStart is restored whole (levanter.checkpoint.restore_checkpoint), "
                        "not as parameters alone")
    raise TypeError(f"initialize_from must be one of {initialize_kinds()}, got {type(init).__name__}")


def _trained_params(path: str, config: LlamaConfig, ema: bool = False) -> dict[str, dict[str, Any]]:
    from levanter.generate import load_final_model
    from levanter.models.vocab import extend_vocab

    pretrained, params = load_final_model(path, ema=ema)
    shape = ("hidden_dim", "intermediate_dim", "num_heads", "num_kv_heads", "num_layers", "tie_embeddings")
    differ = [f"{k}: {getattr(pretrained, k)} != {getattr(config, k)}" for k in shape
              if getattr(pretrained, k) != getattr(config, k)]
    if differ:
        raise ValueError(f"initialize_from {path}: the trained model's shape differs from model= ({'; '.join(differ)})")
    return extend_vocab(params, config.vocab_size)


def initialize_to_dict(init: InitializeFrom | None) -> dict[str, Any] | None:
    """JSON-ready form of ``init``, tagged with its kind."""
    if init is None:
        return None
    kind = next(k for k, cls in _KINDS.items() if isinstance(init, cls))
    return {"kind": kind, **dataclasses.asdict(init)}


def initialize_from_dict(data: Mapping[str, Any] | None) -> InitializeFrom | None:
    """Inverse of :func:`initialize_to_dict`."""
    if data is None:
        return None
    fields = dict(data)
    kind = fields.pop("kind", None)
    if kind not in _KINDS:
        raise ValueError(f"initialize_from kind must be one of {sorted(_KINDS)}, got {kind!r}")
    return _KINDS[kind](**fields)
