"""Preference training (DPO, IPO, SLiC) in levanter's training loop: ``main(config, output_path)``.

A DPO run is a training run (:class:`~levanter.config.TrainLmConfig`: model, optimizer, loop, mesh,
checkpoints, LoRA, EMA) over preference pairs with a preference loss (:mod:`levanter.dpo.loss`). It
starts from ``trainer.initialize_from``'s weights and compares the policy with reference
log-probs scored once by another step (:mod:`levanter.dpo.reference`), or, for a LoRA run, with
its own base (the adapters off) scored in the step. Its output is laid out as any run's
(``config.json``, checkpoints, ``final/params.npz``, ``metrics.jsonl``) plus ``dpo.json``, so it is
evaluated, sampled, exported and fine-tuned from like any model. ``metrics.jsonl`` has the loss,
``chosen_reward``, ``rejected_reward``, ``reward_accuracy``, ``reward_margin`` and the policy's
``chosen_logp``/``rejected_logp`` of each training batch, and the same of the held-out pairs
(``val_...``), before the first step too. Run ``python -m levanter.dpo.trainer CONFIG.json OUTPUT_PATH``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding

from levanter.data.loader import check_dataset
from levanter.data.preference import eval_pair_batches, pair_batches
from levanter.dpo.config import DPO_CONFIG_FILE, DpoRunConfig, dpo_config_from_dict, dpo_config_to_dict
from levanter.dpo.loss import batch_terms, dpo_objective, pair_metrics
from levanter.dpo.reference import read_reference
from levanter.memory import MEMORY_FILE, measure_memory
from levanter.summary import TrainSummary
from levanter.train_setup import TrainSetup, build_run, run_peak, run_writers, write_lora
from levanter.trainer import join_distributed, train
from levanter.training import ScheduledHook, StepInfo
from levanter.training.execution import compile_step
from levanter.training.trained import Trained
from rigging import filesystem as fs

__all__ = ["PairValidation", "main", "set_up_dpo"]

logger = logging.getLogger(__name__)

_RATE = jax.ShapeDtypeStruct((), jnp.float32)


class PairValidation:
    """A hook returning the preference metrics of the held-out pairs (``val_loss``, ``val_reward_accuracy``, ...).

    Args:
        terms: ``(params, batch) -> PairTerms`` of a placed batch, jitted.
        batches: this process's rows of each held-out batch (host arrays).
        real: how many pairs of each batch count (the last is filled up with repeats).
        place: a host batch -> the batch ``terms`` takes.
    """

    def __init__(self, terms: Callable[[Any, Any], Any], batches: Sequence[Mapping[str, np.ndarray]],
                 real: Sequence[int], place: Callable[[Any], Any]):
        self._terms, self._batches, self._real, self._place = terms, list(batches), list(real), place
        self.last: float | None = None
        """The latest held-out loss (None before the first, and without held-out pairs)."""
        self.last_metrics: dict[str, float] = {}

    @property
    def has_pairs(self) -> bool:
        """Whether there are held-out pairs to score."""
        return bool(self._batches)

    def evaluate(self, params: Any) -> float | None:
        """The held-out metrics of ``params`` (kept in :attr:`last_metrics`); returns the loss."""
        if not self._batches:
            return None
        gathered = [jax.device_get(self._terms(params, self._place(b))) for b in self._batches]
        weights = np.concatenate([np.arange(len(t.loss)) < n for t, n in zip(gathered, self._real, strict=True)])
        joined = jax.tree.map(lambda *xs: np.concatenate(xs).astype(np.float64), *gathered)
        self.last_metrics = {f"val_{k}": float(v) for k, v in pair_metrics(joined, weights.astype(np.float64)).items()}
        self.last = self.last_metrics["val_loss"]
        return self.last

    def __call__(self, info: StepInfo) -> Mapping[str, float] | None:
        return None if self.evaluate(info.state.params) is None else dict(self.last_metrics)


def _tree_placer(sharding: NamedSharding, shapes: Mapping[str, Any]) -> Callable[[Mapping[str, np.ndarray]], Any]:
    def place(local: Mapping[str, np.ndarray]) -> dict[str, jax.Array]:
        """The global batch arrays, assembled from the rows this process holds."""
        return {k: jax.make_array_from_process_local_data(sharding, local[k], shapes[k].shape) for k in shapes}

    return place


def _references(config: DpoRunConfig, data_path: str) -> dict[str, np.ndarray] | None:
    if config.reference is None:
        return None
    reference = read_reference(str(config.reference), data_path)
    if "train" not in reference:
        raise ValueError(f"the reference log-probs in {config.reference} hold no train split")
    return reference


def set_up_dpo(config: DpoRunConfig, output_path: str) -> TrainSetup:
    """Everything a DPO run needs before its first step (as ``levanter.train_setup.set_up`` for a
    language model), writing ``config.json``, ``dpo.json`` and ``memory.json`` into ``output_path``."""
    data_path = str(config.train.data.datasets[0].path)
    check_dataset(data_path, f"preference data ({data_path})")
    reference = _references(config, data_path)  # before anything is built: other data's log-probs are refused
    run = build_run(config.train, output_path)
    train_config, layout, model, trained = run.config, run.layout, run.model, run.trained
    trainer = train_config.trainer
    dtype = trainer.compute_dtype.jnp
    window = trainer.seq_len + 1
    shapes = {"pairs": jax.ShapeDtypeStruct((trainer.batch_size, 2, 3, window), jnp.int32, sharding=layout.batch_sharding)}
    if reference is not None:
        shapes["reference"] = jax.ShapeDtypeStruct((trainer.batch_size, 2), jnp.float32, sharding=layout.batch_sharding)
    objective = dpo_objective(model, dtype, config.dpo, trained.model_params, block=trainer.loss_block)
    train_step = compile_step(model, train_config, layout, trained.target, shapes, _RATE, objective=objective,
                              trained=trained)
    memory = measure_memory(layout.mesh, trained.start.state.params, trained.start.state.opt_state, train_step,
                            execution=run.execution)
    logger.info("%s", memory.summary())
    place = _tree_placer(layout.batch_sharding, shapes)
    validation, eval_loss = _validation(config, trained, model, layout, place, data_path, reference, window)
    run_id = trainer.run_id or os.path.basename(output_path.rstrip("/"))
    writer, progress = run_writers(train_config, output_path, run_id, trained.start, layout.primary)
    if layout.primary:
        fs.atomic_write(fs.join(output_path, MEMORY_FILE), memory.dumps())
        resolved = dataclasses.replace(config, train=train_config)
        fs.atomic_write(fs.join(output_path, DPO_CONFIG_FILE), json.dumps(dpo_config_to_dict(resolved), indent=2))
        write_lora(train_config, output_path)
    iterator = iter(pair_batches(data_path, window=window, batch_size=trainer.batch_size, seed=trainer.seed,
                                 reference=None if reference is None else reference["train"],
                                 prefetch=train_config.data.prefetch, cache_dir=train_config.data.shard_cache_dir,
                                 rows=layout.rows))
    if trained.start.data_state is not None:
        iterator.set_state(trained.start.data_state)
    peak = run_peak(trainer, layout)
    return TrainSetup(config=train_config, output_path=output_path, run_id=run_id, layout=layout, train_step=train_step,
                      rate_of_step=run.rate_of_step, eval_loss=eval_loss, place=place, checkpointer=run.checkpointer,
                      start=trained.start, memory=memory, validation=validation,  # pyright: ignore[reportArgumentType]
                      has_validation_data=validation.has_pairs, peak=peak,
                      started_at=run.started_at, iterator=iterator, writer=writer, progress=progress,
                      sequences_per_example=2)


def _validation(config: DpoRunConfig, trained: Trained, model: Any, layout: Any, place: Callable[[Any], Any],
                data_path: str, reference: dict[str, np.ndarray] | None, window: int) -> tuple[PairValidation, Any]:
    """The held-out pairs' hook, and ``(params, batch) -> loss`` of a training batch."""
    trainer = config.train.trainer
    dtype = trainer.compute_dtype.jnp
    held_out = None if reference is None else reference.get("validation")
    batches, real = ([], []) if not trainer.eval_batches else eval_pair_batches(
        data_path, "validation", window=window, batch_size=trainer.batch_size,
        max_pairs=trainer.eval_batches * trainer.batch_size, reference=held_out, cache_dir=config.train.data.shard_cache_dir)
    if reference is not None and batches and held_out is None:
        raise ValueError(f"the reference log-probs in {config.reference} hold no validation split")
    params_shardings = jax.tree.map(lambda s: s.sharding, trained.target.params)

    def terms(params: Any, batch: Any, frozen: Any) -> Any:
        return batch_terms(model, trained.model_params(params, frozen), batch, dtype, config.dpo, base=frozen,
                           block=trainer.loss_block)

    jitted = trained.jit(terms, in_shardings=(params_shardings, layout.batch_sharding), out_shardings=layout.replicated)
    validation = PairValidation(jitted, [{k: v[layout.rows] for k, v in b.items()} for b in batches], real, place)
    objective = dpo_objective(model, dtype, config.dpo, trained.model_params, block=trainer.loss_block)
    eval_loss = trained.jit(lambda params, batch, frozen: objective(params, batch, frozen)[0],
                            in_shardings=(params_shardings, layout.batch_sharding), out_shardings=layout.replicated)
    return validation, eval_loss


def main(config: DpoRunConfig, output_path: str, *, hooks: Sequence[ScheduledHook] = ()) -> TrainSummary:
    """Train (or resume) the DPO run ``config`` describes, writing into ``output_path``; return a summary.

    Before the first step the held-out pairs are scored (step 0 of ``metrics.jsonl``): the policy is
    its reference there, every reward 0 and the accuracy 0.5.

    Raises:
        ValueError: the data is not preference pairs, or the reference log-probs score other data.
        TrainingPreempted: SIGTERM arrived; a checkpoint was committed first.
    """
    if not output_path:
        raise ValueError(f"output_path must be non-empty, got {output_path!r}")
    join_distributed()
    setup = set_up_dpo(config, output_path)
    if setup.start.step == 0 and isinstance(setup.validation, PairValidation):
        try:
            if setup.validation.evaluate(setup.start.state.params) is not None:
                setup.writer.write(0, dict(setup.validation.last_metrics))
        except BaseException:
            setup.close()
            raise
    return train(setup, hooks)


def _cli(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m levanter.dpo.trainer CONFIG.json OUTPUT_PATH", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    result = main(dpo_config_from_dict(json.loads(fs.read_text(argv[0]))), argv[1])
    print(json.dumps(result.to_json()))
    return 0


if __name__ == "__main__":
    sys.exit(_cli(sys.argv[1:]))
