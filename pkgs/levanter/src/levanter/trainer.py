"""Training a language model on tokenized data: ``main(config, output_path)`` over one :class:`TrainLmConfig`.

Run from a shell with ``python -m levanter.trainer CONFIG.json OUTPUT_PATH``; a run stopped by
SIGTERM saves a checkpoint and exits with :data:`PREEMPTED_EXIT_CODE` (75), and running it again
resumes. ``main`` is three parts: :func:`levanter.train_setup.set_up` (model, optimizer, compiled
step, data, checkpoints and the restored state, for any :class:`~levanter.models.family.ModelConfig`),
the loop of :mod:`levanter.training` with its hooks, and the :class:`~levanter.summary.TrainSummary`
it returns. The config classes live in :mod:`levanter.config` (no JAX import) and are re-exported here.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import sys
import time
from collections.abc import Sequence
from typing import Any

import jax

from fray.types import PREEMPTED_EXIT_CODE
from levanter.checkpoint import checkpoint_dir
from levanter.config import (
    ComputeDtype,
    DataConfig,
    TrainerConfig,
    TrainLmConfig,
    WandbConfig,
    config_from_dict,
    config_to_dict,
)
from levanter.ema import EMA_PARAMS_FILE
from levanter.eval import read_tokenizer_json
from levanter.flops import FlopsSummary
from levanter.summary import TrainSummary
from levanter.train_setup import TrainSetup, resolve_model, set_up
from levanter.training import (
    Checkpointing,
    Hook,
    NonFiniteLossError,
    ScheduledHook,
    StepInfo,
    Throughput,
    Trainer,
    TrainingPreempted,
    TrainState,
    abstract_state,
    loss_fn,
    make_train_step,
)
from levanter.training.final import save_final_params
from rigging import filesystem as fs

__all__ = [
    "PREEMPTED_EXIT_CODE",
    "ComputeDtype",
    "DataConfig",
    "NonFiniteLossError",
    "ScheduledHook",
    "StepInfo",
    "TrainLmConfig",
    "TrainState",
    "TrainSummary",
    "TrainerConfig",
    "TrainingPreempted",
    "WandbConfig",
    "abstract_state",
    "checkpoint_dir",
    "config_from_dict",
    "config_to_dict",
    "join_distributed",
    "loss_fn",
    "main",
    "make_train_step",
    "resolve_model",
    "train",
]

logger = logging.getLogger(__name__)


def join_distributed() -> None:
    """Join the multi-host JAX job this process was launched into (``iris.multihost``), once."""
    from iris.multihost import initialize_jax  # deferred: only runs launched by iris have a job to join

    if not jax.distributed.is_initialized():
        initialize_jax()


def _task_eval(config: TrainLmConfig, mesh: Any) -> Hook:
    """The hook of ``trainer.eval_tasks``: the harness on the current parameters, with the data's tokenizer."""
    # lm_eval (and the datasets library under it) takes seconds to import: only for runs with tasks.
    from levanter.eval_harness.config import HarnessConfig
    from levanter.eval_harness.hook import task_eval_hook

    trainer = config.trainer
    harness = HarnessConfig(batch_size=trainer.batch_size, seq_len=trainer.seq_len, compute_dtype=trainer.compute_dtype)
    return task_eval_hook(config.model, read_tokenizer_json(str(config.data.datasets[0].path)), trainer.eval_tasks,
                          harness=harness, num_fewshot=trainer.eval_task_fewshot, limit=trainer.eval_task_limit,
                          mesh=mesh)


def main(config: TrainLmConfig, output_path: str, *, hooks: Sequence[ScheduledHook] = ()) -> TrainSummary:
    """Train (or resume training) as ``config`` says, writing into ``output_path``; return a summary.

    ``output_path`` (local or gs://) receives ``config.json``, ``metrics.jsonl``, TensorBoard
    events, ``memory.json``, checkpoints (:func:`checkpoint_dir`) and ``final/params.npz``.
    ``hooks`` run in the loop after the trainer's own (validation, checkpoints); what they return is
    logged at their step (:mod:`levanter.training.hooks`).

    Raises:
        TrainingPreempted: SIGTERM arrived; a checkpoint was committed first.
        NonFiniteLossError: the loss became NaN or infinite.
    """
    if not output_path:
        raise ValueError(f"output_path must be non-empty, got {output_path!r}")
    join_distributed()
    return train(set_up(config, output_path), hooks)


def train(setup: TrainSetup, hooks: Sequence[ScheduledHook] = ()) -> TrainSummary:
    """Run the loop over a run made ready (:func:`levanter.train_setup.set_up`, or a preference run's
    ``levanter.dpo.trainer.set_up_dpo``) to its last step, save the final parameters, close ``setup``."""
    loop = _loop(setup, hooks)
    try:
        final = _train(setup, loop)
    finally:
        setup.close()
    return _summary(setup, loop, final)


def _loop(setup: TrainSetup, hooks: Sequence[ScheduledHook]) -> Trainer:
    """The training loop over ``setup``: validation, task evals, checkpoints, then the caller's ``hooks``."""
    trainer = setup.config.trainer
    throughput = Throughput(setup.tokens_per_step, setup.flops_per_token * setup.tokens_per_step,
                            len(setup.layout.devices), setup.peak.flops_per_s,
                            causal_flops_per_step=setup.causal_flops_per_token * setup.tokens_per_step)
    loop = Trainer(setup.train_step, setup.iterator, setup.place, num_train_steps=trainer.num_train_steps,
                   writer=setup.writer, throughput=throughput, log_every=trainer.log_every,
                   started_at=setup.started_at, rate_of_step=setup.rate_of_step)
    if setup.has_validation_data:
        loop.add_hook(setup.validation, every=trainer.eval_every or None)
    if trainer.eval_tasks:
        loop.add_hook(_task_eval(setup.config, setup.layout.mesh), every=trainer.eval_every or None)
    checkpointing = Checkpointing(setup.checkpointer, setup.iterator.get_state, on_saved=setup.writer.sync)
    loop.add_scheduled(checkpointing.scheduled())
    loop.on_preempt(checkpointing.preempt)
    for hook in hooks:
        loop.add_scheduled(hook)
    if setup.progress is not None:
        loop.add_listener(setup.progress)
    return loop


@dataclasses.dataclass(frozen=True)
class _Final:
    """Where a finished loop left the run."""

    step: int
    loss: float
    params_path: str


def _train(setup: TrainSetup, loop: Trainer) -> _Final:
    """Run ``loop`` from the restored state to the last step, then save the final parameters."""
    start = setup.start
    state = loop.run(start.state, start.step)
    # The last step's save was started in the loop; it must be committed before we return.
    setup.checkpointer.wait()
    loss = loop.last_metrics.get("loss", math.nan)
    if loop.steps_run == 0:
        # Resumed a finished run: validate, and report the loss of the final state on one fresh batch.
        if setup.validation.evaluate(state.params) is not None:
            setup.writer.write(loop.step, {"val_loss": setup.validation.last})
        loss = float(setup.eval_loss(state.params, setup.place(next(setup.iterator))))
    params_path = save_final_params(setup.output_path, state.params)
    if state.ema is not None:
        save_final_params(setup.output_path, state.ema, EMA_PARAMS_FILE)
    setup.writer.write(loop.step, {"blocked_in_checkpoint_s": setup.checkpointer.blocked_seconds,
                                   "wall_s": time.perf_counter() - setup.started_at})
    return _Final(step=loop.step, loss=loss, params_path=params_path)


def _summary(setup: TrainSetup, loop: Trainer, final: _Final) -> TrainSummary:
    """What ``main`` returns: ``final``, where the run wrote, what it ran on, and its FLOPs accounting."""
    config, output_path, n_dev = setup.config, setup.output_path, len(setup.layout.devices)
    flops = FlopsSummary.of_run(
        num_params=config.model.num_params(), flops_per_token=setup.flops_per_token,
        tokens_per_step=setup.tokens_per_step, steps=final.step, steps_run=loop.steps_run,
        train_seconds=loop.train_seconds, num_devices=n_dev, peak=setup.peak,
        step_hardware_flops=setup.count_step_flops(), causal_flops_per_token=setup.causal_flops_per_token)
    return TrainSummary(
        final_loss=final.loss, val_loss=setup.validation.last, steps=final.step, start_step=setup.start.step,
        output_path=output_path, checkpoint_path=setup.checkpointer.directory, params_path=final.params_path,
        config_path=fs.join(output_path, "config.json"), metrics_path=fs.join(output_path, "metrics.jsonl"),
        model=config.model, tokens_per_s=loop.last_metrics.get("tokens_per_s", math.nan),
        checkpoint_blocked_s=setup.checkpointer.blocked_seconds, devices=n_dev, mesh=dict(setup.layout.mesh.shape),
        processes=jax.process_count(), memory=setup.memory, run_id=setup.run_id, flops=flops,
        data_offset=setup.data_offset)


def _cli(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m levanter.trainer CONFIG.json OUTPUT_PATH", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = config_from_dict(json.loads(fs.read_text(argv[0])))
    try:
        result = main(config, argv[1])
    except TrainingPreempted as e:
        print(str(e), file=sys.stderr)
        return e.exit_code
    print(json.dumps(result.to_json()))
    return 0


if __name__ == "__main__":
    sys.exit(_cli(sys.argv[1:]))
