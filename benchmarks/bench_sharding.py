"""Sharded training on 8 simulated CPU devices, side by side: ``python -m benchmarks.bench_sharding``.

For each mesh layout (data=8, fsdp=8, fsdp=4 x tensor=2) the d=256, 4-layer Llama at seq 512
trains in the trainer, and a bare ``jax.jit`` step of the same math (value_and_grad of the same
loss, the same AdamW, the same parameter and batch shardings, donated state) runs on one fixed
batch. Rows: tokens/s of both, their ratio (goal: trainer step <= 1.10x bare), per-device parameter
and optimizer bytes, and the loss after the last step (equal across layouts: the same run).

The devices are simulated by XLA on this machine's cores, so absolute numbers say nothing about
accelerators; the ratio is the trainer's overhead over the bare step under each layout.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

DEVICES = 8
STEPS = 4  # measured steps per run, after WARMUP
WARMUP = 1
BATCH, SEQ = 8, 512
LAYOUTS = {
    "data=8": {"data": 8, "fsdp": 1, "tensor": 1},
    "fsdp=8": {"data": 1, "fsdp": 8, "tensor": 1},
    "fsdp=4 x tensor=2": {"data": 1, "fsdp": 4, "tensor": 2},
}


def _model():
    from benchmarks.bench_train import VOCAB
    from levanter.models.llama import LlamaConfig

    return LlamaConfig(vocab_size=VOCAB, hidden_dim=256, intermediate_dim=1024, num_heads=4, num_kv_heads=4,
                       num_layers=4, max_seq_len=SEQ)


def _bare_step_time(mesh_config, batch) -> float:
    """Seconds per step of a plain jitted, sharded value_and_grad + AdamW step on one fixed batch."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec

    from levanter.models.llama import transformed_llama
    from levanter.optim import AdamConfig
    from levanter.sharding import batch_spec, make_mesh, tree_shardings
    from levanter.trainer import loss_fn

    model_config = _model()
    mesh = make_mesh(mesh_config)
    model = transformed_llama(model_config)
    tx = AdamConfig(learning_rate=1e-3, warmup=5).build(WARMUP + STEPS)

    def init(key):
        params = model.init(key, jnp.zeros((1, SEQ), jnp.int32))
        return params, tx.init(params)

    shardings = tree_shardings(jax.eval_shape(init, jax.random.PRNGKey(0)), mesh,
                               units={"heads": model_config.num_heads, "kv_heads": model_config.num_kv_heads})
    batch_sharding = NamedSharding(mesh, PartitionSpec(*batch_spec()))
    params, opt_state = jax.jit(init, out_shardings=shardings)(jax.random.PRNGKey(0))

    def step(state, batch):
        params, opt_state = state
        loss, grads = jax.value_and_grad(lambda p: loss_fn(model, p, batch, jnp.float32))(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (jax.tree.map(jnp.add, params, updates), opt_state), loss

    step = jax.jit(step, in_shardings=(shardings, batch_sharding),
                   out_shardings=(shardings, NamedSharding(mesh, PartitionSpec())), donate_argnums=0)
    batch = jax.device_put(batch, batch_sharding)
    state = (params, opt_state)
    for _ in range(WARMUP):
        state, loss = step(state, batch)
    loss.block_until_ready()
    times = []
    for _ in range(STEPS):
        start = time.perf_counter()
        state, loss = step(state, batch)
        loss.block_until_ready()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _trainer_run(mesh_config, data: str, out: str) -> dict:
    from levanter.checkpoint import CheckpointConfig
    from levanter.config import TrainLmConfig
    from levanter.data import DatasetSpec
    from levanter.optim import AdamConfig
    from levanter.trainer import main

    config = TrainLmConfig.from_settings(
        (DatasetSpec(data),), _model(), AdamConfig(learning_rate=1e-3, warmup=5), batch_size=BATCH, seq_len=SEQ,
        num_train_steps=WARMUP + STEPS, eval_batches=0, peak_flops_per_device=1e11,
        checkpoint=CheckpointConfig(save_every=10_000), mesh=mesh_config)
    result = main(config, out)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    steady = [r["step_time"] for r in rows if "step_time" in r and r["step"] > WARMUP]
    return {"step_s": statistics.median(steady), "loss": result.final_loss, "memory": result.memory.to_json()}


def _child() -> None:
    """Runs inside the 8-device process: every layout, trainer and bare, one JSON line out."""
    import numpy as np

    from benchmarks.bench_train import VOCAB, _write_dataset
    from levanter.sharding import MeshConfig

    logging.getLogger("absl").setLevel(logging.ERROR)
    tmp = tempfile.mkdtemp(prefix="bench-sharding-")
    data = _write_dataset(os.path.join(tmp, "data"))
    batch = np.random.default_rng(1).integers(1, VOCAB, size=(BATCH, SEQ + 1)).astype(np.int32)
    results = {}
    for name, sizes in LAYOUTS.items():
        mesh = MeshConfig(**sizes)
        run = _trainer_run(mesh, data, os.path.join(tmp, name.replace(" ", "")))
        run["bare_step_s"] = _bare_step_time(mesh, batch)
        results[name] = run
    shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(results))


def main() -> dict:
    """Run the layouts in an 8-device subprocess; print and return the table's numbers."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={DEVICES}")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_sharding", "--child"], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"bench_sharding child failed:\n{proc.stderr[-4000:]}")
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    tokens = BATCH * SEQ
    model = _model()
    lines = [
        f"sharded training on {DEVICES} simulated CPU devices: Llama d={model.hidden_dim}, {model.num_layers} layers, "
        f"seq {SEQ}, batch {BATCH}, {model.num_params():,} params, median of {STEPS} steps after {WARMUP}",
        f"{'layout':<20}{'trainer tok/s':>14}{'bare tok/s':>12}{'trainer/bare':>14}{'goal':>8}"
        f"{'params/dev':>12}{'opt/dev':>11}{'temps/dev':>11}{'loss':>9}",
    ]
    for name, r in results.items():
        mem = r["memory"]
        temps = mem["temp_bytes_per_device"]
        lines.append(
            f"{name:<20}{tokens / r['step_s']:>14,.0f}{tokens / r['bare_step_s']:>12,.0f}"
            f"{r['step_s'] / r['bare_step_s']:>14.3f}{'<= 1.10':>8}"
            f"{mem['params_bytes_per_device'] / 2**20:>9.2f}MiB{mem['opt_state_bytes_per_device'] / 2**20:>8.2f}MiB"
            f"{(temps or 0) / 2**20:>8.1f}MiB{r['loss']:>9.4f}")
    print("\n".join(lines))
    return results


if __name__ == "__main__":
    if sys.argv[1:] == ["--child"]:
        _child()
    else:
        main()
