"""Adam's moments in less memory, and what it does to the loss: ``llama_nano`` trained for 400
steps with float32 moments, bfloat16 moments, and bfloat16 moments with a factored second moment,
side by side (same data, same init, same schedule), at beta2 0.95 and 0.999 (where bfloat16 moments
rounded to nearest froze).

The data are sequences of a random bigram chain over 512 ids (learnable; its entropy is the floor
of the loss), so the losses are comparable to a fraction of a percent. The final loss is the mean
loss of 8 held-out batches. Goal: each compact variant within 1% of float32 moments.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

VOCAB = 512
BATCH, SEQ = 8, 128
STEPS = 400


def bigram_batches(count: int, seed: int, rows: int = BATCH, length: int = SEQ + 1) -> np.ndarray:
    """``[count, rows, length]`` token ids of a fixed random bigram chain (each id has 8 likely successors)."""
    table_rng = np.random.default_rng(1234)
    successors = table_rng.integers(0, VOCAB, size=(VOCAB, 8))
    weights = table_rng.dirichlet(np.full(8, 0.5), size=VOCAB)
    rng = np.random.default_rng(seed)
    out = np.empty((count, rows, length), np.int32)
    state = rng.integers(0, VOCAB, size=(count, rows))
    for i in range(length):
        out[:, :, i] = state
        pick = (rng.random((count, rows, 1)) > np.cumsum(weights[state], axis=-1)).sum(-1)
        state = successors[state, np.minimum(pick, 7)]
    return out


def train(moment_dtype: str = "float32", factored: bool = False, steps: int = STEPS, seed: int = 0,
          beta2: float = 0.95, seq: int = SEQ) -> dict:
    """Train ``llama_nano`` (vocabulary 512) for ``steps`` steps of ``BATCH`` sequences of ``seq``
    tokens; its per-step losses and held-out loss (8 batches of the same shape)."""
    import jax
    import jax.numpy as jnp

    from experiments.llama import llama_nano
    from levanter.optim import AdamConfig
    from levanter.training import TrainState, make_train_step
    from levanter.training.loss import loss_fn
    from levanter.training.state import params_initializer, state_of_params

    model_config = dataclasses.replace(llama_nano, vocab_size=VOCAB)
    optimizer = AdamConfig(learning_rate=3e-3, warmup=20, weight_decay=0.1, beta2=beta2, moment_dtype=moment_dtype,
                           factored_second_moment=factored)
    tx = optimizer.at_rate(0.0)
    # The parameters in a program of their own (the random init, the costly compile), the same for
    # the three moment variants; the optimizer state (what differs) in a small second one.
    params, key = jax.jit(params_initializer(model_config))(jax.random.PRNGKey(seed))
    state: TrainState = jax.jit(state_of_params(tx))(params, key)
    model = model_config.build(jnp.float32)
    step = jax.jit(make_train_step(model, optimizer.at_rate, jnp.float32, 1), donate_argnums=0)
    rate = optimizer.rate_of_step(steps)
    data = bigram_batches(steps, seed=seed + 1, length=seq + 1)
    losses = []
    for i in range(steps):
        state, metrics = step(state, jnp.asarray(data[i]), rate(i))
        losses.append(metrics["loss"])
    held_out = jax.jit(lambda p, b: loss_fn(model, p, b, jnp.float32))
    evaluation = [float(held_out(state.params, jnp.asarray(b))) for b in bigram_batches(8, seed=99, length=seq + 1)]
    return {"losses": [float(x) for x in losses], "final_loss": float(np.mean(evaluation))}


def main() -> None:
    print("== Adam moments: llama_nano, 400 steps of 8 x 128 bigram tokens, held-out loss ==")
    for beta2 in (0.95, 0.999):
        base = None
        for label, dtype, factored in (("float32 moments", "float32", False), ("bfloat16 moments", "bfloat16", False),
                                       ("bfloat16 + factored second moment", "bfloat16", True)):
            started = time.perf_counter()
            result = train(dtype, factored, beta2=beta2)
            base = base if base is not None else result["final_loss"]
            print(f"beta2 {beta2}: {label:36s} final loss {result['final_loss']:.4f}  "
                  f"({result['final_loss'] / base - 1:+.2%} vs float32; {time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
