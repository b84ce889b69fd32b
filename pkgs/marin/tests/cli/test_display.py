"""The runner's display: progress records of running steps, the run's remaining estimate, bars."""

from __future__ import annotations

import io
import re

import pytest
from steps_for_tests import ProgressingConfig, progressing

from marin.cli.display import LiveReporter, PlainReporter, summary_table
from marin.execution.core.step import Step
from marin.execution.run.runner import StepRunner

ROUND_S = 0.1
"""Seconds between two rounds of progress lines (the runner polls its steps every 0.1 s)."""


def _step(version: str = "v1", units: int = 16) -> Step:
    # About 0.6 s of units: several of the reporters' rounds (ROUND_S, the runner's own poll of 0.1 s
    # at the least) while the step works.
    return Step(name="work/p", fn=progressing, config=ProgressingConfig(units=units, seconds_per_unit=0.04),
                version=version)


def _lines_before_finish(text: str, name: str) -> list[str]:
    lines = text.splitlines()
    end = next(i for i, line in enumerate(lines) if line.startswith(f"[ran] {name}"))
    return lines[:end]


def test_progress_lines_appear_while_the_step_runs_then_the_estimate_counts_down(tmp_path):
    prefix = str(tmp_path / "store")
    out = io.StringIO()
    runner = StepRunner(prefix=prefix, max_parallel=1, strict_env=False,
                        reporter=PlainReporter(out, progress_interval=ROUND_S))
    assert runner.run([_step()]).ok
    before = _lines_before_finish(out.getvalue(), "work/p")
    counts = [int(m.group(1)) for line in before
              for m in [re.match(r"\[progress\] work/p: step (\d+)/16 \(\d+%\), loss [0-9.]+, 2\.0k tokens/s", line)] if m]
    # Seen from the runner's process, while the step's own process was still working.
    assert counts and min(counts) < 16, out.getvalue()
    assert counts == sorted(counts)
    # Never built before: no estimate in the plan; the remaining time comes from the step's own ETA.
    assert "no estimate (never built before): work/p" in out.getvalue()
    assert not re.search(r"^estimate:", out.getvalue(), re.M)

    out2 = io.StringIO()
    runner.reporter = PlainReporter(out2, progress_interval=ROUND_S)
    result = runner.run([_step("v2")])  # a version bump: runs again, estimated from the first build
    text = out2.getvalue()
    assert re.search(r"^estimate: [0-9.]+s with -j 1 \(steps add up to [0-9.]+s; critical path work/p: ", text, re.M), text
    left = [m.group(1) for m in re.finditer(r"^\[progress\] run: about ([0-9.]+)s left$", text, re.M)]
    assert left, text
    # The run's HTML report carries the same estimate beside the actual time.
    from marin.report.collect import collect_run

    (reported,) = collect_run(result).steps
    (estimated,) = result.plan.estimate.steps.values()
    assert reported.estimate_s == estimated.seconds and "1 earlier build(s)" in reported.estimate_basis
    assert reported.duration_s is not None
    table = summary_table(result)
    assert re.search(r"^ran\s+work/p\s+[0-9a-f]{16}\s+[0-9.]+s\s+[0-9.]+s$", table, re.M), table
    assert table.splitlines()[0].split() == ["outcome", "step", "hash", "estimate", "time"]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_live_bars_show_the_step_count_on_a_terminal(tmp_path):
    out = _Terminal()
    reporter = LiveReporter(out)
    reporter._READ_S = 0.0
    runner = StepRunner(prefix=str(tmp_path / "store"), max_parallel=1, strict_env=False, reporter=reporter)
    assert runner.run([_step(units=12)]).ok
    reporter.close()
    text = out.getvalue()
    assert re.search(r"work/p .*step \d+/12 \(\d+%\), loss", text), text
    assert re.search(r"ran.* work/p in [0-9.]+s", text), text


@pytest.mark.slow
def test_training_progress_while_it_runs_then_cutoff_and_determinism_of_real_steps(tmp_path, lm_data_prefix):
    """The real data and training steps: progress lines during training; a tokenize refactor
    reuses the trained model; a forced retrain on CPU reports no nondeterminism (the volatile
    files named for training are all that differ between two builds)."""
    import dataclasses

    from levanter.checkpoint import CheckpointConfig
    from levanter.optim import AdamConfig, Schedule
    from marin.execution.core.lazy import lower
    from marin.execution.run.outcome import Outcome
    from marin.experiment.training.train import train_lm
    from testsupport import lm_graph

    def graph(version: str) -> Step:
        # The session's corpus, tokenizer and shards (copied below), the tiny model's shapes and
        # optimizer (programs compiled once for the suite); only the shards' version changes.
        data = dataclasses.replace(lower(lm_graph.data), version=version)
        return lower(train_lm(name="checkpoints/p", version="v1", model=lm_graph.TINY,
                              optimizer=AdamConfig(learning_rate=3e-3, warmup=2, schedule=Schedule.CONSTANT),
                              datasets={data: 1.0}, batch_size=4, seq_len=32, num_train_steps=100, eval_every=0,
                              checkpoint=CheckpointConfig(save_every=50)))

    assert lower(lm_graph.data).version == "v1"  # the shards as built: only training runs at first
    prefix = str(lm_graph.copy_prefix(lm_data_prefix, tmp_path / "store"))
    out = io.StringIO()
    runner = StepRunner(prefix=prefix, max_parallel=1, strict_env=False,
                        reporter=PlainReporter(out, progress_interval=0.2))
    first = runner.run([graph("v1")])
    assert first.ok, out.getvalue()
    assert first.by_name("tokenized/tiny").outcome is Outcome.CACHED
    before = _lines_before_finish(out.getvalue(), "checkpoints/p")
    steps = [int(m.group(1)) for line in before
             for m in [re.match(r"\[progress\] checkpoints/p: step (\d+)/100 \(\d+%\), loss [0-9.]+, ", line)] if m]
    assert steps and min(steps) < 100, out.getvalue()

    # The tokenize code "refactored": a version bump, the same shards. Training is not repeated.
    second = StepRunner(prefix=prefix, max_parallel=1, strict_env=False).run([graph("v2")])
    assert second.by_name("tokenized/tiny").outcome is Outcome.RAN
    assert second.by_name("checkpoints/p").outcome is Outcome.REUSED, second.by_name("checkpoints/p")

    # Training twice from the same inputs on CPU gives the same model: no nondeterminism reported.
    third = StepRunner(prefix=prefix, max_parallel=1, strict_env=False, force=["checkpoints/p"]).run([graph("v2")])
    retrained = third.by_name("checkpoints/p")
    assert retrained.outcome is Outcome.RAN and retrained.note is None, retrained.note
