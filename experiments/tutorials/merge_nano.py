"""Checkpoint merging against a cooldown: a constant-rate run, the mean of its last checkpoints, and a decay branch.

The pretrained nano model (``make train-nano``) trains on at a constant learning rate (its own
peak, a fresh optimizer), keeping a checkpoint every few steps. Two ways to end such a run without
a decaying schedule fixed in advance:

* ``merge_checkpoints(..., last=4)``: the mean of its last four checkpoints, a step of its own
  (deterministic: rebuilt inputs that are identical are cut off like any step's), no training at all;
* a cooldown branch (``checkpoint(run, step=N - DECAY)``): the same run with its rate decayed to
  the floor over its last ``DECAY`` steps, as a warmup-stable-decay schedule would.

All three are scored on the tokenized validation split, beside the run's last checkpoint (the
run's own ``evals/`` step): Megatron-LM's WSM reports the merge matching the decay at none of its
cost::

    marin run experiments/tutorials/merge_nano.py
    marin compare experiments/tutorials/merge_nano.py --sort tinystories.loss
"""

from __future__ import annotations

from experiments.llama import llama_nano
from experiments.scale import sized
from experiments.train_nano import nano_model, tinystories
from levanter.checkpoint import CheckpointConfig
from levanter.optim import AdamConfig
from marin.experiment import checkpoint, evaluate, merge_checkpoints, train_lm

STEPS = sized(200, 40)
EVERY = sized(25, 5)
DECAY = sized(50, 10)
PEAK = 3e-3
evals = {"tinystories": tinystories}


def optimizer(decay: int | None) -> AdamConfig:
    """The run's optimizer: its peak throughout, or (a cooldown) decayed linearly over the last ``decay`` steps."""
    schedule = dict(schedule="constant") if decay is None else dict(schedule="wsd", decay=decay, decay_shape="linear")
    return AdamConfig(learning_rate=PEAK, weight_decay=0.1, warmup=sized(10, 2), min_lr_ratio=0.1, **schedule)


constant = train_lm(name="checkpoints/nano-constant", version="v1", model=llama_nano, optimizer=optimizer(None),
                    datasets={tinystories: 1.0}, batch_size=sized(16, 8), seq_len=sized(256, 128),
                    num_train_steps=STEPS, eval_every=0, initialize_from=checkpoint(nano_model),
                    checkpoint=CheckpointConfig(save_every=EVERY, keep_every=EVERY), evals=evals)

merged = merge_checkpoints("checkpoints/nano-constant-merge-last4", constant, last=4)
merged_eval = evaluate("evals/checkpoints/nano-constant-merge-last4", merged, evals)

cooldown = train_lm(name="checkpoints/nano-constant-cooldown", version="v1", model=llama_nano, optimizer=optimizer(DECAY),
                    datasets={tinystories: 1.0}, batch_size=sized(16, 8), seq_len=sized(256, 128),
                    num_train_steps=STEPS, eval_every=0, initialize_from=checkpoint(constant, step=STEPS - DECAY),
                    checkpoint=CheckpointConfig(save_every=EVERY), evals=evals)

steps = [constant, merged_eval, cooldown]
