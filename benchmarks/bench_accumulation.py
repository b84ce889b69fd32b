"""Gradient accumulation by tokens on the tutorial model: ``llama_nano`` (vocabulary 512) trained 100
steps on 8 chat windows a step whose micro-batches hold very different numbers of loss targets, with
``grad_accum`` 1 and 4, and with 4 micro-batches weighed equally (the mean of their means, what the
trainer did before it weighed them by their targets).

Rows ``r = 0 mod 4`` count every target, the others only their last 8, so with 4 micro-batches
(row ``r`` in micro-batch ``r % 4``) one holds 256 targets and each other 16. Goal: ``grad_accum`` 4
takes the steps of 1 (parameters equal to float32 rounding, the same final loss).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from benchmarks.bench_moments import SEQ, VOCAB, bigram_batches

STEPS = 100


def windows(count: int, seed: int) -> np.ndarray:
    """``[count, BATCH, 3, SEQ + 1]`` chat windows (ids, loss mask, segment ids) of bigram ids."""
    ids = bigram_batches(count, seed)
    mask = np.zeros_like(ids)
    mask[:, 0::4, :] = 1
    mask[:, :, -8:] = 1
    return np.stack([ids, mask, np.ones_like(ids)], axis=2)


def train(grad_accum: int, by_targets: bool = True, steps: int = STEPS) -> dict:
    """Train ``llama_nano``; its final parameters and held-out loss (``by_targets`` False: the micro-batches weigh the same)."""
    import jax
    import jax.numpy as jnp

    from experiments.llama import llama_nano
    from levanter.optim import AdamConfig
    from levanter.training import TrainState, make_train_step, state_initializer
    from levanter.training.loss import loss_fn
    from levanter.training.step import WEIGHT, lm_objective

    model_config = dataclasses.replace(llama_nano, vocab_size=VOCAB)
    optimizer = AdamConfig(learning_rate=3e-3, warmup=20, weight_decay=0.1)
    state: TrainState = jax.jit(state_initializer(model_config, optimizer.at_rate(0.0)))(jax.random.PRNGKey(0))
    model = model_config.build(jnp.float32)
    objective = None
    if not by_targets:
        lm = lm_objective(model, jnp.float32)

        def objective(params, batch, frozen):  # the language-model loss without its weight
            total, (loss, metrics) = lm(params, batch, frozen)
            return total, (loss, {k: v for k, v in metrics.items() if k != WEIGHT})

    step = jax.jit(make_train_step(model, optimizer.at_rate, jnp.float32, grad_accum, objective=objective),
                   donate_argnums=0)
    rate = optimizer.rate_of_step(steps)
    data = windows(steps, seed=1)
    for i in range(steps):
        state, _ = step(state, jnp.asarray(data[i]), rate(i))
    held_out = jax.jit(lambda p, b: loss_fn(model, p, b, jnp.float32))
    loss = float(np.mean([float(held_out(state.params, jnp.asarray(b))) for b in windows(8, seed=99)]))
    return {"params": jax.tree.map(np.asarray, state.params), "final_loss": loss}


def main() -> None:
    print(f"== Gradient accumulation: llama_nano, {STEPS} steps of 8 chat windows x {SEQ}, micro-batches of "
          "256 and 16 loss targets ==")
    base = None
    for label, accum, by_targets in (("grad_accum 1", 1, True), ("grad_accum 4, by targets", 4, True),
                                     ("grad_accum 4, micro-batches equal", 4, False)):
        started = time.perf_counter()
        result = train(accum, by_targets)
        base = base or result
        apart = max(float(np.max(np.abs(a - b))) for a, b in zip(
            _leaves(result["params"]), _leaves(base["params"]), strict=True))
        print(f"{label:36s} final loss {result['final_loss']:.5f}  max |param - grad_accum 1| {apart:.2e}  "
              f"({time.perf_counter() - started:.1f} s)")


def _leaves(tree: dict) -> list[np.ndarray]:
    return [tree[m][n] for m in sorted(tree) for n in sorted(tree[m])]


if __name__ == "__main__":
    main()
