"""One optimizer step on chat windows whose micro-batches weigh very differently: what gradient
accumulation and a data mesh must agree on (the whole batch's token mean).

``python -m testsupport.accumulation OUT [CONFIG RUN_OUT]`` runs the step on a data mesh of this
process's devices (``grad_accum`` 1 and 2), saving the parameters to ``OUT/accum<k>.npz``; given a
trainer config (JSON) and an output folder, it then trains that run too on the same devices (one
process for a test module's multi-device work: a process's start and imports cost seconds). It
prints one JSON line: the devices, the step's metrics, and the run's summary (or null).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import numpy as np

from levanter.models.llama import LlamaConfig

CONFIG = LlamaConfig(vocab_size=50, hidden_dim=16, intermediate_dim=32, num_heads=2, num_kv_heads=1,
                     num_layers=2, max_seq_len=64)
WINDOW = 40
Z_LOSS_WEIGHT = 1e-2


def unequal_windows(seed: int = 0) -> np.ndarray:
    """``[4, 3, WINDOW + 1]`` chat windows: rows 0 and 2 each pack two conversations with many loss
    targets, rows 1 and 3 hold one conversation with a single target. Row ``r`` goes to micro-batch
    ``r % grad_accum``, so with 2 micro-batches one holds 52 targets and the other 4."""
    from levanter.data.chat import decode_chat_record, encode_chat_record, pad_window

    rng = np.random.default_rng(seed)

    def conversation(n_user: int, n_assistant: int, tail: int) -> tuple[list[int], list[int]]:
        ids = rng.integers(1, CONFIG.vocab_size, size=n_user + n_assistant + tail).tolist()
        return ids, [0] * n_user + [1] * n_assistant + [0] * tail

    def window(conversations: list[tuple[list[int], list[int]]]) -> np.ndarray:
        return pad_window(decode_chat_record(encode_chat_record(conversations)), WINDOW + 1)

    heavy = [window([conversation(2, 14, 1), conversation(3, 12, 1)]) for _ in range(2)]
    light = [window([conversation(12, 2, 2)]) for _ in range(2)]
    return np.stack([heavy[0], light[0], heavy[1], light[1]])


def one_step(windows: np.ndarray, grad_accum: int, mesh: Any = None) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Parameters (``module/name``) and metrics after one SGD step at rate 1 (the update is minus the
    gradient) from ``random_params(CONFIG)`` (numpy: no init to compile, the same in every process),
    with z-loss; on ``mesh`` (levanter's) the batch is split over its batch axes and the parameters
    replicated."""
    import jax
    import jax.numpy as jnp
    import optax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from levanter.sharding import batch_spec
    from levanter.training import make_train_step
    from testsupport.levanter_data import random_params

    model = CONFIG.build(jnp.float32)
    params = jax.tree.map(jnp.asarray, random_params(CONFIG))
    tx = optax.inject_hyperparams(optax.sgd)(learning_rate=1.0)
    state = {"params": params, "opt_state": tx.init(params), "step": jnp.zeros((), jnp.int32),
             "key": jax.random.PRNGKey(1)}
    batch, sharding = jnp.asarray(windows), None
    if mesh is not None:
        sharding = NamedSharding(mesh, P(*batch_spec()))
        state = jax.device_put(state, NamedSharding(mesh, P()))
        batch = jax.device_put(batch, sharding)
    step = make_train_step(model, tx, jnp.float32, grad_accum, sharding, Z_LOSS_WEIGHT)
    after, metrics = jax.jit(step)(state, batch)
    flat = {f"{m}/{n}": np.asarray(v) for m, names in after["params"].items() for n, v in names.items()}
    return flat, {k: float(v) for k, v in metrics.items()}


def _main(out: str, run: list[str]) -> None:
    import jax

    from levanter.config import config_from_dict
    from levanter.sharding import MeshConfig, make_mesh
    from levanter.trainer import main

    if len(run) not in (0, 2):
        raise SystemExit(f"usage: python -m testsupport.accumulation OUT [CONFIG RUN_OUT], got {run!r} after OUT")
    mesh = make_mesh(MeshConfig())
    metrics = {}
    for accum in (1, 2):
        params, metrics[accum] = one_step(unequal_windows(), accum, mesh)
        arrays: dict[str, Any] = dict(params)  # as savez's keywords (its allow_pickle among them, by type)
        np.savez(os.path.join(out, f"accum{accum}.npz"), **arrays)
    summary = None
    if run:
        with open(run[0]) as f:
            summary = main(config_from_dict(json.load(f)), run[1]).to_json()
    print(json.dumps({"devices": jax.device_count(), "metrics": metrics, "run": summary}, default=str))


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2:])
