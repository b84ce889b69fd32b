"""Preference training after SFT: reference log-probs scored once, DPO over three betas, each evaluated.

The fine-tuned nano model (``experiments/sft/sft_nano.py``) answers questions about stories. A
generated preference set asks it more of them (``story_preferences``: the story's fact chosen,
another story's fact rejected), tokenized with the same chat template (``preference_chat``). The
reference model's log-probs of every pair are one step (``reference_logprobs``), and the three
DPO runs read it: ``marin plan`` shows one reference step and three DPO steps, and a fourth beta
would score nothing again. Each DPO run logs the held-out pairs' reward accuracy from step 0 (0.5:
the policy is its reference) in its ``metrics.jsonl``, and is evaluated like any model on the
held-out conversations and the story text, beside the SFT model it started from::

    marin plan experiments/tutorials/dpo_nano.py
    marin run experiments/tutorials/dpo_nano.py
    marin compare experiments/tutorials/dpo_nano.py --sort tinystories.loss

A LoRA variant is one keyword away (``lora=LoraConfig(rank=8)``: only the adapters train, and the
base is the reference, scored in the step); ``merge_lora(...)`` folds its adapters into a model of
whole weights.
"""

from __future__ import annotations

from experiments.marin_tokenizer import marin_tokenizer
from experiments.scale import sized
from experiments.sft.sft_nano import SEQ_LEN, chat_data, sft_model
from experiments.train_nano import tinystories
from levanter.checkpoint import CheckpointConfig
from levanter.optim import AdamConfig
from marin.experiment import (
    DEFAULT_CHAT_TEMPLATE,
    dpo,
    evaluate,
    preference_chat,
    reference_logprobs,
    story_preferences,
)
from marin.experiment.posttrain.dpo import Dpo

BETAS = (0.1, 0.3, 1.0)

# Stories the SFT conversations did not show (they start at story 0 of the same corpus seed).
preferences = story_preferences("raw/story-preferences", num_pairs=sized(2000, 600), first_index=100_000)

preference_pairs = preference_chat("tokenized/story-preferences", source=preferences, tokenizer=marin_tokenizer,
                                   template=DEFAULT_CHAT_TEMPLATE, max_seq_len=SEQ_LEN, validation_fraction=0.1)

# Scored once by the SFT model; every beta reads it.
reference = reference_logprobs("reference/story-preferences/marin-nano-sft", sft_model, preference_pairs)


def dpo_run(beta: float) -> Dpo:
    """The DPO run of one beta: the SFT model trained on the pairs, compared with the one reference.

    Smoke size (experiments.scale): 16 steps, scored on the held-out pairs before the first and after the last.
    """
    return dpo(f"checkpoints/marin-nano-dpo-beta{beta}", sft_model, preference_pairs, beta=beta, reference=reference,
               optimizer=AdamConfig(learning_rate=sized(1e-4, 5e-4), weight_decay=0.0, warmup=2, schedule="linear",
                                    min_lr_ratio=0.0),
               batch_size=8, num_train_steps=sized(100, 16), eval_every=sized(25, 16), eval_batches=8,
               checkpoint=CheckpointConfig(save_every=sized(50, 16)))


dpo_models = {beta: dpo_run(beta) for beta in BETAS}

# Each model on the held-out conversations and the story text (the SFT model's are in experiments/sft).
evaluations = [evaluate(f"evals/story-chats/dpo-beta{beta}", model, {"story-chats": chat_data, "tinystories": tinystories})
               for beta, model in dpo_models.items()]

steps = [*evaluations]
