"""``chat_eval()``: the assistant-token loss of trained models on held-out conversations (a step).

Each model's final parameters are scored on the ``validation`` split of a tokenized chat dataset:
the mean next-token cross entropy over mask-on targets only (the assistant's tokens, never the
user's, never across a conversation boundary), the same loss the fine-tune minimises. A model
whose vocabulary lacks the chat template's special tokens (a pretrained model) is scored with its
vocabulary grown as a fine-tune would start it (old rows kept, new rows the mean of the old).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from marin.execution.lazy import Lazy
from marin.execution.step import InvalidStep, Step

__all__ = ["ChatEval", "ChatEvalConfig", "chat_eval", "chat_eval_step", "chat_loss"]

RESULTS_FILE = "eval_results.json"


@dataclass(frozen=True)
class ChatEvalConfig:
    """Which models, on which chat data, over how many validation windows."""

    models: tuple[tuple[str, Any], ...]
    """``(label, training step output)`` pairs."""
    data: Any
    """A tokenized chat dataset (step, handle or folder)."""
    seq_len: int = 256
    batch_size: int = 16
    max_batches: int = 16

    def __post_init__(self) -> None:
        if not self.models:
            raise ValueError("models must name at least one trained model")
        labels = [label for label, _m in self.models]
        if len(set(labels)) != len(labels):
            raise ValueError(f"model labels must be unique, got {labels}")
        for name in ("seq_len", "batch_size", "max_batches"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")


def chat_loss(model_path: str, data_path: str, *, seq_len: int, batch_size: int, max_batches: int) -> dict[str, float]:
    """``{"loss", "targets"}``: the mask-on mean cross entropy of the model at ``model_path``."""
    import dataclasses

    import jax
    import jax.numpy as jnp
    import numpy as np

    from levanter.data import DatasetSpec, data_vocab_size, eval_batches
    from levanter.generate import load_final_model
    from levanter.models.llama import transformed_llama
    from levanter.models.vocab import extend_vocab
    from levanter.trainer import loss_fn

    config, params = load_final_model(model_path)
    specs = (DatasetSpec(data_path),)
    vocab = data_vocab_size(specs)
    config = dataclasses.replace(config, vocab_size=vocab, max_seq_len=max(config.max_seq_len, seq_len))
    params = extend_vocab(params, vocab)
    model = transformed_llama(config)
    batches = eval_batches(specs, seq_len=seq_len, batch_size=batch_size, max_batches=max_batches)
    if not batches:
        raise ValueError(f"{data_path}: no validation conversations to evaluate on")
    mean = jax.jit(lambda p, b: loss_fn(model, p, b, jnp.float32))
    total, count = 0.0, 0
    for batch in batches:
        if batch.ndim != 3:
            raise ValueError(f"{data_path} is not a tokenized chat dataset (no loss mask)")
        mask, seg = batch[:, 1], batch[:, 2]
        n = int(np.sum((mask[:, 1:] > 0) & (seg[:, 1:] == seg[:, :-1]) & (seg[:, 1:] > 0)))
        total += float(mean(params, jnp.asarray(batch))) * n
        count += n
    return {"loss": total / max(count, 1), "targets": count}


def chat_eval_step(config: ChatEvalConfig, output_path: str) -> None:
    """Step function: score every model; write ``eval_results.json`` and print the table."""
    from rigging import filesystem as fs

    results = {label: chat_loss(str(path), str(config.data), seq_len=config.seq_len, batch_size=config.batch_size,
                                max_batches=config.max_batches)
               for label, path in config.models}
    fs.atomic_write(fs.join(output_path, RESULTS_FILE), json.dumps(results, indent=2, sort_keys=True).encode())
    width = max(len(label) for label in results)
    print(f"{'model':{width}s}  assistant-token loss (held-out conversations)")
    for label, r in results.items():
        print(f"{label:{width}s}  {r['loss']:.4f} nats over {r['targets']} targets")


@dataclass(frozen=True, eq=False)
class ChatEval(Lazy):
    """Handle to a chat evaluation step; its output holds ``eval_results.json``."""

    name: str
    config: ChatEvalConfig

    def _build(self) -> Step:
        return Step(name=self.name, fn=chat_eval_step, config=self.config)


def chat_eval(name: str, models: Mapping[str, Any], data: Any, *, seq_len: int = 256, batch_size: int = 16,
              max_batches: int = 16) -> ChatEval:
    """Evaluate ``{label: trained model}`` on the held-out conversations of ``data`` (mask-on loss)."""
    try:
        config = ChatEvalConfig(models=tuple(models.items()), data=data, seq_len=seq_len, batch_size=batch_size,
                                max_batches=max_batches)
    except ValueError as e:
        raise InvalidStep(f"chat_eval {name!r}: {e}") from None
    return ChatEval(name, config)
