"""A cooldown sweep: one warmup-stable-decay run, cooldowns branched off its stable phase, all evaluated.

The stable run trains the nano model with a WSD schedule (warmup, then the peak rate, then a
linear decay over its last steps) and keeps a checkpoint every 50 steps. Each cooldown branch
starts from one of those checkpoints and decays the rate to the floor over ``COOLDOWN`` steps: it
is the WSD run of ``N + COOLDOWN`` steps whose decay starts at ``N``, bit for bit, without
retraining the first ``N`` steps. Every run is scored on the tokenized validation split and on
held-out stories (raw text, tokenized with the model's own tokenizer).

    marin run experiments/tutorials/cooldown_sweep.py      # build; the report compares the runs
    marin compare experiments/tutorials/cooldown_sweep.py --sort held-out.bpb
    python -m experiments.tutorials.cooldown_sweep         # the same, then prints the comparison
"""

from __future__ import annotations

from experiments.llama import llama_nano
from experiments.scale import sized
from experiments.train_nano import tinystories
from levanter.checkpoint import CheckpointConfig
from levanter.optim import AdamConfig
from marin.experiment import bundled_corpus, checkpoint, train_lm

# Smoke size (experiments.scale): one branch (the kind of step a cooldown adds; each more costs a
# training and an evaluation), the runs a tenth as long, evaluated and checkpointed every 10 steps.
STABLE_STEPS = sized(300, 30)
COOLDOWN = sized(40, 4)
BRANCH_AT = sized((100, 150, 200), (20,))
EVERY = sized(50, 10)
PEAK = 3e-3

held_out = bundled_corpus(name="raw/tinystories-held-out", num_stories=sized(200, 40), seed=1, num_shards=1)
evals = {"tinystories": tinystories, "held-out": held_out}


def wsd(decay_steps: int) -> AdamConfig:
    """The sweep's optimizer: the same warmup and peak everywhere, a linear decay over ``decay_steps``."""
    return AdamConfig(learning_rate=PEAK, weight_decay=0.1, warmup=sized(20, 2), min_lr_ratio=0.1, schedule="wsd",
                      decay=decay_steps, decay_shape="linear")


stable = train_lm(name="checkpoints/nano-wsd", version="v1", model=llama_nano, optimizer=wsd(sized(60, 6)),
                  datasets={tinystories: 1.0}, batch_size=16, seq_len=256, num_train_steps=STABLE_STEPS,
                  eval_every=EVERY, checkpoint=CheckpointConfig(save_every=EVERY, keep_every=EVERY), evals=evals)

cooldowns = [
    train_lm(name=f"checkpoints/nano-wsd-cooldown-{n}", version="v1", model=llama_nano, optimizer=wsd(COOLDOWN),
             datasets={tinystories: 1.0}, batch_size=16, seq_len=256, num_train_steps=n + COOLDOWN,
             eval_every=EVERY, checkpoint=CheckpointConfig(save_every=EVERY), initialize_from=checkpoint(stable, step=n),
             evals=evals)
    for n in BRANCH_AT
]

steps = [stable, *cooldowns]


def main() -> int:
    """Build the sweep, then print the comparison of its runs (lowest held-out bits per byte first)."""
    from marin.cli.display import make_reporter, summary_table
    from marin.execution.step_runner import StepRunner
    from marin.report.compare import compare_plan

    runner = StepRunner(reporter=make_reporter())
    result = runner.run(steps)
    print(summary_table(result))
    if not result.ok:
        return 1
    comparison = compare_plan(runner.plan(steps, explain=False)).sorted_by("held-out.bpb")
    print(comparison.to_markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
