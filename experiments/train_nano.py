"""The default graph: bundled corpus -> trained tokenizer -> tokenized shards -> nano Llama -> story tasks.

``make train-nano`` (or ``python -m experiments.train_nano``) runs it, then prints where the
outputs are, the final training and validation loss beside the unigram baseline, a sample, the
model's scores on the five story tasks (benchmarks generated from stories it never saw, run
through the lm-evaluation-harness) and the path of the run's HTML report. A second run finds every
step cached and does no work.
"""

from __future__ import annotations

import json
import os
import sys

from experiments.llama import llama_nano
from experiments.marin_tokenizer import corpus, marin_tokenizer
from levanter.checkpoint import CheckpointConfig
from levanter.optim import AdamConfig
from marin.experiment import evaluate, story_tasks, tokenized, train_lm

tinystories = tokenized(name="tokenized/tinystories-synthetic", source=corpus, tokenizer=marin_tokenizer)

# ARC-, PIQA-, HellaSwag-, LAMBADA- and WikiText-shaped tasks about held-out stories; a step per task.
story = story_tasks("tasks/story")

nano_model = train_lm(
    name="checkpoints/marin-nano",
    version="v1",
    model=llama_nano,
    optimizer=AdamConfig(learning_rate=3e-3, weight_decay=0.1, warmup=20, min_lr_ratio=0.1),
    datasets={tinystories: 1.0},
    batch_size=16,
    seq_len=256,
    num_train_steps=400,
    eval_every=100,
    # The ARC-shaped task during training too (a curve in metrics.jsonl), on 50 of its documents.
    eval_tasks=[story.task("story_qa")],
    eval_task_limit=50,
    checkpoint=CheckpointConfig(save_every=100),
)

nano_tasks = evaluate("evals/marin-nano/story-tasks", nano_model, tasks=story)

steps = [nano_model, nano_tasks]

PROMPT = "Once upon a time"


def main() -> int:
    """Run the graph and report what it made."""
    from marin.cli.display import make_reporter, summary_table
    from marin.execution.step_runner import StepRunner
    from marin.execution.store.roots import GcRoot, register_root
    from marin.experiment.evaluation.results import read_eval_results, score_lines
    from marin.experiment.training.sampling import sample_text
    from marin.experiment.training.train import unigram_entropy
    from marin.report.run_report import write_run_report
    from rigging import filesystem as fs

    runner = StepRunner(reporter=make_reporter())
    result = runner.run(steps)
    if result.plan is not None:  # a GC root, as `marin run experiments/train_nano.py` registers it
        register_root(result.prefix, GcRoot.for_run([os.path.relpath(__file__)], (p.output_name for p in result.plan.steps)))
    print(summary_table(result))
    report = write_run_report(result, runner.store)
    if not result.ok:
        for failed in result.failed:
            print(f"failed: {failed.name}: {failed.error}\n  log: {failed.log_path}", file=sys.stderr)
        print(f"report: {report}")
        return 1
    model_out = result.by_name(nano_model.name).output_path
    data_out = result.by_name(tinystories.name).output_path
    summary = json.loads(fs.read_text(fs.join(model_out, "train_summary.json")))
    baseline = unigram_entropy(data_out, "validation")
    print(f"\noutputs under {result.prefix}")
    for outcome in result.steps:
        print(f"  {outcome.name:34s} {outcome.output_path}")
    print(f"final training loss   {summary['final_loss']:.3f} nats/token")
    val = summary.get("val_loss")
    print(f"final validation loss {val:.3f} nats/token" if val is not None else "final validation loss: none (validation split too small)")
    print(f"unigram baseline      {baseline:.3f} nats/token (validation split)")
    print(f"sample> {PROMPT}{sample_text(model_out, PROMPT, max_new_tokens=48)}")
    scores = read_eval_results(result.by_name(nano_tasks.name).output_path)
    for line in score_lines(scores) if scores is not None else []:
        print(line)
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
