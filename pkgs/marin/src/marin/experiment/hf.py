"""Models in and out of the Hugging Face layout: ``export_hf(...)`` steps and ``hf_checkpoint(...)`` starts.

An exported folder is what ``transformers`` loads as ``LlamaForCausalLM`` and ``AutoTokenizer``:
``config.json`` and ``model.safetensors`` (see ``levanter.compat.hf_checkpoint``), plus the
training step's ``tokenizer.json`` with ``tokenizer_config.json`` and ``special_tokens_map.json``,
and a chat-trained run's ``chat_template.json`` (the project's template, which ``marin serve`` and
``marin sample --chat`` read from the folder).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from levanter.initialize import HfCheckpoint
from marin.execution.core.lazy import StepHandle
from marin.experiment.data.sources import is_hf_id, normalize_path
from marin.experiment.training.models import FINAL
from rigging import filesystem as fs
from rigging.fields import added_field

__all__ = [
    "FINAL",
    "ExportHf",
    "ExportHfConfig",
    "HfCheckpoint",
    "export_hf",
    "export_hf_step",
    "hf_checkpoint",
    "write_hf_folder",
]

def _check_checkpoint(checkpoint: Any) -> None:
    if checkpoint == FINAL:
        return
    if not isinstance(checkpoint, int) or isinstance(checkpoint, bool) or checkpoint <= 0:
        raise ValueError(f"checkpoint must be {FINAL!r} or a positive step number, got {checkpoint!r}")


# --------------------------------------------------------------------------- export

def write_hf_folder(train_output: str, out_dir: str, checkpoint: str | int = FINAL, *, ema: bool = False) -> None:
    """Write the model of a ``train_lm`` output folder into ``out_dir`` in Hugging Face's layout.

    Args:
        train_output: a training step's output folder (``config.json``, ``final/``, ``checkpoints/``).
        out_dir: the folder to write (created; existing files of the same names are replaced).
        checkpoint: ``"final"`` for the final parameters, or the step of a kept checkpoint.
        ema: the run's average of its parameters (``ema=`` of its training) instead. A LoRA run's
            adapters are folded into its base (``levanter.generate.load_model``).

    Raises:
        FileNotFoundError: the parameters, the run's config or its tokenizer are missing.
    """
    from levanter.compat.hf_checkpoint import save_hf_model
    from levanter.generate import load_model

    # The chat package imports zephyr's datasets: loaded by an export, not by a graph that names one.
    from marin.experiment.chat.tokenize import TEMPLATE_FILE
    from marin.experiment.data.tokenizer import EOS_TOKEN

    _check_checkpoint(checkpoint)
    tokenizer_file = fs.join(train_output, "tokenizer.json")
    if not fs.exists(tokenizer_file):
        raise FileNotFoundError(f"{tokenizer_file}: no tokenizer beside the model (is this a train_lm output?)")
    tokenizer_json = fs.read_bytes(tokenizer_file)
    eos_id = _token_id(json.loads(tokenizer_json), EOS_TOKEN, tokenizer_file)
    config, params = load_model(train_output, None if checkpoint == FINAL else int(checkpoint), ema=ema)
    if fs.is_local(out_dir):
        fs.makedirs(out_dir)
    # Documents are packed with EOS between them, so EOS is also what the model saw before a document
    # starts: it doubles as the beginning-of-sequence token, as in GPT-2.
    save_hf_model(out_dir, config, params, bos_token_id=eos_id, eos_token_id=eos_id)
    fs.atomic_write(fs.join(out_dir, "tokenizer.json"), tokenizer_json)
    special = {"bos_token": EOS_TOKEN, "eos_token": EOS_TOKEN}
    tokenizer_config = {"tokenizer_class": "PreTrainedTokenizerFast", **special,
                        "model_max_length": config.max_seq_len, "clean_up_tokenization_spaces": False}
    fs.atomic_write(fs.join(out_dir, "tokenizer_config.json"), json.dumps(tokenizer_config, indent=2) + "\n")
    fs.atomic_write(fs.join(out_dir, "special_tokens_map.json"), json.dumps(special, indent=2) + "\n")
    # A chat-trained run's template goes with it (the file as training kept it): `marin serve` and
    # `marin sample --chat` on the export render turns, and stop at the turn's end, as the run did.
    # It is the project's format, not tokenizer_config's `chat_template`: our templates render under
    # other Jinja settings than transformers' (no trim_blocks), so a copy there could render differently.
    template = fs.join(train_output, TEMPLATE_FILE)
    if fs.exists(template):
        fs.atomic_write(fs.join(out_dir, TEMPLATE_FILE), fs.read_bytes(template))


def _token_id(tokenizer: dict[str, Any], token: str, source: str) -> int:
    for added in tokenizer.get("added_tokens", []):
        if added.get("content") == token:
            return int(added["id"])
    raise ValueError(f"{source}: the tokenizer has no {token!r} token (the end-of-document token training used)")


@dataclass(frozen=True)
class ExportHfConfig:
    """What an export step reads: a trained model and which of its checkpoints."""

    model: Any
    """A ``train_lm`` handle (or step, or the path of a training output folder)."""
    checkpoint: str | int = FINAL
    """``"final"``, or the step number of a kept checkpoint."""
    ema: bool = added_field(default=False)
    """Export the run's average of its parameters instead."""

    def __post_init__(self) -> None:
        _check_checkpoint(self.checkpoint)


def export_hf_step(config: ExportHfConfig, output_path: str) -> None:
    """Step function: the model in Hugging Face's layout at ``output_path``."""
    write_hf_folder(str(config.model), output_path, config.checkpoint, ema=config.ema)


class ExportHf(StepHandle, fn=export_hf_step):
    """Handle to an export step; its output folder loads with ``transformers``."""


def export_hf(name: str, model: Any, checkpoint: str | int = FINAL, *, ema: bool = False,
              version: str = "v1") -> ExportHf:
    """A step writing ``model`` (a ``train_lm`` handle) as a Hugging Face ``LlamaForCausalLM`` folder.

    Args:
        name: the step's name (output at ``<prefix>/<name>-<hash>``).
        model: the training step whose parameters are exported (any model handle: a LoRA run's
            adapters are folded into its base).
        checkpoint: ``"final"`` or the step number of a checkpoint the run kept.
        ema: export the run's average of its parameters (``ema=`` of its training) instead.
    """
    return ExportHf(name=name, config=ExportHfConfig(model=model, checkpoint=checkpoint, ema=ema), version=version)


# --------------------------------------------------------------------------- import

def hf_checkpoint(repo: str, revision: str | None = None) -> HfCheckpoint:
    """Name an HF Llama checkpoint for ``train_lm(..., initialize_from=...)``.

    Args:
        repo: a Hub model id (``org/name``, read through the hub cache; ``HF_HUB_OFFLINE=1`` reads
            only the cache) or a folder holding ``config.json`` and safetensors weights. The step's
            identity holds the id and revision, or the folder's path (not its contents).
        revision: branch, tag or commit of a Hub id.
    """
    repo = normalize_path(repo)
    if revision is not None and not is_hf_id(repo):
        raise ValueError(f"revision applies to Hub model ids only, got revision={revision!r} for the folder {repo!r}")
    return HfCheckpoint(repo=repo, revision=revision)
