"""Sweeps: a grid trains each trial once and a rerun none; a seeded TPE sweep proposes the same
trials twice, after a kill, and with two runners racing; best() picks the recorded minimum;
``marin compare`` shows the trials. Trials are cheap stand-ins (``sweep_trials``) whose loss is a
known function of their config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from fray.inprocess import InProcessClient
from levanter.initialize import TrainedModel
from levanter.models.llama import LlamaConfig
from levanter.optim import AdamConfig
from marin.execution.core.errors import InvalidStep
from marin.execution.core.graph import dependencies_of
from marin.execution.core.lazy import lower
from marin.execution.core.traits import traits_of
from marin.execution.run.outcome import Outcome
from marin.execution.run.runner import StepRunner
from marin.experiment.data import tokenized
from marin.experiment.evaluation.eval import evaluate
from marin.experiment.sweeps.space import Direction
from marin.experiment.sweeps.steps import PROPOSALS_FILE, RESULTS_FILE, best_trial
from marin.experiment.sweeps.sweep import best, sweep
from marin.experiment.training.train import TrainLm, checkpoint, train_lm
from testsupport import sweep_trials as toy

SPACE = {"lr": ("log_uniform", 1e-4, 1e-1), "warmup": ("int", 0, 10), "kind": ["a", "b"]}


def _toy_sweep(counter: str, *, sleep_at: int = 0, sleep: float = 0.0, **kwargs):
    base = toy.ToyTrial(name="unused", config=toy.ToyConfig(counter_dir=counter, sleep_at=sleep_at, sleep=sleep))
    options = {"space": SPACE, "method": "tpe", "trials": 8, "parallel": 2, "seed": 3, **kwargs}
    return sweep("sweeps/toy", base=base, **options)


def _in_process(prefix: str) -> StepRunner:
    return StepRunner(prefix=prefix, client=InProcessClient(), max_parallel=1, strict_env=False)


def _results(result, name: str = "sweeps/toy") -> list[dict]:
    """The trials a finished sweep recorded, in index order: (index, raw values, objective)."""
    document = json.loads(Path(result.by_name(f"{name}/results").output_path, RESULTS_FILE).read_text())
    return [{"index": t["index"], "raw": t["raw"], "objective": t["objective"]} for t in document["trials"]]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> list[dict]:
    """The trials of the seeded TPE sweep run start to end in one go."""
    root = tmp_path_factory.mktemp("uninterrupted")
    result = _in_process(str(root / "store")).run([_toy_sweep(str(root / "counter"))])
    assert result.ok, [(s.name, s.error) for s in result.failed]
    return _results(result)


def test_a_grid_of_four_trains_four_and_a_rerun_none_and_best_is_the_recorded_minimum(tmp_path):
    counter, prefix = str(tmp_path / "counter"), str(tmp_path / "store")
    base = toy.ToyTrial(name="unused", config=toy.ToyConfig(warmup=5, counter_dir=counter))
    sw = sweep("sweeps/grid", base=base, space={"lr": [1e-3, 1e-2], "kind": ["a", "b"]}, method="grid")
    winner = best(sw)
    result = _in_process(prefix).run([winner])
    assert result.ok, [(s.name, s.error) for s in result.failed]
    trials = [f"sweeps/grid/trial-{k}" for k in range(4)]
    assert toy.calls(counter) == dict.fromkeys(trials, 1)
    assert result.count(Outcome.RAN) == 4 + 3  # the trials, the round, the results, the best
    # Trial k is the k-th combination, the last field fastest.
    recorded = _results(result, "sweeps/grid")
    assert [r["raw"] for r in recorded] == [{"lr": 0, "kind": 0}, {"lr": 0, "kind": 1}, {"lr": 1, "kind": 0},
                                            {"lr": 1, "kind": 1}]
    objectives = [toy.toy_loss(toy.ToyConfig(lr=lr, warmup=5, kind=k)) for lr in (1e-3, 1e-2) for k in "ab"]
    assert [r["objective"] for r in recorded] == objectives
    chosen = json.loads(Path(result.by_name("sweeps/grid/best").output_path, "best.json").read_text())
    assert chosen["trial"] == 3 and chosen["name"] == "sweeps/grid/trial-3"
    assert chosen["params"] == {"lr": 1e-2, "kind": "b"} and chosen["objective"] == min(objectives)
    # The winner's files are here, hard-linked; its records are not.
    copied = Path(result.by_name("sweeps/grid/best").output_path, "final", "params.npz")
    source = Path(result.by_name("sweeps/grid/trial-3").output_path, "final", "params.npz")
    assert copied.read_text() == "params of lr=0.01" and os.path.samefile(copied, source)
    assert not Path(result.by_name("sweeps/grid/best").output_path, ".marin", "manifest.json").samefile(
        Path(source.parent.parent, ".marin", "manifest.json"))

    again = _in_process(prefix).run([best(sweep("sweeps/grid", base=base, space={"lr": [1e-3, 1e-2],
                                                                                  "kind": ["a", "b"]}))])
    assert again.ok and again.count(Outcome.RAN) == 0 and len(again.steps) == 7
    assert toy.calls(counter) == dict.fromkeys(trials, 1)


def test_best_picks_the_lowest_or_highest_objective_ties_to_the_lowest_index():
    trials = [{"index": 0, "objective": 2.0}, {"index": 1, "objective": 1.0}, {"index": 2, "objective": 1.0},
              {"index": 3, "objective": None}, {"index": 4, "objective": 3.0}]
    assert best_trial(trials, Direction.MINIMIZE)["index"] == 1
    assert best_trial(trials, Direction.MAXIMIZE)["index"] == 4
    assert best_trial(list(reversed(trials)), Direction.MINIMIZE)["index"] == 1
    with pytest.raises(ValueError, match="no trial recorded an objective"):
        best_trial([{"index": 0, "objective": None}], Direction.MINIMIZE)


def test_a_seeded_tpe_sweep_proposes_the_same_trials_on_a_fresh_prefix(tmp_path, uninterrupted):
    result = _in_process(str(tmp_path / "store")).run([_toy_sweep(str(tmp_path / "counter"))])
    assert result.ok
    assert _results(result) == uninterrupted
    assert [t["index"] for t in uninterrupted] == list(range(8))
    # Every round seeds its sampler apart: no two proposals repeat (the start-up ones are random).
    assert len({json.dumps(t["raw"], sort_keys=True) for t in uninterrupted}) == 8
    # Round 2 read the four trials before it; another seed proposes other trials.
    rounds = [json.loads(Path(result.by_name(f"sweeps/toy/round-{r}").output_path, PROPOSALS_FILE).read_text())
              for r in range(4)]
    assert [[f["index"] for f in r["finished"]] for r in rounds] == [[], [0, 1], [0, 1, 2, 3], [0, 1, 2, 3, 4, 5]]
    other = _in_process(str(tmp_path / "other")).run([_toy_sweep(str(tmp_path / "counter2"), seed=4)])
    assert [t["raw"] for t in _results(other)] != [t["raw"] for t in uninterrupted]


RUNNER = textwrap.dedent(
    """
    import json, sys
    from testsupport import sweep_trials as toy
    from marin.execution.step_runner import StepRunner
    from marin.experiment.sweeps.sweep import sweep

    if __name__ == "__main__":
        prefix, counter, sleep_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
        base = toy.ToyTrial(name="unused", config=toy.ToyConfig(counter_dir=counter, sleep_at=sleep_at, sleep=60.0))
        space = {"lr": ("log_uniform", 1e-4, 1e-1), "warmup": ("int", 0, 10), "kind": ["a", "b"]}
        sw = sweep("sweeps/toy", base=base, space=space, method="tpe", trials=8, parallel=2, seed=3)
        result = StepRunner(prefix=prefix, max_parallel=2, lease_ttl=3.0, poll_interval=0.05).run([sw])
        print(json.dumps({s.name: s.outcome.name for s in result.steps}))
        raise SystemExit(0 if result.ok else 1)
    """
)


def _runner_script(tmp_path: Path) -> str:
    path = tmp_path / "sweep_runner.py"
    path.write_text(RUNNER)
    return str(path)


def _done_trials(prefix: str) -> set[str]:
    root = Path(prefix, "sweeps", "toy")
    return {"sweeps/toy/" + p.parent.parent.name.rsplit("-", 1)[0] for p in root.glob("trial-*/.marin/success.json")}


def test_a_sweep_killed_mid_way_is_finished_by_a_rerun_that_repeats_nothing_finished(
        tmp_path, uninterrupted, subprocess_env):
    prefix, counter = str(tmp_path / "store"), str(tmp_path / "counter")
    proc = subprocess.Popen([sys.executable, _runner_script(tmp_path), prefix, counter, "5"], env=subprocess_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while sum(toy.calls(counter).values()) < 5:  # the fifth trial has started (and sleeps)
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the sweep never reached its fifth trial"
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.communicate()
    finished = _done_trials(prefix)
    assert {"sweeps/toy/trial-0", "sweeps/toy/trial-1", "sweeps/toy/trial-2", "sweeps/toy/trial-3"} <= finished
    assert len(finished) < 8
    before = toy.calls(counter)

    base = toy.ToyTrial(name="unused", config=toy.ToyConfig(counter_dir=counter, sleep_at=5, sleep=60.0))
    sw = sweep("sweeps/toy", base=base, space=SPACE, method="tpe", trials=8, parallel=2, seed=3)
    result = StepRunner(prefix=prefix, max_parallel=2, lease_ttl=3.0, poll_interval=0.05).run([sw])
    assert result.ok, [(s.name, s.error) for s in result.failed]
    assert _results(result) == uninterrupted
    after = toy.calls(counter)
    assert all(after[name] == 1 for name in finished), (finished, after)
    assert set(after) == {f"sweeps/toy/trial-{k}" for k in range(8)}
    assert sum(after.values()) - sum(before.values()) == 8 - len(finished)


def test_two_runners_racing_on_one_prefix_build_each_trial_once(tmp_path, uninterrupted, subprocess_env):
    prefix, counter = str(tmp_path / "store"), str(tmp_path / "counter")
    script = _runner_script(tmp_path)
    procs = [subprocess.Popen([sys.executable, script, prefix, counter, "0"], env=subprocess_env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-3000:]
    assert toy.calls(counter) == {f"sweeps/toy/trial-{k}": 1 for k in range(8)}
    result = _in_process(prefix).run([_toy_sweep(counter)])
    assert result.count(Outcome.RAN) == 0 and _results(result) == uninterrupted


DATA = tokenized(name="tokenized/x", source="/corpus", tokenizer="/tokenizer.json")
TINY = LlamaConfig(vocab_size=64, hidden_dim=16, intermediate_dim=32, num_heads=2, num_kv_heads=2, num_layers=1,
                   max_seq_len=32)
BASE = dict(version="v1", model=TINY, optimizer=AdamConfig(learning_rate=1e-3, warmup=2), datasets={DATA: 1.0},
            batch_size=2, seq_len=16, num_train_steps=4)


@pytest.mark.parametrize("kwargs, message", [
    ({"space": {"optimizer.learning_rte": [1e-3]}},
     "space['optimizer.learning_rte']: no field 'learning_rte' in optimizer (AdamConfig; fields: learning_rate,"),
    ({"space": {"optimizer.learning_rate": ("log_uniform", 0.0, 1e-2)}, "method": "random", "trials": 2},
     "space['optimizer.learning_rate']: low must be > 0 on a log scale, got 0.0"),
    ({"space": {"optimizer.learning_rate": ("uniform", 1e-2, 1e-3)}, "method": "tpe", "trials": 2},
     "space['optimizer.learning_rate']: low must be < high, got 0.01 and 0.001"),
    ({"space": {"optimizer.learning_rate": ("uniform", -1.0, 1e-3)}, "method": "tpe", "trials": 2},
     "space['optimizer.learning_rate']: learning_rate must be > 0"),
    ({"space": {"optimizer.warmup": ("normal", 0, 1)}, "method": "tpe", "trials": 2},
     "space['optimizer.warmup']: unknown kind 'normal'; kinds: choice, dirichlet, uniform, log_uniform, int"),
    ({"space": {"optimizer.warmup": ("int", 0, 1)}},
     "space['optimizer.warmup']: a grid needs a list of values, got ('int', 0, 1)"),
    ({"space": {"optimizer.warmup": ("int", 0.5, 1)}, "method": "tpe", "trials": 2},
     "space['optimizer.warmup']: low must be an int, got 0.5"),
    ({"space": {"optimizer.warmup": [0, 1]}, "method": "tpe"}, "method 'tpe' needs trials=N"),
    ({"space": {"optimizer.warmup": [0, 1]}, "trials": 3}, "a grid over this space has 2 trials, got trials=3"),
    ({"space": {"optimizer.warmup": [0, 1]}, "method": "bayes"}, "'bayes' is not a valid Method"),
    ({"space": {"optimizer.warmup": [0, 1]}, "objective": "held-out.bpb"},
     "objective 'held-out.bpb' is not a metric of the trials; metrics: loss, val_loss, steps_trained, params,"),
    ({"space": {"optimizer.warmup": [0, 1]}, "method": "tpe", "trials": 4, "parallel": 0},
     "parallel must be a positive int, got 0"),
    ({"space": {}}, "space must be a non-empty mapping of config field to values, got {}"),
])
def test_a_bad_sweep_is_refused_at_the_call_in_one_line_naming_the_field(kwargs, message):
    with pytest.raises(InvalidStep) as err:
        sweep("sweeps/bad", base=BASE, **kwargs)
    assert str(err.value).startswith(f"sweep 'sweeps/bad': {message}"), str(err.value)
    assert "\n" not in str(err.value)


def test_training_trials_carry_their_evals_and_best_is_fine_tuned_and_evaluated(tmp_path):
    held_out = str(tmp_path)  # any existing path is raw text to score
    sw = sweep("sweeps/train", base={**BASE, "evals": {"held-out": held_out}},
               space={"optimizer.learning_rate": ("log_uniform", 1e-4, 1e-2), "trainer.num_train_steps": [4, 8]},
               method="random", trials=2, objective="held-out.bpb")
    step = lower(sw)
    output = tmp_path / "round"
    output.mkdir()
    (output / PROPOSALS_FILE).write_text(json.dumps({"trials": [
        {"index": 0, "raw": {"optimizer.learning_rate": 3e-3, "trainer.num_train_steps": 1}},
        {"index": 1, "raw": {"optimizer.learning_rate": 1e-3, "trainer.num_train_steps": 0}}]}))
    expanded = traits_of(step.fn).expand(step, str(output))
    trials, results = expanded[:2], expanded[2]
    assert all(isinstance(t, TrainLm) for t in trials) and [t.name for t in trials] == [
        "sweeps/train/trial-0", "sweeps/train/trial-1"]
    assert [(t.config.optimizer.learning_rate, t.config.trainer.num_train_steps) for t in trials] == [(3e-3, 8),
                                                                                                      (1e-3, 4)]
    assert trials[0].config.optimizer.warmup == 2 and trials[0].config.trainer.batch_size == 2
    assert [c.name for c in trials[0].companions()] == ["evals/sweeps/train/trial-0"]
    assert results.name == "sweeps/train/results" and len(results.config.trials) == 2
    assert len(results.config.trials[0].outputs) == 2  # the trial and its eval step hold its objective

    winner = best(sw)
    assert checkpoint(winner) == TrainedModel(path=winner)
    fine_tune = lower(train_lm(name="checkpoints/ft", **{**BASE, "initialize_from": checkpoint(winner)}))
    assert lower(winner) in dependencies_of(fine_tune) and lower(sw) not in dependencies_of(fine_tune)
    with pytest.raises(ValueError, match="holds only final parameters"):
        checkpoint(winner, step=4)
    scored = evaluate("evals/best", winner, {"held-out": held_out})
    assert scored.config.seq_len == 16
    with pytest.raises(ValueError, match="holds only final parameters"):
        evaluate("evals/best", winner, {"held-out": held_out}, checkpoint=4)


COMPARE_EXPERIMENT = '''\
from levanter.models.llama import LlamaConfig
from levanter.optim import AdamConfig
from marin.experiment.sweeps.sweep import sweep
from marin.experiment.training.train import train_lm
from testsupport.sweep_trials import FakeTrain

TINY = LlamaConfig(vocab_size=64, hidden_dim=16, intermediate_dim=32, num_heads=2, num_kv_heads=2, num_layers=1,
                   max_seq_len=32)
template = train_lm(name="unused", version="v1", model=TINY, optimizer=AdamConfig(learning_rate=1e-3, warmup=2),
                    datasets={"/data/tokenized": 1.0}, batch_size=2, seq_len=16, num_train_steps=4)
sw = sweep("sweeps/fake", base=FakeTrain(name="unused", config=template.config),
           space={"optimizer.learning_rate": [1e-3, 1e-2], "optimizer.warmup": [0, 5]})
steps = [sw]
'''


def test_marin_compare_on_a_sweep_shows_its_trials_with_the_fields_they_vary(tmp_path):
    from marin.cli.main import cli

    exp = tmp_path / "fake_sweep.py"
    exp.write_text(COMPARE_EXPERIMENT)
    prefix = str(tmp_path / "store")
    plan = CliRunner().invoke(cli, ["plan", str(exp), "--prefix", prefix], catch_exceptions=False)
    assert "expands after sweeps/fake/round-0" in plan.stdout
    run = CliRunner().invoke(cli, ["run", str(exp), "--prefix", prefix], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    shown = CliRunner().invoke(cli, ["compare", str(exp), "--prefix", prefix, "--format", "json",
                                     "--sort", "val_loss"], catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    table = json.loads(shown.stdout)
    assert table["fields"] == ["optimizer.learning_rate", "optimizer.warmup"]
    assert [r["name"] for r in table["rows"]] == ["sweeps/fake/trial-3", "sweeps/fake/trial-2",
                                                  "sweeps/fake/trial-1", "sweeps/fake/trial-0"]
    rows = {r["name"]: r for r in table["rows"]}
    assert rows["sweeps/fake/trial-3"]["fields"] == {"optimizer.learning_rate": "0.01", "optimizer.warmup": "5"}
    assert rows["sweeps/fake/trial-0"]["fields"] == {"optimizer.learning_rate": "0.001", "optimizer.warmup": "0"}
    assert table["metrics"][:6] == ["loss", "val_loss", "steps_trained", "params", "model_flops", "mfu"]
    assert rows["sweeps/fake/trial-3"]["metrics"]["val_loss"] == pytest.approx(3.0)
    assert rows["sweeps/fake/trial-0"]["metrics"]["params"] == TINY.num_params()
    # A terminal wide enough for one block: each trial is one row (narrower ones: test_compare).
    text = CliRunner().invoke(cli, ["compare", str(exp), "--prefix", prefix], catch_exceptions=False,
                              env={"COLUMNS": "400"}).stdout
    assert "optimizer.learning_rate" in text and "model_flops" in text and text.count("sweeps/fake/trial-") == 4


def test_a_plan_against_a_cache_holding_a_finished_sweep_lists_its_trials_as_the_cache_does(tmp_path):
    counter = str(tmp_path / "counter")
    base = toy.ToyTrial(name="unused", config=toy.ToyConfig(counter_dir=counter))
    sw = sweep("sweeps/cached", base=base, space={"lr": [1e-3, 1e-2]}, method="grid")
    cache = str(tmp_path / "cache")
    assert _in_process(cache).run([best(sw)]).ok
    here = {p.name: p.hash for p in _in_process(cache).plan([best(sw)]).steps}
    fresh = StepRunner(prefix=str(tmp_path / "fresh"), client=InProcessClient(), max_parallel=1, strict_env=False,
                       caches=[cache])
    there = {p.name: p.hash for p in fresh.plan([best(sw)]).steps}
    assert there == here


def test_a_trial_that_records_no_objective_fails_the_sweep_naming_the_trial_and_the_metric(tmp_path):
    base = toy.ToyTrial(name="unused", config=toy.ToyConfig())
    sw = sweep("sweeps/nompu", base=base, space={"lr": [1e-3, 1e-2]}, objective="mfu")
    result = _in_process(str(tmp_path / "store")).run([sw])
    assert not result.ok
    error = result.by_name("sweeps/nompu/results").error
    assert "sweeps/nompu/trial-0" in error and "recorded no mfu; its metrics: loss=1.85, val_loss=1.75, steps_trained=3" in error


def test_a_reader_of_a_sweep_whose_results_failed_is_upstream_failed(tmp_path):
    base = toy.ToyTrial(name="unused", config=toy.ToyConfig())
    sw = sweep("sweeps/nompu", base=base, space={"lr": [1e-3, 1e-2]}, objective="mfu")
    result = _in_process(str(tmp_path / "store")).run([best(sw)])
    assert not result.ok and result.by_name("sweeps/nompu/results").outcome is Outcome.FAILED
    assert result.by_name("sweeps/nompu/best").outcome is Outcome.UPSTREAM_FAILED
