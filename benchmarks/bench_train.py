"""Trainer overheads on this CPU, side by side: ``python -m benchmarks.bench_train``.

Rows (medians over interleaved repetitions):
  * trainer step vs a bare jitted JAX loop doing the same math on the same batch;
  * time blocked waiting for input (median and p95, as a share of step time);
  * time blocked in asynchronous checkpoint saves, as a share of training time;
  * resume-to-first-step vs fresh-start-to-first-step;
  * tokens/s and model FLOPs utilisation.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from array_record.python.array_record_module import ArrayRecordWriter

from levanter import trainer
from levanter.checkpoint import CheckpointConfig
from levanter.data import DatasetSpec
from levanter.flops import device_peak_flops
from levanter.models.llama import LlamaConfig, transformed_llama
from levanter.optim import AdamConfig
from levanter.trainer import TrainLmConfig, loss_fn
from rigging import filesystem as fs
from zephyr.shards import TOKENIZED_FORMAT, write_index

REPS = 3
STEPS = 100
VOCAB = 512
MODEL = LlamaConfig(vocab_size=VOCAB, hidden_dim=64, intermediate_dim=256, num_heads=4, num_kv_heads=2,
                    num_layers=2, max_seq_len=128)
BATCH, SEQ = 16, 128


def _write_dataset(root: str, vocab: int = VOCAB, docs: int = 3000) -> str:
    """A tokenized ``train`` split of ``docs`` random documents (20-300 tokens) over ``vocab`` ids."""
    rng = np.random.default_rng(0)
    os.makedirs(os.path.join(root, "train"))
    writer = ArrayRecordWriter(os.path.join(root, "train", "part-00000.array_record"), "group_size:1")
    tokens = 0
    for _ in range(docs):
        doc = rng.integers(1, vocab, size=int(rng.integers(20, 300)))
        tokens += len(doc)
        writer.write(np.asarray(doc, "<u4").tobytes())
    writer.close()
    shard = os.path.join(root, "train", "part-00000.array_record")
    write_index(root, {"format": TOKENIZED_FORMAT, "vocab_size": vocab, "eos_id": 0, "splits": {"train": {
        "records": docs, "tokens": tokens,
        "shards": [{"path": "train/part-00000.array_record", "records": docs, "tokens": tokens,
                    "bytes": os.path.getsize(shard), "sha256": fs.sha256_of(shard)}]}}})
    return root


def _config(data: str, steps: int, peak: float) -> TrainLmConfig:
    return TrainLmConfig.from_settings((DatasetSpec(data),), MODEL, AdamConfig(learning_rate=1e-3, warmup=5),
                                       batch_size=BATCH, seq_len=SEQ, num_train_steps=steps, eval_batches=0,
                                       peak_flops_per_device=peak,
                                       checkpoint=CheckpointConfig(save_every=25, keep_last=2))


def _rows(out: str) -> list[dict]:
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def _bare_step_time(batch: np.ndarray) -> float:
    """Seconds per step of a plain jitted value_and_grad + AdamW loop on one fixed batch."""
    model = transformed_llama(MODEL)
    tx = AdamConfig(learning_rate=1e-3, warmup=5).build(STEPS)
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, SEQ), jnp.int32))
    opt_state = tx.init(params)

    @jax.jit
    def step(params, opt_state, batch):
        loss, grads = jax.value_and_grad(lambda p: loss_fn(model, p, batch, jnp.float32))(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return jax.tree.map(jnp.add, params, updates), opt_state, loss

    batch = jnp.asarray(batch)
    for _ in range(3):
        params, opt_state, loss = step(params, opt_state, batch)
    loss.block_until_ready()
    start = time.perf_counter()
    for _ in range(STEPS):
        params, opt_state, loss = step(params, opt_state, batch)
    loss.block_until_ready()
    return (time.perf_counter() - start) / STEPS


def main() -> dict[str, float]:
    """Run the benchmark and return the medians (also printed as a table)."""
    logging.getLogger("absl").setLevel(logging.ERROR)
    tmp = tempfile.mkdtemp(prefix="bench-train-")
    data = _write_dataset(os.path.join(tmp, "data"))
    peak = device_peak_flops(jnp.float32)
    rng = np.random.default_rng(1)
    fixed_batch = rng.integers(1, VOCAB, size=(BATCH, SEQ + 1)).astype(np.int32)
    trainer_step, bare_step, wait_med, wait_p95, ckpt_share = [], [], [], [], []
    tok_s, mfu, fresh_first, resume_first = [], [], [], []
    for rep in range(REPS):
        out = os.path.join(tmp, f"run-{rep}")
        result = trainer.main(_config(data, STEPS, peak), out)
        rows = [r for r in _rows(out) if "step_time" in r]
        steady = [r for r in rows if r["step"] > 3]
        trainer_step.append(statistics.median(r["step_time"] for r in steady))
        waits = np.array([r["input_wait_frac"] for r in steady])
        wait_med.append(float(np.median(waits)))
        wait_p95.append(float(np.percentile(waits, 95)))
        train_time = sum(r["step_time"] for r in rows)
        ckpt_share.append(result.checkpoint_blocked_s / train_time)
        tok_s.append(statistics.median(r["tokens_per_s"] for r in steady))
        mfu.append(statistics.median(r["mfu"] for r in steady))
        bare_step.append(_bare_step_time(fixed_batch))
        # Fresh start: one step from nothing. Resume: one step after the STEPS-step checkpoint.
        fresh_out = os.path.join(tmp, f"fresh-{rep}")
        trainer.main(_config(data, 1, peak), fresh_out)
        fresh_first.append(next(r for r in _rows(fresh_out) if "time_to_first_step_s" in r)["time_to_first_step_s"])
        trainer.main(_config(data, STEPS + 1, peak), out)
        resumed = [r for r in _rows(out) if r["step"] == STEPS + 1 and "time_to_first_step_s" in r]
        resume_first.append(resumed[0]["time_to_first_step_s"])

    med = statistics.median
    res = {
        "trainer_step_ms": med(trainer_step) * 1e3,
        "bare_step_ms": med(bare_step) * 1e3,
        "input_wait_median": med(wait_med),
        "input_wait_p95": med(wait_p95),
        "checkpoint_blocked_share": med(ckpt_share),
        "fresh_first_step_s": med(fresh_first),
        "resume_first_step_s": med(resume_first),
        "tokens_per_s": med(tok_s),
        "mfu": med(mfu),
        "peak_flops": peak,
    }
    ratio = res["trainer_step_ms"] / res["bare_step_ms"]
    resume_ratio = res["resume_first_step_s"] / res["fresh_first_step_s"]
    lines = [
        f"levanter trainer benchmark on {jax.devices()[0].device_kind} x{jax.device_count()}, "
        f"{REPS} interleaved reps, {STEPS} steps, batch {BATCH}x{SEQ}, {MODEL.num_params():,} params",
        f"{'measure':<42}{'value':>14}{'goal':>16}",
        f"{'trainer step (median)':<42}{res['trainer_step_ms']:>12.2f}ms{'':>16}",
        f"{'bare jitted loop step (median)':<42}{res['bare_step_ms']:>12.2f}ms{'':>16}",
        f"{'  trainer / bare':<42}{ratio:>14.3f}{'<= 1.10':>16}",
        f"{'input wait, median share of step':<42}{res['input_wait_median']:>14.2%}{'< 5%':>16}",
        f"{'input wait, p95 share of step':<42}{res['input_wait_p95']:>14.2%}{'< 20%':>16}",
        f"{'blocked in checkpoint saves / train time':<42}{res['checkpoint_blocked_share']:>14.2%}{'< 2%':>16}",
        f"{'fresh start to first step':<42}{res['fresh_first_step_s']:>13.2f}s{'':>16}",
        f"{'resume to first step':<42}{res['resume_first_step_s']:>13.2f}s{'':>16}",
        f"{'  resume / fresh':<42}{resume_ratio:>14.3f}{'<= 1.5':>16}",
        f"{'tokens/s (median)':<42}{res['tokens_per_s']:>14,.0f}{'':>16}",
        f"{'MFU vs measured matmul peak':<42}{res['mfu']:>14.2%}{'':>16}",
        f"{'  (peak: 1024^2 f32 matmul)':<42}{peak / 1e9:>10.1f}GF/s{'':>16}",
    ]
    print("\n".join(lines))
    return res


if __name__ == "__main__":
    main()
