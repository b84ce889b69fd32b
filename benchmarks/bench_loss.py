"""The loss over the output head alone: forward and backward (``d hidden``, ``d head``) of each
implementation at the models' shapes, ms and TFLOP/s (``6 * rows * hidden * vocab``).

    python -m benchmarks.bench_loss                       # on a TPU/GPU: both shapes, every candidate
    python -m benchmarks.bench_loss --smoke               # tiny shapes on a CPU (the kernels interpreted)
    python -m benchmarks.bench_loss --shape 150m --impl pallas --tiles 1024x1024 --tiles 2048x1024

Implementations: ``blockwise`` (``levanter.ops.cross_entropy``, a scan over blocks of positions;
``--block`` positions per block, 0 the default), ``pallas`` (``levanter.ops.pallas_loss``;
``--tiles ROWSxVOCAB``, 0x0 the default; ``:one`` after it the one-pass backward, ``:staged`` the
gradients made in the forward from logits staged through HBM, ``levanter.ops.pallas_staged``) and ``xla`` (the full logits materialised: the plain
matmuls' rate, where they fit). Every candidate runs in this one process, one row each; one that
does not compile or fit is a row with its error. ``err`` is each row's largest relative error
(loss, ``d hidden``, ``d head``; norms) against the shape's first row: the kernels' arithmetic is
checked on the chip too. ``--out DIR`` (default ``$OUT`` when set) writes
``bench_loss.json`` and ``bench_loss.md``. bfloat16 inputs, float32 losses, z-loss 1e-4, about a
tenth of the targets weighted 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from typing import Any

SHAPES = {"150m": (32, 1024, 512), "600m": (16, 1024, 1024), "1.4b": (8, 2048, 2048)}
"""Batch, sequence length and hidden width of the models' heads (Llama 3's vocabulary)."""
SMOKE_SHAPES = {"tiny": (2, 64, 32)}
VOCAB, SMOKE_VOCAB = 128_256, 500


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench_loss", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, kernels interpreted: a CPU check")
    parser.add_argument("--shape", action="append", default=[], help=f"one of {sorted(SHAPES)} (default: all)")
    parser.add_argument("--impl", action="append", default=[], help="blockwise, pallas, xla (default: all)")
    parser.add_argument("--block", action="append", type=int, default=[], help="blockwise positions per block")
    parser.add_argument("--tiles", action="append", default=[], help="pallas tiles ROWSxVOCAB[:one][:staged]")
    parser.add_argument("--iters", type=int, default=None, help="timed calls each (default 10; smoke: 2)")
    parser.add_argument("--out", default=os.environ.get("OUT"), help="folder for the table (default: $OUT)")
    args = parser.parse_args(argv)
    shapes = SMOKE_SHAPES if args.smoke else SHAPES
    args.shape = args.shape or sorted(shapes)
    for name in args.shape:
        if name not in shapes:
            parser.error(f"--shape must be one of {sorted(shapes)}, got {name!r}")
    args.impl = args.impl or ["blockwise", "pallas", "xla"]
    for impl in args.impl:
        if impl not in ("blockwise", "pallas", "xla"):
            parser.error(f"--impl must be blockwise, pallas or xla, got {impl!r}")
    args.block = args.block or ([0, 16] if args.smoke else [0, 256])
    try:
        args.tiles = [_tiles(t) for t in (args.tiles or ["0x0"])]
    except ValueError as e:
        parser.error(f"--tiles must be ROWSxVOCAB[:one][:staged] (multiples of 128), got {args.tiles!r}: {e}")
    args.iters = args.iters or (2 if args.smoke else 10)
    return args


def _tiles(text: str) -> Any:
    """``ROWSxVOCAB[:one][:staged]`` as ``Tiles`` (0x0: the defaults with the flags given; plain ``0x0``: None,
    the loss's own choice)."""
    # Imported here: the levanter import brings JAX, which --help need not wait for.
    from levanter.ops.pallas_loss import Tiles

    size, *flags = text.lower().split(":")
    if set(flags) - {"one", "staged"}:
        raise ValueError(f"unknown flags {flags}")
    rows, vocab = (int(x) for x in size.split("x"))
    if not rows and not flags:
        return None
    base = Tiles() if not rows else Tiles(rows=rows, vocab=vocab, one_pass="one" in flags)
    return dataclasses.replace(base, staged="staged" in flags)


def _candidates(args: argparse.Namespace) -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = []
    for impl in args.impl:
        if impl == "blockwise":
            rows += [(impl, b or None) for b in args.block]
        elif impl == "pallas":
            rows += [(impl, t) for t in args.tiles]
        else:
            rows.append((impl, None))
    return rows


def _loss(impl: str, config: Any, interpret: bool) -> Any:
    """``(hidden, head, targets, weights) -> total`` of one candidate."""
    import jax
    import jax.numpy as jnp

    from levanter.ops.cross_entropy import lm_loss

    if impl == "xla":
        def materialised(h: Any, w: Any, t: Any, wt: Any) -> Any:
            logits = jnp.einsum("btd,dv->btv", h, w, preferred_element_type=jnp.float32)
            lse = jax.nn.logsumexp(logits, axis=-1)
            picked = jnp.take_along_axis(logits, t[..., None], axis=-1)[..., 0]
            return jnp.sum(wt * (lse - picked + 1e-4 * lse * lse)) / jnp.maximum(jnp.sum(wt), 1.0)
        return materialised
    if impl == "pallas":
        return lambda h, w, t, wt: lm_loss(h, w, t, wt, z_weight=1e-4, impl="pallas", tiles=config,
                                           interpret=interpret)[0]
    return lambda h, w, t, wt: lm_loss(h, w, t, wt, z_weight=1e-4, block=config, impl="blockwise")[0]


def _measure(fn: Any, inputs: tuple, iters: int) -> tuple[float, list[float], Any]:
    """(compile and first call s, each timed call's s, the result) of ``value_and_grad(fn)`` over
    (hidden, head)."""
    import jax

    step = jax.jit(jax.value_and_grad(fn, argnums=(0, 1)))
    started = time.perf_counter()
    result = jax.block_until_ready(step(*inputs))
    first = time.perf_counter() - started
    times = []
    for _ in range(iters):
        started = time.perf_counter()
        jax.block_until_ready(step(*inputs))
        times.append(time.perf_counter() - started)
    return first, times, result


def _error(got: Any, want: Any) -> float:
    """Largest relative error (by norms, in float32) of ``got``'s arrays against ``want``'s."""
    import jax
    import jax.numpy as jnp

    def rel(a: Any, b: Any) -> float:
        a, b = a.astype(jnp.float32), b.astype(jnp.float32)
        return float(jnp.linalg.norm(a - b) / jnp.maximum(jnp.linalg.norm(b), 1e-30))

    return max(rel(a, b) for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True))


def _label(config: Any) -> str:
    if config is None:
        return "default"
    if not isinstance(config, int):  # pallas Tiles
        return f"{config.rows}x{config.vocab}" + (":one" if config.one_pass else "") + (":staged" if config.staged else "")
    return str(config)


def _row(shape: str, dims: tuple[int, int, int], vocab: int, impl: str, config: Any, args: argparse.Namespace,
         inputs: tuple, reference: list) -> dict:
    """One candidate's row; the first that runs becomes ``reference`` (its result) for the rest."""
    import jax

    b, t, d = dims
    row: dict[str, Any] = {"shape": shape, "rows": f"{b}x{t}", "hidden": d, "vocab": vocab, "impl": impl,
                           "config": _label(config)}
    interpret = jax.default_backend() != "tpu"
    try:
        first, times, result = _measure(_loss(impl, config, interpret), inputs, args.iters)
    except Exception as e:  # noqa: BLE001 - a candidate that does not compile or fit is its row's answer
        row["status"] = next((line for line in str(e).splitlines() if line.strip()), repr(e))[:300]
        return row
    ms = statistics.median(times) * 1e3
    row.update(status="ok", ms=round(ms, 2), tflops=round(6 * b * t * d * vocab / (ms / 1e3) / 1e12, 1),
               first_call_s=round(first, 1), err=float(f"{_error(result, reference[0]):.2g}") if reference else 0.0)
    if not reference:
        reference.append(result)
    return row


def _inputs(dims: tuple[int, int, int], vocab: int) -> tuple:
    import jax
    import jax.numpy as jnp

    b, t, d = dims
    k = jax.random.split(jax.random.PRNGKey(0), 4)
    hidden = jax.random.normal(k[0], (b, t, d), jnp.bfloat16)
    head = (jax.random.normal(k[1], (d, vocab), jnp.float32) / d**0.5).astype(jnp.bfloat16)
    targets = jax.random.randint(k[2], (b, t), 0, vocab)
    weights = (jax.random.uniform(k[3], (b, t)) > 0.1).astype(jnp.float32)
    return hidden, head, targets, weights


_COLUMNS = ("shape", "rows", "hidden", "impl", "config", "ms", "tflops", "err", "first_call_s", "status")


def main(argv: list[str]) -> list[dict]:
    args = _parse(argv)
    import jax

    if jax.default_backend() == "cpu" and not args.smoke:
        raise SystemExit("bench_loss: JAX sees only CPU devices; use --smoke for a CPU check of the script")
    shapes, vocab = (SMOKE_SHAPES, SMOKE_VOCAB) if args.smoke else (SHAPES, VOCAB)
    device = f"{jax.devices()[0].device_kind}"
    print(f"bench_loss on {device}, vocabulary {vocab}\n" + " | ".join(_COLUMNS), flush=True)
    rows = []
    for shape in args.shape:
        inputs, reference = _inputs(shapes[shape], vocab), []
        for impl, config in _candidates(args):
            rows.append(_row(shape, shapes[shape], vocab, impl, config, args, inputs, reference))
            print(" | ".join(str(rows[-1].get(c, "")) for c in _COLUMNS), flush=True)
            if args.out:  # after every row: a run cut short keeps what it measured
                _write(args.out, device, rows)
        del inputs, reference
    return rows


def _write(out: str, device: str, rows: list[dict]) -> None:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "bench_loss.json"), "w") as f:
        json.dump({"device": device, "date": time.strftime("%Y-%m-%d"), "rows": rows}, f, indent=2)
    lines = [f"device: {device}", "", "| " + " | ".join(_COLUMNS) + " |", "|" + "---|" * len(_COLUMNS)]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in _COLUMNS) + " |" for r in rows]
    with open(os.path.join(out, "bench_loss.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    result = main(sys.argv[1:])
    sys.exit(0 if result and any(r["status"] == "ok" for r in result) else 3)
