"""Runs that extend instead of retraining, and branches from a kept checkpoint (through real steps).

Training a run costs mostly its fixed start (tracing and lowering its programs), not its steps, so
the tests share what they can: the session's ``trained_prefix`` (``tiny_model`` of 10 and 20 steps,
both trained from step 0) and, once per module, the 10-step run alone (``short_prefix``) and the
30-step WSD run (``wsd_prefix``); each test adds its builds to a copy.
"""

from __future__ import annotations

import json
import os

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from fray import InProcessClient
from levanter.checkpoint import checkpoint_dir
from levanter.optim import AdamConfig
from marin.execution.core.traits import Start
from marin.execution.run.outcome import QuietReporter
from marin.execution.run.runner import StepRunner
from marin.execution.store.records import StepRecord
from marin.experiment.training.train import TRAIN_SUMMARY_FILE, checkpoint
from rigging import filesystem as fs
from testsupport.lm_graph import copy_prefix, runner, tiny_model

CONSTANT = AdamConfig(learning_rate=3e-3, warmup=2, schedule="constant")
COSINE = AdamConfig(learning_rate=3e-3, warmup=2, schedule="cosine")


@pytest.fixture(scope="module")
def data_prefix(tmp_path_factory, lm_data_prefix):
    return copy_prefix(lm_data_prefix, tmp_path_factory.mktemp("lm") / "store")


@pytest.fixture(scope="module")
def short_prefix(tmp_path_factory, lm_data_prefix):
    """The data and ``tiny_model(steps=10)``, without the 20-step run (that would extend it)."""
    prefix = copy_prefix(lm_data_prefix, tmp_path_factory.mktemp("short") / "store")
    _build(prefix, tiny_model(steps=10))
    return prefix


def _wsd(decay_steps: int) -> AdamConfig:
    return AdamConfig(learning_rate=3e-3, warmup=2, schedule="wsd", decay=decay_steps, decay_shape="linear")


# Decays over its last 10 of 30 steps: up to step 20 it is at the peak (checkpoints 10, 20 and 30 kept).
STABLE = tiny_model("checkpoints/stable", steps=30, optimizer=_wsd(10), save_every=10, keep_every=10)


@pytest.fixture(scope="module")
def wsd_prefix(tmp_path_factory, lm_data_prefix):
    """The data and :data:`STABLE` trained."""
    prefix = copy_prefix(lm_data_prefix, tmp_path_factory.mktemp("wsd") / "store")
    _build(prefix, STABLE)
    return prefix


def final_state(output_path: str, step: int) -> list[np.ndarray]:
    """Every array of checkpoint ``step`` of a training output (params, optimizer state, step, key)."""
    with ocp.CheckpointManager(os.path.join(output_path, "checkpoints"), item_names=("state", "data"),
                               options=ocp.CheckpointManagerOptions(read_only=True)) as manager:
        restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore()))
    return [np.asarray(x) for x in jax.tree.leaves(restored.state)]


def assert_same(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        assert x.dtype == y.dtype and np.array_equal(x, y), f"leaf {i} differs"


def _summary(output_path: str) -> dict:
    return json.loads(fs.read_text(fs.join(output_path, TRAIN_SUMMARY_FILE)))


def _build(prefix, handle):
    result = runner(prefix).run([handle])
    assert result.ok, [(s.name, s.error) for s in result.failed]
    return result.by_name(handle.name).output_path


def _start_reason(prefix, handle) -> str:
    plan = runner(prefix).plan([handle])
    planned = next(p for p in plan.steps if p.name == handle.name)
    assert planned.action.value == "run"
    starts = [r.detail for r in planned.reasons if r.kind.name == "STARTS_FROM"]
    return starts[0] if starts else ""


def test_extend_equals_training_from_scratch_at_half_the_steps(short_prefix, trained_prefix, tmp_path):
    prefix = copy_prefix(short_prefix, tmp_path / "store")
    short = _build(prefix, tiny_model(steps=10))  # cached
    longer = tiny_model(steps=20)
    # The plan says what it will reuse; the identity is unchanged by it.
    short_name = "checkpoints/" + os.path.basename(short)
    assert _start_reason(prefix, longer) == f"extends {short_name} from step 10 (saves 10 steps)"
    extended = _build(prefix, longer)
    assert os.path.basename(extended) == f"checkpoints/tiny-{longer.lower().hash[:16]}".split("/")[1]
    summary = _summary(extended)
    assert (summary["start_step"], summary["steps"]) == (10, 20)  # half of the steps trained

    # The same step trained from step 0: the session's build (its 20-step run came before its 10-step
    # one), read where it is (a run on the shared prefix would write to it).
    fresh = str(trained_prefix / "checkpoints" / os.path.basename(extended))
    assert (_summary(fresh)["start_step"], _summary(fresh)["steps"]) == (0, 20)
    assert_same(final_state(extended, 20), final_state(fresh, 20))
    # The curve of the extended run starts at step 1, as the fresh run's does.
    with open(os.path.join(extended, "metrics.jsonl")) as f:
        losses = [row["step"] for row in map(json.loads, f) if "loss" in row]
    assert losses == list(range(1, 21))


def test_a_cosine_run_is_not_extended_and_the_plan_says_why(data_prefix, tmp_path):
    prefix = copy_prefix(data_prefix, tmp_path / "store")
    short = _build(prefix, tiny_model(steps=10, optimizer=COSINE, save_every=5, keep_every=None))
    longer = tiny_model(steps=20, optimizer=COSINE, save_every=5, keep_every=None)
    reason = _start_reason(prefix, longer)
    assert reason.startswith(f"cannot extend checkpoints/{os.path.basename(short)}: cosine decay depends on "
                             "num_train_steps (the learning rates part at step 3;"), reason
    assert _summary(_build(prefix, longer))["start_step"] == 0


def test_another_recipe_is_never_extended(short_prefix):
    # The 10-step run is there to extend (the plans below only read the prefix).
    assert _start_reason(short_prefix, tiny_model(steps=20)).startswith("extends ")
    other_lr = tiny_model(steps=20, optimizer=AdamConfig(learning_rate=1e-2, warmup=2, schedule="constant"))
    assert _start_reason(short_prefix, other_lr) == ""
    other_seed = tiny_model(steps=20, optimizer=CONSTANT, seed=1)
    assert _start_reason(short_prefix, other_seed) == ""


def test_a_branch_names_its_source_and_step(data_prefix, tmp_path):
    prefix = copy_prefix(data_prefix, tmp_path / "store")
    source = tiny_model("checkpoints/stable", steps=20, optimizer=CONSTANT)
    branch = tiny_model("checkpoints/branch", steps=20, optimizer=AdamConfig(learning_rate=3e-3, warmup=2, schedule="linear"),
                        initialize_from=checkpoint(source, 10))
    other_step = tiny_model("checkpoints/branch", steps=20, optimizer=AdamConfig(learning_rate=3e-3, warmup=2, schedule="linear"),
                            initialize_from=checkpoint(source, 10), reset_data_loader=True)
    assert branch.lower().hash != other_step.lower().hash
    plan = runner(prefix).plan([branch])
    planned = {p.name: p for p in plan.steps}
    assert [r.detail for r in planned["checkpoints/branch"].reasons if r.kind.name == "STARTS_FROM"] == [
        f"starts from checkpoints/stable-{source.lower().hash[:16]} at step 10"]
    with pytest.raises(ValueError, match="checkpoint 15 is never written"):
        checkpoint(source, 15)


def test_checkpoint_without_a_step_fine_tunes_the_final_parameters(data_prefix, tmp_path):
    from levanter.initialize import TrainedModel

    prefix = copy_prefix(data_prefix, tmp_path / "store")
    source = tiny_model("checkpoints/pretrained", steps=20, optimizer=CONSTANT)
    other_source = tiny_model("checkpoints/pretrained", steps=30, optimizer=CONSTANT)
    tune = tiny_model("checkpoints/tuned", steps=10, optimizer=CONSTANT, initialize_from=checkpoint(source))
    assert isinstance(tune.config.trainer.initialize_from, TrainedModel)
    other = tiny_model("checkpoints/tuned", steps=10, optimizer=CONSTANT, initialize_from=checkpoint(other_source))
    assert tune.lower().hash != other.lower().hash  # the source's identity is in the fine-tune's
    plan = runner(prefix).plan([tune])
    planned = {p.name: p for p in plan.steps}
    assert [r.detail for r in planned["checkpoints/tuned"].reasons if r.kind.name == "STARTS_FROM"] == [
        f"fine-tunes the final parameters of checkpoints/pretrained-{source.lower().hash[:16]} (fresh optimizer)"]
    with pytest.raises(ValueError, match="model must be a train_lm"):
        checkpoint("checkpoints/pretrained")


def test_a_cooldown_branch_equals_the_wsd_run_whose_decay_starts_there(wsd_prefix, data_prefix, tmp_path):
    prefix = copy_prefix(wsd_prefix, tmp_path / "store")
    branch = tiny_model("checkpoints/cooldown", steps=16, optimizer=_wsd(6), initialize_from=checkpoint(STABLE, 10))
    branch_out = _build(prefix, branch)
    assert (_summary(branch_out)["start_step"], _summary(branch_out)["steps"]) == (10, 16)
    # One WSD run of the same total whose decay starts at 10, trained from step 0 elsewhere.
    single_prefix = copy_prefix(data_prefix, tmp_path / "single")
    single_out = _build(single_prefix, tiny_model("checkpoints/single", steps=16, optimizer=_wsd(6)))
    assert _summary(single_out)["start_step"] == 0
    assert_same(final_state(branch_out, 16), final_state(single_out, 16))


def test_moving_a_wsd_decay_later_extends_the_earlier_build(wsd_prefix):
    first = _build(wsd_prefix, STABLE)  # cached
    later = tiny_model("checkpoints/stable", steps=30, optimizer=_wsd(4), save_every=10, keep_every=10)  # decay from 26, not 20
    assert _start_reason(wsd_prefix, later) == f"extends checkpoints/{os.path.basename(first)} from step 20 (saves 20 steps)"


def test_the_run_extends_exactly_the_build_the_plan_named(short_prefix, tmp_path):
    """An earlier build that appears between the plan and the step's start is not what the run
    extends: the step is handed the plan's decision, and its summary and provenance name it."""
    prefix = copy_prefix(short_prefix, tmp_path / "store")
    short = _build(prefix, tiny_model(steps=10))  # cached
    later = tiny_model(steps=15)  # checkpoints 10 and 15
    longer = tiny_model(steps=20)
    planned: list[Start | None] = []

    class BuildAnotherOncePlanned(QuietReporter):
        def planned(self, plan):
            entry = next(p for p in plan.steps if p.name == longer.name)
            planned.append(entry.start)
            # Between the plan and the run, a better earlier build (15 steps) appears.
            _build(prefix, later)

    result = StepRunner(prefix=str(prefix), max_parallel=1, client=InProcessClient(), strict_env=False,
                        reporter=BuildAnotherOncePlanned()).run([longer])
    assert result.ok, [(s.name, s.error) for s in result.failed]
    assert planned == [Start(f"extends checkpoints/{os.path.basename(short)} from step 10 (saves 10 steps)",
                             extends=short, step=10)]
    extended = result.by_name(longer.name).output_path
    summary = _summary(extended)
    assert summary["planned_start"] == planned[0].to_json()
    assert (summary["start_step"], summary["steps"]) == (10, 20)
    assert summary["started_from"] == str(checkpoint_dir(short))
    provenance = StepRecord(extended).read_provenance()
    assert provenance is not None and {"kind": "starts_from", "detail": planned[0].note} in (provenance.reasons or [])
