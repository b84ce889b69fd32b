"""Accelerator check: train ``llama_150m`` in bfloat16 and print tokens/s, MFU and step time.

Run through ``benchmarks/device_check.sh`` on a GPU or TPU machine (the project never needs it to
build or test). ``--smoke`` swaps in a tiny model and a few steps so the script itself can be
checked on a CPU. Data are random tokens (throughput does not depend on them), written to a
temporary folder in the tokenized format the trainer reads.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import statistics
import sys
import tempfile


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="device_check.sh", description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny model, few steps: a CPU check of this script")
    parser.add_argument("--steps", type=int, default=None, help="training steps (default 300; smoke: 6)")
    parser.add_argument("--batch-size", type=int, default=None, help="global batch (default 32; smoke: 8)")
    parser.add_argument("--seq-len", type=int, default=None, help="tokens per sequence (default 1024; smoke: 64)")
    parser.add_argument("--warmup", type=int, default=None, help="steps left out of the medians (default 20; smoke: 2)")
    parser.add_argument("--fsdp", type=int, default=1, help="fsdp axis of the mesh (data axis takes the rest)")
    parser.add_argument("--tensor", type=int, default=1, help="tensor axis of the mesh")
    args = parser.parse_args(argv)
    defaults = (6, 8, 64, 2) if args.smoke else (300, 32, 1024, 20)
    for name, default in zip(("steps", "batch_size", "seq_len", "warmup"), defaults, strict=True):
        if getattr(args, name) is None:
            setattr(args, name, default)
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
    if args.warmup >= args.steps:
        parser.error(f"--warmup must be < --steps, got warmup {args.warmup} and steps {args.steps}")
    return args


def main(argv: list[str]) -> dict:
    args = _parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("absl").setLevel(logging.ERROR)
    import jax
    import jax.numpy as jnp

    from benchmarks.bench_train import _write_dataset
    from experiments.llama import llama_150m, llama_nano
    from levanter.checkpoint import CheckpointConfig
    from levanter.config import ComputeDtype, TrainLmConfig
    from levanter.data import DatasetSpec
    from levanter.flops import device_peak_flops
    from levanter.optim import AdamConfig
    from levanter.sharding import MeshConfig
    from levanter.trainer import main as train

    backend = jax.default_backend()
    if backend == "cpu" and not args.smoke:
        raise SystemExit("device_check: JAX sees only CPU devices (install jax with its CUDA or TPU plugin); "
                         "use --smoke for a CPU check of the script")
    model = llama_nano if args.smoke else llama_150m
    if args.seq_len > model.max_seq_len:
        model = dataclasses.replace(model, max_seq_len=args.seq_len)
    tmp = tempfile.mkdtemp(prefix="device-check-")
    data = _write_dataset(os.path.join(tmp, "data"), vocab=model.vocab_size, docs=3000 if args.smoke else 20_000)
    config = TrainLmConfig.from_settings(
        (DatasetSpec(data),), model, AdamConfig(learning_rate=3e-4, warmup=min(100, args.steps // 10 + 1)),
        batch_size=args.batch_size, seq_len=args.seq_len, num_train_steps=args.steps,
        compute_dtype=ComputeDtype.BFLOAT16, eval_batches=0, checkpoint=CheckpointConfig(save_every=args.steps),
        log_every=1, mesh=MeshConfig(data=-1, fsdp=args.fsdp, tensor=args.tensor))
    result = train(config, os.path.join(tmp, "run"))
    with open(result["metrics_path"]) as f:
        rows = [json.loads(line) for line in f]
    steady = [r for r in rows if "step_time" in r and r["step"] > args.warmup]
    step_time = statistics.median(r["step_time"] for r in steady)
    tokens_per_s = args.batch_size * args.seq_len / step_time
    flops_per_step = model.flops_per_token(args.seq_len) * args.batch_size * args.seq_len
    devices = result["devices"]
    peak = device_peak_flops(jnp.bfloat16)
    mfu = flops_per_step / step_time / (peak * devices)
    input_wait = statistics.median(r["input_wait_frac"] for r in steady)
    summary = {
        "device": jax.devices()[0].device_kind, "devices": devices, "mesh": result["mesh"],
        "model_params": model.num_params(), "batch": args.batch_size, "seq_len": args.seq_len, "steps": args.steps,
        "step_time_s": step_time, "tokens_per_s": tokens_per_s, "tokens_per_s_per_device": tokens_per_s / devices,
        "mfu": mfu, "peak_flops_per_device": peak, "input_wait_frac": input_wait, "final_loss": result["final_loss"],
        "params_bytes_per_device": result["memory"]["params_bytes_per_device"],
        "temp_bytes_per_device": result["memory"]["temp_bytes_per_device"],
    }
    print(f"device       {summary['device']} x{devices}, mesh {result['mesh']}")
    print(f"model        {model.num_params() / 1e6:.1f}M params, bf16 compute, batch {args.batch_size} x {args.seq_len}")
    print(f"step time    {step_time * 1e3:.1f} ms (median of {len(steady)} steps after {args.warmup})")
    print(f"tokens/s     {tokens_per_s:,.0f} ({tokens_per_s / devices:,.0f} per device)")
    print(f"MFU          {mfu:.1%} of {peak / 1e12:.3g} TFLOP/s bf16 peak per device")
    print(f"input wait   {input_wait:.1%} of a step (median; high means the input pipeline limits speed)")
    print(f"final loss   {result['final_loss']:.4f}")
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
