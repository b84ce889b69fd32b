"""``make train-nano`` (``python -m experiments.train_nano``) end to end, then again with no work (issue 4).

The first run (from an empty prefix) is shared with ``test_ci_cache`` through
``testsupport.e2e.nano_prefix``; it trains 400 steps of the nano Llama (about 40 s on 2 CPU
cores). Quality bar: the validation loss must be below half the unigram-entropy baseline of the
same validation tokens (on the bundled corpus it ends near 0.6 against about 5.3 nats/token).
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest

from marin.execution.store.records import StepRecord
from marin.report.outputs import read_tokenized
from testsupport.e2e import clean_env, events, marin, nano_prefix, run, shares_nano_store, success_records

TASKS = ("story_qa", "story_place", "story_ending", "story_cloze", "story_text")
STEPS = ("raw/tinystories-synthetic", "tokenizers/marin-bpe-2k", "tokenized/tinystories-synthetic",
         "checkpoints/marin-nano", "tasks/story", *(f"evals/checkpoints/marin-nano/{t}" for t in TASKS),
         "evals/marin-nano/story-tasks")
MARGIN = 0.5  # validation loss < MARGIN x unigram baseline


def _number(label: str, stdout: str) -> float:
    found = re.search(rf"^{label}\s+([0-9.]+) nats/token", stdout, re.M)
    assert found, f"no {label!r} line in:\n{stdout}"
    return float(found.group(1))


def _task_lines(stdout: str) -> dict[str, dict[str, float]]:
    """``{task: {metric: value}}`` of the ``task <name> <metric> <value> [± <stderr>], ...`` lines."""
    found = {}
    for task, shown in re.findall(r"^task (\S+)\s+(.*)$", stdout, re.M):
        found[task] = {m: float(v) for m, v in re.findall(r"(\w+) ([0-9.e+-]+)(?: ± [0-9.e+-]+)?(?:, |$)", shown)}
    return found


@shares_nano_store
@pytest.mark.slow
def test_train_nano_runs_end_to_end_then_does_no_work(tmp_path_factory: pytest.TempPathFactory) -> None:
    prefix, first = nano_prefix(tmp_path_factory)
    assert first.returncode == 0, first.describe()
    out = first.stdout

    # Every stage ran (the prefix was empty) and finished.
    assert sorted(events(out, "ran")) == sorted(STEPS), first.describe()
    # Where the outputs are.
    assert f"outputs under {prefix}" in out, out
    for step in STEPS:
        line = next((li for li in out.splitlines() if li.strip().startswith(step + " ")), None)
        assert line is not None, f"no output line for {step}:\n{out}"
        path = line.split()[-1]
        assert path.startswith(str(prefix / step) + "-") and StepRecord(path).is_done(), line
    # Losses against the baseline.
    train = _number("final training loss", out)
    val = _number("final validation loss", out)
    baseline = _number("unigram baseline", out)
    assert all(math.isfinite(x) and x > 0 for x in (train, val, baseline)), (train, val, baseline)
    assert val < MARGIN * baseline, f"validation loss {val} is not below {MARGIN} x unigram baseline {baseline}"
    # A short sample that continues the prompt.
    sample = re.search(r"^sample> Once upon a time(.*)$", out, re.M)
    assert sample and len(sample.group(1).split()) >= 5, out
    # The model's scores on the story tasks, a line per task as the harness computed them.
    scores = _task_lines(out)
    assert sorted(scores) == sorted(TASKS), out
    assert all(0 <= scores[t]["acc"] <= 1 for t in ("story_qa", "story_place", "story_ending", "story_cloze")), scores
    assert 0 < scores["story_text"]["bits_per_byte"] < 8, scores
    # Then the run's report.
    report = re.search(r"^report: (\S+\.html)$", out, re.M)
    assert report and out.rstrip().endswith(report.group(0)) and Path(report.group(1)).is_file(), out
    print(f"nano: train {train:.3f}, validation {val:.3f}, unigram baseline {baseline:.3f} nats/token; "
          f"first run {first.seconds:.1f}s; story tasks {scores}")

    before = success_records(prefix)
    second = run([sys.executable, "-m", "experiments.train_nano"], env=clean_env(MARIN_PREFIX=str(prefix)))

    assert events(second.stdout, "start") == [] and events(second.stdout, "ran") == [], second.describe()
    assert re.search(rf"^plan: {len(STEPS)} steps: {len(STEPS)} cached$", second.stdout, re.M), second.describe()
    assert success_records(prefix) == before
    # Same numbers, read back from the cached outputs.
    assert _number("final validation loss", second.stdout) == val
    assert _number("unigram baseline", second.stdout) == baseline
    assert _task_lines(second.stdout) == scores
    # (How long the no-op run takes is measured in `make bench`, never asserted here: the steps it
    # did not run, above, are the promise.)
    print(f"no-op run {second.seconds:.1f}s (first run {first.seconds:.1f}s)")


@shares_nano_store
@pytest.mark.slow
def test_marin_sample_continues_a_prompt_with_the_trained_model(tmp_path_factory: pytest.TempPathFactory) -> None:
    prefix, first = nano_prefix(tmp_path_factory)
    assert first.returncode == 0, first.describe()
    env = clean_env(MARIN_PREFIX=str(prefix))
    by_name = marin("sample", "checkpoints/marin-nano", "--prompt", "Once upon a time", "-n", "24", env=env)
    text = by_name.stdout.strip()
    assert text.startswith("Once upon a time") and len(text.split()) >= 8, by_name.describe()
    # JAX's INFO lines about accelerator backends it did not find are not shown.
    assert "xla_bridge" not in by_name.stderr and "Unable to initialize backend" not in by_name.stderr, \
        by_name.describe()
    # Exactly this step's folder (other experiments in a shared prefix start with the same name).
    model_dir = next(d for d in prefix.glob("checkpoints/marin-nano-*") if re.fullmatch(r"marin-nano-[0-9a-f]{16}", d.name))
    by_path = marin("sample", str(model_dir), "--prompt", "Once upon a time", "-n", "24", env=env)
    assert by_path.stdout.strip() == text  # greedy decoding: the same model gives the same text
    missing = marin("sample", "checkpoints/no-such-model", "--prompt", "x", env=env, check=False)
    assert missing.returncode == 2 and "checkpoints/no-such-model" in missing.stderr
    assert "Traceback" not in missing.stderr


@shares_nano_store
@pytest.mark.slow
def test_marin_show_summarises_the_nano_model(tmp_path_factory: pytest.TempPathFactory) -> None:
    prefix, first = nano_prefix(tmp_path_factory)
    assert first.returncode == 0, first.describe()
    shown = marin("show", "checkpoints/marin-nano", env=clean_env(MARIN_PREFIX=str(prefix))).stdout
    assert "0x1." not in shown and re.search(r"^    learning_rate\s+0\.003$", shown, re.M), shown
    assert re.search(r"^training\n  steps\s+400\n", shown, re.M), shown
    # The placeholder vocabulary of llama_nano, and the one it trained with: its data's.
    trained = re.search(r"^    vocab_size\s+4096 → ([\d,]+) as trained: the tokenized data's vocabulary replaces it "
                        r"\(data\.vocab_from_data\)$", shown, re.M)
    data = next(p for p in prefix.glob("tokenized/tinystories-synthetic-*") if re.fullmatch(r".*-[0-9a-f]{16}", p.name))
    assert trained and int(trained.group(1).replace(",", "")) == read_tokenized(str(data)).vocab_size, shown
