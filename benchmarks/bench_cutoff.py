"""Early cutoff, side by side: ``python -m benchmarks.bench_cutoff``.

A corpus -> tokenizer -> tokenize -> train graph is built once. Then the tokenize step's code is
"refactored": its version is bumped, and its output comes out byte-identical. The rebuild that
follows is timed twice, each from its own copy of that prefix:

  * full rebuild: early cutoff off (the behaviour before it: everything downstream of the
    bumped step runs again, so the model is retrained);
  * early cutoff: the tokenize step runs, its output digest equals the earlier one, and the
    training step is reused (a verified copy of the earlier build) instead of retrained.

Goal: the early-cutoff rebuild takes at most 0.1x the full rebuild's wall time.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import tempfile
import time

from levanter.checkpoint import CheckpointConfig
from levanter.models.llama import LlamaConfig
from levanter.optim import AdamConfig
from marin.execution.core.lazy import lower
from marin.execution.core.step import Step
from marin.execution.run.outcome import Outcome, RunResult
from marin.execution.run.runner import StepRunner
from marin.experiment.data import bundled_corpus, tokenized, trained_tokenizer
from marin.experiment.training.train import train_lm

GOAL = 0.1
MODEL = LlamaConfig(vocab_size=512, hidden_dim=32, intermediate_dim=64, num_heads=2, num_kv_heads=2, num_layers=1,
                    max_seq_len=64)


class _Quiet:
    """A reporter that says nothing (the numbers are the report)."""

    def planned(self, plan: object) -> None: ...
    def started(self, planned: object) -> None: ...
    def waiting(self, planned: object, holder: str) -> None: ...
    def accelerator_wait(self, planned: object, line: str) -> None: ...
    def finished(self, outcome: object) -> None: ...
    def tick(self, running: object) -> None: ...


def _graph(tokenize_version: str) -> Step:
    corpus = bundled_corpus(name="raw/bench-cutoff", num_stories=2000, num_shards=4)
    tokenizer = trained_tokenizer(name="tokenizers/bench-cutoff", source=corpus, vocab_size=512)
    # The tokenize step with its version bumped, as after a refactor of the tokenize code.
    data = dataclasses.replace(lower(tokenized(name="tokenized/bench-cutoff", source=corpus, tokenizer=tokenizer)),
                               version=tokenize_version)
    model = train_lm(name="checkpoints/bench-cutoff", version="v1", model=MODEL,
                     optimizer=AdamConfig(learning_rate=3e-3, weight_decay=0.1, warmup=5),
                     datasets={data: 1.0}, batch_size=8, seq_len=64, num_train_steps=100, eval_every=50,
                     checkpoint=CheckpointConfig(save_every=50))
    return lower(model)


def _run(prefix: str, version: str, *, early_cutoff: bool) -> tuple[float, RunResult]:
    runner = StepRunner(prefix=prefix, max_parallel=2, strict_env=False, reporter=_Quiet(),
                        early_cutoff=early_cutoff)
    start = time.perf_counter()
    result = runner.run([_graph(version)])
    took = time.perf_counter() - start
    runner.close()
    if not result.ok:
        raise RuntimeError(f"benchmark run failed: {[(s.name, s.error) for s in result.failed]}")
    return took, result


def main() -> None:
    logging.getLogger().setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="bench-cutoff-") as root:
        base = os.path.join(root, "base")
        built, _ = _run(base, "v1", early_cutoff=True)
        rows = []
        for label, cutoff in (("full rebuild (early cutoff off)", False), ("early cutoff", True)):
            prefix = os.path.join(root, "cutoff" if cutoff else "full")
            shutil.copytree(base, prefix)
            took, result = _run(prefix, "v2", early_cutoff=cutoff)
            outcome = {s.name: s.outcome for s in result.steps}
            rows.append((label, took, outcome["tokenized/bench-cutoff"], outcome["checkpoints/bench-cutoff"]))
    full, cut = rows[0][1], rows[1][1]
    assert rows[1][3] is Outcome.REUSED, rows[1]
    print("== early cutoff: tokenize step refactored (version bump, identical output) ==")
    print(f"first build of the graph: {built:.1f}s")
    print(f"{'rebuild':34s} {'wall':>8s}  tokenize  train")
    for label, took, tok, train in rows:
        print(f"{label:34s} {took:7.1f}s  {tok.value:8s}  {train.value}")
    ratio = cut / full
    print(f"early cutoff / full rebuild: {ratio:.3f}x (goal <= {GOAL}x) {'OK' if ratio <= GOAL else 'MISSED'}")


if __name__ == "__main__":
    main()
