"""The key/value-cache decoder (``levanter.inference.Engine``) measured: ``python -m benchmarks.bench_generate``.

Parameters are random (``model.init``; the output head scaled x40 so greedy choices are not near-ties):
speed does not depend on what the weights say. Tables:

* **decode and prefill**, per model preset and batch (1, 8, 64): ``batch`` requests of a
  ``--prompt-len`` prompt and ``--new-tokens`` new tokens, one slot each. Prefill tokens/s is
  ``batch * prompt_len / t`` for a run that only prefills (``max_tokens=1``); decode tokens/s is
  ``batch * (new_tokens - 1) / t_decode``, ``t_decode`` the engine's decode trips of a whole run
  (each from its dispatch to its tokens ready on the host: the device loop and its one sync, not the
  host's prefill dispatches, whose jitter a difference of two runs' totals carried), the median of
  ``--reps`` runs after one that compiles.
* **the HBM roofline**: what a good decoder must read at a step, once: every weight but the
  embedding table (of which it reads the batch's rows; a tied table is the head, read whole) and the
  live cache, ``layers * 2 (keys, values) * batch * kv_heads * head_dim * bytes per value`` times the
  positions before the step's token, on average ``prompt_len + (new_tokens - 2) / 2`` over the
  decode steps (not the slot cache as allocated: reading all of it is the decoder's waste, not the
  bound). ``roofline step time = those bytes / bandwidth``, 819e9 B/s (a TPU v5e's HBM;
  ``--bandwidth``); the fraction is roofline step time / measured step time (1.0 is the bound).
  The JSON also has ``alloc_roofline_ms_per_step``, the earlier count (every parameter and the whole
  slot cache). On a CPU the figure is shown against the same bandwidth only for form.
* **the decoder's ways** (``--decode``, comma-separated ``levanter.models.impl.Decode`` names): how a
  step reads and writes the cache, e.g. ``full,auto`` for the first decoder (every slot position
  read, XLA's batched writes) beside the default (on a TPU: the live prefix read, a Pallas kernel's
  writes). Each row is printed, and the JSON rewritten, as soon as it is measured.
* **the output heads** (``--head``, comma-separated ``levanter.models.impl.DecodeHead`` names): each
  row (each of the decoder's ways) measured with each, e.g. ``plain,fused``: a greedy step's head by
  XLA (float32 logits written to HBM, then the argmax and log-sum-exp over them) beside the fused
  Pallas kernel (``levanter.ops.pallas_head``: the logits never leave vector memory). ``auto`` is
  the fused one on a TPU for two slots or more; off a TPU ``fused`` runs in Pallas' interpreter (slowly: for form only).
* **where the time went** (``--profile DIR``): one more run of each row traced under
  ``DIR/<preset>-<decode>-<head>-<batch>``, its device time by op printed under the row
  (``benchmarks.device_profile``) and kept in the JSON.
* **against recomputing** (the CPU default, ``--compare``): a llama_nano-size model at context 512,
  batch 8, 256-token prompts and 256 new tokens, greedy: the engine vs ``generate_by_recompute``
  (the whole context recomputed per token, one host trip each), goal >= 10x; and greedy equality
  with it on 64 prompts of 128 new tokens, token for token.

On a TPU host (``bash nix/tpu-host.sh install 1``), from the repository root::

    python -m benchmarks.bench_generate --preset llama_150m --preset llama_1_4b

and the fused greedy head against the plain one, side by side from one process::

    python -m benchmarks.bench_generate --preset llama_150m --batches 1,8,64 --head plain,fused --no-compare

and issue 58's comparison (``--decode full,auto`` for the 150m, the default for the 1.4B) is
``bash benchmarks/bench_generate_tpu.sh``.

(bfloat16 parameters and compute there by default; results also to ``$OUT/bench_generate.json``
when ``OUT`` is set).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import time
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from levanter.models.impl import DecodeHead, Impl

V5E_HBM_BYTES_PER_S = 819e9
NANO_CPU = dict(vocab_size=4096, hidden_dim=32, intermediate_dim=128, num_heads=2, num_kv_heads=2, num_layers=2,
                max_seq_len=512)


def _preset(name: str) -> Any:
    from levanter.models.llama import LlamaConfig

    if name == "nano":
        return LlamaConfig(**NANO_CPU)
    import experiments.llama as presets

    return getattr(presets, name)


def random_model(config: Any, param_dtype: Any, compute_dtype: Any, seed: int = 0) -> tuple[Any, Any]:
    """The model and random parameters (stacked; the head scaled x40; cast to ``param_dtype``)."""
    model = config.build(compute_dtype)
    params = jax.jit(model.init)(jax.random.PRNGKey(seed), jnp.zeros((1, 8), jnp.int32))
    params["lm_head"]["w"] = params["lm_head"]["w"] * 40.0
    return model, jax.tree.map(lambda a: a.astype(param_dtype), params)


def _prompts(count: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, size=length).tolist() for _ in range(count)]


def _bytes(tree: Any) -> int:
    return sum(int(np.prod(a.shape)) * jnp.dtype(a.dtype).itemsize for a in jax.tree.leaves(tree))


def _timed(engine: Any, prompts: list[list[int]], sampling: Any) -> float:
    start = time.perf_counter()
    done = engine.generate(prompts, sampling)
    jax.block_until_ready(jnp.zeros(()))
    assert all(c.finish_reason for c in done)
    return time.perf_counter() - start


@contextlib.contextmanager
def _decode_trips() -> Iterator[list[float]]:
    """The seconds of each decode trip the engine makes meanwhile (the device loop, dispatch to
    results ready), appended to the list yielded: the engine's ``decode_steps`` timed in place."""
    from levanter.inference import engine as engine_module

    trips: list[float] = []
    plain = engine_module.decode_steps

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        out = jax.block_until_ready(plain(*args, **kwargs))
        trips.append(time.perf_counter() - start)
        return out

    engine_module.decode_steps = timed
    try:
        yield trips
    finally:
        engine_module.decode_steps = plain


def read_per_step(model: Any, params: Any, batch: int, prompt_len: int, new_tokens: int) -> tuple[int, int]:
    """(weight bytes, mean live cache bytes) a decode step must read (the module's roofline)."""
    c = model.config
    weights = _bytes(params)
    if not c.tie_embeddings:  # the table's rows are gathered; only a tied table is read whole, as the head
        table = params["embed"]["embeddings"]
        weights += batch * table.shape[1] * table.dtype.itemsize - _bytes(table)
    per_position = c.num_layers * 2 * batch * c.num_kv_heads * c.head_dim * jnp.dtype(model.compute_dtype).itemsize
    return weights, int(per_position * (prompt_len + (new_tokens - 2) / 2))


def decode_row(model: Any, params: Any, batch: int, prompt_len: int, new_tokens: int, reps: int,
               bandwidth: float, trace_dir: str | None = None) -> dict[str, Any]:
    """One row of the decode/prefill table; with ``trace_dir``, one more run (prefill and decode)
    traced there, and where its device time went (``benchmarks.device_profile``) in ``"profile"``."""
    from levanter.inference import Engine, SamplingParams

    length = prompt_len + new_tokens
    started = time.perf_counter()
    engine = Engine(model, params, slots=batch, max_len=length, steps_per_sync=min(new_tokens, 64))
    prompts = _prompts(batch, prompt_len, model.config.vocab_size, seed=batch)
    full, first = SamplingParams(max_tokens=new_tokens), SamplingParams(max_tokens=1)
    _timed(engine, prompts, full)  # compiles prefill and the decode loop
    compiled_s = time.perf_counter() - started
    prefill = statistics.median(_timed(engine, prompts, first) for _ in range(reps))
    decodes = []
    for _ in range(reps):
        with _decode_trips() as trips:
            _timed(engine, prompts, full)
        decodes.append(sum(trips))
    decode = statistics.median(decodes)
    step = decode / (new_tokens - 1)
    cache = _bytes(jax.eval_shape(lambda: model.empty_cache(batch, length)))
    weights, live = read_per_step(model, params, batch, prompt_len, new_tokens)
    roofline = (weights + live) / bandwidth
    profile = None
    if trace_dir:
        from benchmarks.device_profile import summarise_trace  # only a traced row reads a trace

        with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
            _timed(engine, prompts, full)
        profile = summarise_trace(trace_dir)
    return {"profile": profile, "decode": model.impl.decode.value, "head": model.impl.decode_head.value,
            "batch": batch, "prefill_tokens_per_s": batch * prompt_len / prefill,
            "decode_tokens_per_s": batch * (new_tokens - 1) / decode, "ms_per_step": step * 1e3,
            "roofline_ms_per_step": roofline * 1e3, "roofline_fraction": roofline / step,
            "alloc_roofline_ms_per_step": (_bytes(params) + cache) / bandwidth * 1e3,
            "param_bytes": _bytes(params), "weight_bytes_read": weights, "live_cache_bytes_read": live,
            "cache_bytes": cache, "first_run_s": compiled_s}


def against_recompute(reps: int = 1) -> dict[str, Any]:
    """The CPU comparison (llama_nano-size, context 512, batch 8, 256 + 256 tokens) and greedy equality."""
    from levanter.generate import generate_by_recompute
    from levanter.inference import Engine, SamplingParams
    from levanter.models.llama import LlamaConfig

    config = LlamaConfig(**NANO_CPU)
    model, params = random_model(config, jnp.float32, jnp.float32)
    prompts = _prompts(8, 256, config.vocab_size, seed=1)
    engine = Engine(model, params, slots=8, max_len=512, steps_per_sync=64)
    _timed(engine, prompts, SamplingParams(max_tokens=256))
    engine_s = statistics.median(_timed(engine, prompts, SamplingParams(max_tokens=256)) for _ in range(reps))
    generate_by_recompute(config, params, prompts[0], max_new_tokens=2)  # compiles
    start = time.perf_counter()
    for prompt in prompts:
        generate_by_recompute(config, params, prompt, max_new_tokens=256)
    recompute_s = time.perf_counter() - start

    checked = _prompts(64, 0, config.vocab_size)  # lengths vary below
    rng = np.random.default_rng(2)
    checked = [p + rng.integers(0, config.vocab_size, size=int(rng.integers(4, 64))).tolist() for p in checked]
    engine = Engine(model, params, slots=16, max_len=192, steps_per_sync=32)
    got = engine.generate(checked, SamplingParams(max_tokens=128))
    equal = sum(c.token_ids == generate_by_recompute(config, params, p, max_new_tokens=128)
                for p, c in zip(checked, got, strict=True))
    return {"engine_s": engine_s, "recompute_s": recompute_s, "speedup": recompute_s / engine_s,
            "greedy_equal": equal, "greedy_prompts": len(checked)}


def _print_header(name: str, prompt_len: int, new_tokens: int, dtype: str) -> None:
    print(f"\n{name} ({dtype} parameters and compute, {jax.devices()[0].device_kind}), "
          f"{prompt_len}-token prompts + {new_tokens} new tokens")
    print(f"{'decode':>7} {'head':>6} {'batch':>5} {'prefill tok/s':>14} {'decode tok/s':>13} {'ms/step':>9} {'roofline ms':>12} "
          f"{'fraction':>9} {'first run s':>12}", flush=True)


def _print_row(r: dict[str, Any]) -> None:
    print(f"{r['decode']:>7} {r['head']:>6} {r['batch']:>5} {r['prefill_tokens_per_s']:>14,.0f} {r['decode_tokens_per_s']:>13,.1f} "
          f"{r['ms_per_step']:>9.3f} {r['roofline_ms_per_step']:>12.3f} {r['roofline_fraction']:>9.2f} "
          f"{r['first_run_s']:>12.1f}", flush=True)


def _save(results: dict[str, Any]) -> None:
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "bench_generate.json"), "w") as f:
            json.dump(results, f, indent=2)


def main(argv: list[str] | None = None) -> None:
    on_cpu = jax.default_backend() == "cpu"
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_generate")
    parser.add_argument("--preset", action="append", help="experiments.llama preset, or nano (repeatable)")
    parser.add_argument("--batches", default="1,8,64")
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=128 if not on_cpu else 64)
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32" if on_cpu else "bfloat16")
    parser.add_argument("--bandwidth", type=float, default=V5E_HBM_BYTES_PER_S, help="bytes/s (819e9: TPU v5e HBM)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--decode", default="auto", help="levanter.models.impl.Decode names, comma-separated: "
                        "each row is measured for each (e.g. full,auto)")
    parser.add_argument("--head", default="auto", help="levanter.models.impl.DecodeHead names, comma-separated: each "
                        "row is measured for each (e.g. plain,fused: a greedy step's head by XLA, or by the "
                        "fused Pallas kernel)")
    parser.add_argument("--profile", metavar="DIR", help="also trace one run of each row under "
                        "DIR/<preset>-<decode>-<head>-<batch> "
                        "and print where its device time went (benchmarks.device_profile)")
    parser.add_argument("--compare", action=argparse.BooleanOptionalAction, default=on_cpu,
                        help="the CPU comparison with recomputing, and greedy equality with it")
    args = parser.parse_args(argv if argv is not None else [])
    dtype = jnp.float32 if args.dtype == "float32" else jnp.bfloat16
    heads = [DecodeHead.parse(h) for h in args.head.split(",")]  # a bad name fails before any model is built
    results: dict[str, Any] = {"device": jax.devices()[0].device_kind, "dtype": args.dtype, "tables": {}}
    for name in args.preset or (["nano"] if on_cpu else ["llama_150m", "llama_1_4b"]):
        config = dataclasses.replace(_preset(name), max_seq_len=max(_preset(name).max_seq_len,
                                                                      args.prompt_len + args.new_tokens))
        model, params = random_model(config, dtype, dtype)
        _print_header(name, args.prompt_len, args.new_tokens, args.dtype)
        rows = results["tables"][name] = []
        for batch in (int(b) for b in args.batches.split(",")):
            for decode, head in ((d, h) for d in args.decode.split(",") for h in heads):
                way = config.build(dtype, impl=Impl(decode=decode, decode_head=head))
                trace = os.path.join(args.profile, f"{name}-{decode}-{head.value}-{batch}") if args.profile else None
                rows.append(decode_row(way, params, batch, args.prompt_len, args.new_tokens, args.reps,
                                       args.bandwidth, trace))
                _print_row(rows[-1])
                for line in (rows[-1]["profile"] or {}).get("lines", []):
                    print(f"    {line}", flush=True)
                _save(results)
        del params
    if args.compare:
        c = against_recompute()
        print(f"\nCPU, llama_nano-size (context 512), batch 8, 256-token prompts + 256 new tokens, greedy: "
              f"engine {c['engine_s']:.2f} s, recompute per token {c['recompute_s']:.2f} s: "
              f"{c['speedup']:.1f}x (goal >= 10x)")
        print(f"greedy tokens equal to the recompute path: {c['greedy_equal']}/{c['greedy_prompts']} prompts "
              "(128 new tokens each)")
        results["against_recompute"] = c
    _save(results)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
