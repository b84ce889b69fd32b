"""A TPE sweep of the nano model: learning rate and warmup, eight trials two at a time, the best evaluated.

Each round of the sweep is a step: it reads the objectives of the trials before it (their
validation loss), asks Optuna's TPE for the next two, and expands into those two training steps
and the next round. ``best(sweep)`` waits for every trial, copies the one with the lowest validation
loss, and is scored on held-out stories like any trained model. Everything is cached: a rerun
trains nothing, and a sweep killed mid-way is finished by a rerun that repeats no finished trial
and proposes what an uninterrupted run would have.

    marin plan experiments/tutorials/sweep_nano.py          # "expands after sweeps/nano-tpe/round-0"
    marin run experiments/tutorials/sweep_nano.py
    marin compare experiments/tutorials/sweep_nano.py --sort val_loss
    python -m experiments.tutorials.sweep_nano              # the same, then prints the comparison
"""

from __future__ import annotations

from experiments.llama import llama_nano
from experiments.scale import sized
from experiments.train_nano import tinystories
from experiments.tutorials.cooldown_sweep import held_out
from levanter.optim import AdamConfig
from marin.experiment import evaluate
from marin.experiment.sweeps.sweep import best, sweep

nano_sweep = sweep(
    "sweeps/nano-tpe",
    base=dict(version="v1", model=llama_nano, optimizer=AdamConfig(learning_rate=3e-3, weight_decay=0.1, warmup=sized(10, 1),
                                                                    min_lr_ratio=0.1),
              datasets={tinystories: 1.0}, batch_size=8, seq_len=128, num_train_steps=sized(80, 8), eval_every=0),
    space={"optimizer.learning_rate": ("log_uniform", 5e-4, 5e-2), "optimizer.warmup": ("int", 0, sized(30, 3))},
    # Smoke size (experiments.scale): three trials (two rounds of up to two) of a tenth of the steps.
    method="tpe", trials=sized(8, 3), parallel=2, seed=0, objective="val_loss",
)

best_nano = best(nano_sweep)
best_scored = evaluate("evals/sweeps/nano-tpe-best", best_nano, {"held-out": held_out, "tinystories": tinystories})

steps = [best_scored]


def main() -> int:
    """Run the sweep, then print its trials (best first) and the winner's scores."""
    import json

    from marin.cli.display import make_reporter, summary_table
    from marin.execution.step_runner import StepRunner
    from marin.report.compare import compare_plan
    from rigging import filesystem as fs

    runner = StepRunner(reporter=make_reporter())
    result = runner.run(steps)
    print(summary_table(result))
    if not result.ok:
        return 1
    print(compare_plan(runner.plan(steps, explain=False)).sorted_by("val_loss").to_markdown())
    chosen = json.loads(fs.read_text(fs.join(result.by_name(best_nano.name).output_path, "best.json")))
    scores = json.loads(fs.read_text(fs.join(result.by_name(best_scored.name).output_path, "eval_results.json")))
    print(f"best: {chosen['name']} {chosen['params']} val_loss {chosen['objective']:.4f}; held-out bits/byte "
          f"{scores['results']['held-out']['bits_per_byte']:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
