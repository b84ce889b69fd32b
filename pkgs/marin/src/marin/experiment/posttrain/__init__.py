"""After fine-tuning: preference data, reference log-probs, DPO, and models made by merging checkpoints.

* :func:`~marin.experiment.posttrain.data.preference_chat`: preference rows (JSON lines, Parquet,
  a Hugging Face dataset at a pinned revision) tokenized with the chat template, as pairs.
* :func:`~marin.experiment.posttrain.reference.reference_logprobs`: a frozen model's log-probs of
  every pair, a step of its own so a sweep over betas scores them once.
* :func:`~marin.experiment.posttrain.dpo.dpo`: preference training in levanter's loop (LoRA, EMA,
  checkpoints as any run); its output is a model like any other.
* :func:`~marin.experiment.posttrain.merge.merge_checkpoints` and
  :func:`~marin.experiment.posttrain.merge.merge_lora`: deterministic steps averaging cached
  checkpoints, or folding a LoRA run's adapters into its base.

``lora=LoraConfig(...)`` and ``ema=`` apply to ``train_lm`` (SFT) and ``dpo`` alike. Names load on
first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rigging.lazy import lazy_getattr

if TYPE_CHECKING:
    from levanter.ema import EmaConfig
    from levanter.lora import LoraConfig
    from marin.experiment.posttrain.data import preference_chat, preference_data
    from marin.experiment.posttrain.dpo import dpo
    from marin.experiment.posttrain.merge import merge_checkpoints, merge_lora
    from marin.experiment.posttrain.reference import reference_logprobs

__all__ = ["EmaConfig", "LoraConfig", "dpo", "merge_checkpoints", "merge_lora", "preference_chat", "preference_data",
           "reference_logprobs"]

_WHERE = {
    "EmaConfig": "levanter.ema",
    "LoraConfig": "levanter.lora",
    "preference_chat": "marin.experiment.posttrain.data",
    "preference_data": "marin.experiment.posttrain.data",
    "dpo": "marin.experiment.posttrain.dpo",
    "merge_checkpoints": "marin.experiment.posttrain.merge",
    "merge_lora": "marin.experiment.posttrain.merge",
    "reference_logprobs": "marin.experiment.posttrain.reference",
}

__getattr__ = lazy_getattr(__name__, _WHERE)
