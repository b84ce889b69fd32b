"""A model ready to generate with: its parameters, tokenizer, end tokens and chat template, read from
a training run's output (final or a kept checkpoint, LoRA folded), an exported Hugging Face folder,
or a Hugging Face model id in the local hub cache. ``generations(...)`` steps and ``marin serve``
both load through :func:`load_generation_model`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from levanter.config import ComputeDtype
from rigging import filesystem as fs

__all__ = ["GenerationModel", "ModelNotFound", "load_generation_model"]

TOKENIZER_FILE = "tokenizer.json"
"""The tokenizer beside a training run's model, and inside an exported folder."""


class ModelNotFound(FileNotFoundError):
    """Nothing to generate with where the reference points; the message names it and why."""


@dataclass(frozen=True)
class GenerationModel:
    """A loaded model and what generating with it needs."""

    name: str
    """What it is called (the reference it was loaded from)."""
    config: Any
    """Its ``ModelConfig``."""
    params: Any
    """Its parameters (stacked layout)."""
    tokenizer: Any
    """Its ``tokenizers.Tokenizer``."""
    end_ids: tuple[int, ...]
    """Token ids that end a completion (the document end and, for a chat model, its turn end)."""
    chat_template: Any = None
    """Its chat template: the folder's own in Hugging Face's layout (``HfChatTemplate``), else the
    project's ``ChatTemplate`` of a model fine-tuned on chats, else None."""

    @property
    def context(self) -> int:
        """Positions the model attends over."""
        return int(self.config.max_seq_len)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (special tokens written in it are kept as single tokens)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Any) -> str:
        """Text of token ids (special tokens shown)."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def engine(self, *, slots: int, max_len: int | None = None, steps_per_sync: int = 8,
               compute_dtype: ComputeDtype = ComputeDtype.FLOAT32, top_logprobs: int = 0) -> Any:
        """A ``levanter.inference.Engine`` over this model (``max_len`` None: the whole context;
        ``top_logprobs``: the most alternatives a request may ask for at each token)."""
        from levanter.inference import Engine

        model = self.config.build(compute_dtype.jnp)
        return Engine(model, self.params, slots=slots, max_len=max_len or self.context,
                      steps_per_sync=steps_per_sync, decode_text=self.decode, top_logprobs=top_logprobs)


def load_generation_model(ref: str, *, step: int | None = None, ema: bool = False) -> GenerationModel:
    """The model ``ref`` names: a training run's output folder (its final parameters, or checkpoint
    ``step``; ``ema`` for its average), a Hugging Face folder (``config.json`` and safetensors), or a
    Hugging Face model id read from the hub cache.

    Raises:
        ModelNotFound: ``ref`` is none of these, lacks a tokenizer, or ``step`` is not kept.
        TemplateError: its chat template cannot be read or compiled (the file named).
    """
    from levanter.compat.hf_checkpoint import SAFETENSORS_FILE, HfCheckpointNotFound, resolve_hf_folder

    if fs.exists(ref) and not fs.exists(fs.join(ref, SAFETENSORS_FILE)) and not fs.glob(fs.join(ref, "*.safetensors")):
        return _from_run(ref, step, ema)
    if step is not None or ema:
        raise ModelNotFound(f"{ref}: a Hugging Face model has no checkpoints or average (step={step}, ema={ema})")
    try:
        folder = resolve_hf_folder(ref)
    except HfCheckpointNotFound as e:
        raise ModelNotFound(str(e)) from None
    return _from_hf(ref, folder)


def _from_run(ref: str, step: int | None, ema: bool) -> GenerationModel:
    from levanter.generate import load_model

    try:
        config, params = load_model(ref, step, ema=ema)
    except FileNotFoundError as e:
        raise ModelNotFound(str(e)) from None
    return _with_tokenizer(ref, ref, config, params)


def _from_hf(ref: str, folder: str) -> GenerationModel:
    import jax.numpy as jnp

    from levanter.compat.hf_checkpoint import llama_config_from_hf, load_hf_params, read_hf_config

    config = llama_config_from_hf(read_hf_config(folder), source=fs.join(folder, "config.json"))
    params = {module: {k: jnp.asarray(v) for k, v in leaves.items()}
              for module, leaves in load_hf_params(folder, config).items()}
    return _with_tokenizer(ref, folder, config, params)


def _with_tokenizer(ref: str, folder: str, config: Any, params: Any) -> GenerationModel:
    from tokenizers import Tokenizer

    from levanter.models.layout import is_per_layer, stack_layers
    from marin.experiment.chat.hf_template import model_chat_template
    from marin.experiment.data.tokenizer import EOS_TOKEN

    path = fs.join(folder, TOKENIZER_FILE)
    if not fs.exists(path):
        raise ModelNotFound(f"{path}: no tokenizer beside the model (a train_lm output or an export_hf folder has one)")
    tokenizer = Tokenizer.from_str(fs.read_text(path))
    template = model_chat_template(folder)
    ends = [tokenizer.token_to_id(t) for t in (EOS_TOKEN, template.end_token if template else None) if t]
    if is_per_layer(params):
        params = stack_layers(params)
    return GenerationModel(ref, config, params, tokenizer, tuple(sorted({i for i in ends if i is not None})), template)
