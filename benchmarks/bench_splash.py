"""Splash attention's tiles on the chip: the kernel at the models' training shapes over a grid of
block sizes, beside today's default tiles and XLA's einsums; ms and TFLOP/s a row, and the entries
of ``levanter/ops/splash_tiles.py``'s table that the measurements choose, ready to paste.

    python -m benchmarks.bench_splash                          # on a TPU: every problem, ~5 minutes
    python -m benchmarks.bench_splash --topology v5e:1x1       # a CPU with libtpu: compile only
    python -m benchmarks.bench_splash --smoke                  # a tiny problem, interpreted: a CPU check

Problems are ``MODEL:BATCHxSEQ`` (``--problem``; default the four of issue 57), causal, bfloat16,
``q [b, t, kv_heads, group, head_dim]`` as the model calls ``levanter.ops.attention``. Problems of
one (head dim, sequence length) share a table entry; the first of them is swept. The sweep varies
one kernel at a time (their times add: the forward, the ``dkv`` and ``dq`` backward kernels, or the
fused backward, each over its own blocks): forward rows time the forward alone, the others forward
and backward (the forward at the default blocks); the ``layout`` rows time the default blocks with
keys and values head-minor and sequence-minor. The ``final`` rows then time, for every problem,
the default, the best of each kernel together (unfused and fused) and XLA's attention. TFLOP/s count
a model's attention FLOPs, causal-halved: ``2 * b * heads * t^2 * d`` forward, 3x that with the
backward. Candidates compile in parallel (``--jobs``); one that does not compile (vector memory)
is a row with its error. ``--budget-s`` bounds the sweep: once past it, the rest of the grid is left
out and the final rows still run. ``--out DIR`` (default ``$OUT``) writes ``bench_splash.json``/``.md``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from levanter.ops.splash_tiles import SplashBlocks

PROBLEMS = ("llama_150m:32x1024", "llama_600m:16x1024", "llama_150m:8x4096", "llama_1_4b:8x2048")
SIZES = (256, 512, 1024, 2048)
"""Block sizes tried (those dividing the sequence)."""
SCORES_LIMIT = 1024 * 1024
"""Largest ``q x kv_compute`` block of float32 scores tried: 2,048 x 2,048 does not compile for the
v5e (Mosaic's ``CompileTimeScopedVmemOom``; ``--topology v5e:1x1``), 1,024 x 1,024 does."""
BLOCK_LIMIT = 2048 * 1024
"""Largest ``q x kv`` block of the forward tried: 2,048 x 2,048 with 512 keys computed at a time
does not compile for the v5e either, 2,048 x 1,024 does (the ``dkv`` kernel takes 2,048 x 2,048)."""


@dataclasses.dataclass(frozen=True)
class Problem:
    name: str
    batch: int
    seq_len: int
    kv_heads: int
    group: int
    head_dim: int
    layers: int = 1

    @property
    def key(self) -> tuple[int, int]:
        return self.head_dim, self.seq_len

    def flops(self, backward: bool) -> float:
        forward = 2.0 * self.batch * self.kv_heads * self.group * self.seq_len**2 * self.head_dim
        return 3 * forward if backward else forward


def problem(text: str) -> Problem:
    """``MODEL:BATCHxSEQ`` at the ``llama_*`` preset's heads (``experiments/llama.py``)."""
    from benchmarks.device_check import _preset

    name, _, shape = text.partition(":")
    try:
        batch, seq_len = (int(x) for x in shape.lower().split("x"))
    except ValueError:
        raise SystemExit(f"bench_splash: --problem must be MODEL:BATCHxSEQ, got {text!r}") from None
    model = _preset(name)
    return Problem(text, batch, seq_len, model.num_kv_heads, model.num_heads // model.num_kv_heads, model.head_dim,
                   model.num_layers)


def grid(seq_len: int, sizes: tuple[int, ...] = SIZES) -> list[tuple[str, SplashBlocks]]:
    """``(stage, blocks)`` of the sweep: each kernel's blocks varied, the others at the default."""
    fit = [s for s in sizes if s <= seq_len and seq_len % s == 0]
    pairs = [(q, kv, c) for q in fit for kv in fit for c in sorted({kv, min(kv, 512)}, reverse=True)
             if kv % c == 0 and q * c <= SCORES_LIMIT]
    rows = [("fwd", SplashBlocks(q=q, kv=kv, kv_compute=c)) for q, kv, c in pairs if q * kv <= BLOCK_LIMIT]
    rows += [("dkv", SplashBlocks(q_dkv=q, kv_dkv=kv, kv_dkv_compute=c)) for q, kv, c in pairs]
    rows += [("fused", SplashBlocks(q_dkv=q, kv_dkv=kv, kv_dkv_compute=c, fused=True)) for q, kv, c in pairs]
    rows += [("dq", SplashBlocks(q_dq=q, kv_dq=kv)) for q in fit for kv in fit if q * kv <= SCORES_LIMIT]
    rows += [("layout", SplashBlocks()), ("layout", SplashBlocks(kv_seq_minor=True))]
    return [(stage, blocks.for_seq(seq_len)) for stage, blocks in rows]


def label(blocks: SplashBlocks | None) -> str:
    if blocks is None:
        return "xla"
    text = (f"fwd {blocks.q}/{blocks.kv}/{blocks.kv_compute} dkv {blocks.q_dkv}/{blocks.kv_dkv}/"
            f"{blocks.kv_dkv_compute}")
    text += " fused" if blocks.fused else f" dq {blocks.q_dq}/{blocks.kv_dq}"
    return text + (" kv seq-minor" if blocks.kv_seq_minor else "")


def source(blocks: SplashBlocks) -> str:
    """``blocks`` as the table's source writes them (a fused backward's ``dq`` blocks, unused, left out)."""
    skip = (("q_dq", "kv_dq") if blocks.fused else ("fused",)) + (() if blocks.kv_seq_minor else ("kv_seq_minor",))
    fields = [f"{f.name}={getattr(blocks, f.name)!r}" for f in dataclasses.fields(blocks) if f.name not in skip]
    return f"SplashBlocks({', '.join(fields)})"


def choose(rows: list[dict]) -> list[SplashBlocks]:
    """From one problem's sweep rows (``stage``, ``blocks``, ``ms``): the best forward with the
    best ``dkv`` and ``dq`` blocks, and with the best fused backward (those that ran), each with
    keys and values sequence-minor where that beat the default layout."""
    def best(stage: str) -> SplashBlocks:
        ran = [r for r in rows if r["stage"] == stage and r.get("ms") is not None]
        return min(ran, key=lambda r: r["ms"])["blocks"] if ran else SplashBlocks()

    fwd, dkv, dq, fused = best("fwd"), best("dkv"), best("dq"), best("fused")
    fwd = dataclasses.replace(fwd, kv_seq_minor=best("layout").kv_seq_minor)
    unfused = dataclasses.replace(fwd, q_dkv=dkv.q_dkv, kv_dkv=dkv.kv_dkv, kv_dkv_compute=dkv.kv_dkv_compute,
                                  q_dq=dq.q_dq, kv_dq=dq.kv_dq)
    together = dataclasses.replace(fwd, q_dkv=fused.q_dkv, kv_dkv=fused.kv_dkv, kv_dkv_compute=fused.kv_dkv_compute,
                                   fused=True)
    return [unfused, together] if any(r["stage"] == "fused" and r.get("ms") is not None for r in rows) else [unfused]


def entries(final: list[dict], device_kind: str) -> list[str]:
    """The table's lines for ``device_kind``: per (head dim, sequence), the blocks of least summed
    forward+backward ms over that key's problems (the default where nothing beat it)."""
    from levanter.ops.splash_tiles import DEFAULT_BLOCK

    lines = [f'    "{device_kind}": {{  # bench_splash, {time.strftime("%Y-%m-%d")}']
    for key in sorted({r["key"] for r in final}, key=lambda k: (k[1], k[0])):
        ran = [r for r in final if r["key"] == key and r.get("ms") is not None and r["blocks"] is not None]
        totals: dict[SplashBlocks, list[float]] = {}
        for r in ran:
            totals.setdefault(r["blocks"], []).append(r["ms"])
        complete = {b: sum(ms) for b, ms in totals.items() if len(ms) == max(len(v) for v in totals.values())}
        blocks = min(complete, key=lambda b: complete[b]) if complete else SplashBlocks.square(DEFAULT_BLOCK)
        default = complete.get(SplashBlocks().for_seq(key[1]))
        names = ", ".join(sorted({r["problem"] for r in ran}))
        versus = f"{complete.get(blocks, 0):.2f} ms vs default {default:.2f} ms" if default else "default"
        lines.append(f"        {key}: {source(blocks)},  # {names}: {versus}")
    return lines + ["    },"]


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench_splash", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--problem", action="append", default=[], help="MODEL:BATCHxSEQ (default: issue 57's four)")
    parser.add_argument("--smoke", action="store_true", help="llama_nano 1x256, blocks 128/256, interpreted")
    parser.add_argument("--topology", default=None, help="compile for this described TPU (e.g. v5e:1x1), time nothing")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 1), help="parallel compiles")
    parser.add_argument("--budget-s", type=float, default=270.0, help="sweep seconds before the final rows")
    parser.add_argument("--out", default=os.environ.get("OUT"), help="folder for the table (default: $OUT)")
    args = parser.parse_args(argv)
    args.problem = args.problem or (["llama_nano:1x256"] if args.smoke else list(PROBLEMS))
    args.sizes = (128,) if args.smoke else SIZES
    return args


def _attend(blocks: SplashBlocks | None, backward: bool, interpret: bool) -> Any:
    """``(q, k, v, cotangent) ->`` the output, or the gradients of q, k and v (forward included)."""
    import functools

    import jax

    from levanter.ops.attention import splash_attention, xla_attention

    attend = xla_attention if blocks is None else functools.partial(splash_attention, blocks=blocks,
                                                                     interpret=interpret)
    if backward:
        return lambda q, k, v, ct: jax.vjp(attend, q, k, v)[1](ct)
    return lambda q, k, v, ct: attend(q, k, v)


def _inputs(p: Problem, device: Any) -> tuple:
    """Random bfloat16 q, k, v and output cotangent; abstract (on ``device``) when compiling only."""
    import jax
    import jax.numpy as jnp

    heads = p.kv_heads * p.group
    shapes = ((p.batch, p.seq_len, p.kv_heads, p.group, p.head_dim), (p.batch, p.seq_len, p.kv_heads, p.head_dim),
              (p.batch, p.seq_len, p.kv_heads, p.head_dim), (p.batch, p.seq_len, heads * p.head_dim))
    if device is not None:
        sharding = jax.sharding.SingleDeviceSharding(device)
        return tuple(jax.ShapeDtypeStruct(s, jnp.bfloat16, sharding=sharding) for s in shapes)
    keys = jax.random.split(jax.random.PRNGKey(0), len(shapes))
    return tuple(jax.random.normal(key, s, jnp.bfloat16) for key, s in zip(keys, shapes, strict=True))


def _first_line(e: BaseException) -> str:
    return next((line for line in str(e).splitlines() if line.strip()), repr(e))[:300]


Candidate = tuple[Problem, str, SplashBlocks | None]
"""A problem, the stage of the sweep, and the blocks (None: XLA's attention)."""


def _compile(candidates: Sequence[Candidate], inputs: dict[str, tuple], args: argparse.Namespace,
             interpret: bool) -> list[tuple[dict, Any]]:
    """Each candidate's row and compiled program (None where it failed): lowered here, compiled in
    ``args.jobs`` threads (XLA's compiler leaves the interpreter's lock)."""
    import jax

    lowered: list[tuple[dict, Any]] = []
    for p, stage, blocks in candidates:
        row = {"problem": p.name, "key": p.key, "stage": stage, "blocks": blocks, "backward": stage != "fwd"}
        try:
            lowered.append((row, jax.jit(_attend(blocks, row["backward"], interpret)).lower(*inputs[p.name])))
        except Exception as e:  # noqa: BLE001 - blocks the kernel refuses are this row's answer
            row["status"] = _first_line(e)
            lowered.append((row, None))

    def build(item: tuple[dict, Any]) -> tuple[dict, Any]:
        row, low = item
        if low is None:
            return row, None
        started = time.perf_counter()
        try:
            compiled = low.compile()
        except Exception as e:  # noqa: BLE001 - a kernel over the chip's vector memory is this row's answer
            row.update(status=_first_line(e), compile_s=round(time.perf_counter() - started, 1))
            return row, None
        row.update(status="compiled", compile_s=round(time.perf_counter() - started, 1))
        return row, compiled

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        return list(pool.map(build, lowered))


def _time(compiled: Any, inputs: tuple) -> float:
    """Median seconds a call (five samples of enough back-to-back calls to fill ~30 ms)."""
    import jax

    jax.block_until_ready(compiled(*inputs))
    started = time.perf_counter()
    jax.block_until_ready(compiled(*inputs))
    calls = max(1, min(50, int(0.03 / max(time.perf_counter() - started, 1e-6))))
    samples = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(calls):
            out = compiled(*inputs)
        jax.block_until_ready(out)
        samples.append((time.perf_counter() - started) / calls)
    return statistics.median(samples)


def _run(candidates: Sequence[Candidate], inputs: dict[str, tuple], args: argparse.Namespace, device: Any,
         report: Any) -> list[dict]:
    """Compile ``candidates`` (all at once) and (on a chip) time them; each row reported as it is made."""
    interpret = device is None and args.smoke
    problems = {p.name: p for p, _, _ in candidates}
    rows = []
    for row, compiled in _compile(candidates, inputs, args, interpret):
        if compiled is not None and device is None:
            try:
                ms = _time(compiled, inputs[row["problem"]]) * 1e3
                flops = problems[row["problem"]].flops(row["backward"])
                row.update(status="ok", ms=round(ms, 3), tflops=round(flops / ms / 1e9, 1))
            except Exception as e:  # noqa: BLE001 - out of memory (XLA's attention at long sequences)
                row["status"] = _first_line(e)
        del compiled
        rows.append(row)
        report(row)
    return rows


_COLUMNS = ("problem", "stage", "blocks", "ms", "tflops", "compile_s", "status")


def _cell(row: dict, column: str) -> str:
    return label(row["blocks"]) if column == "blocks" else str(row.get(column, ""))


def _sweep(problems: list[Problem], args: argparse.Namespace, device: Any, report: Any) -> dict:
    """The grid's rows, kernel by kernel, of the first problem of each (head dim, sequence); the
    blocks they choose by that key. Stage by stage: a budget spent leaves the least-used kernels out."""
    started = time.perf_counter()
    swept = {p.key: p for p in reversed(problems)}  # the first of each key stays
    swept = dict(sorted(swept.items(), key=lambda item: problems.index(item[1])))
    by_key: dict[tuple[int, int], list[dict]] = {key: [] for key in swept}
    inputs = {p.name: _inputs(p, device) for p in swept.values()}
    for stage in ("fwd", "layout", "dkv", "dq", "fused"):
        if time.perf_counter() - started > args.budget_s:
            print(f"# budget of {args.budget_s:.0f} s spent: the {stage} rows left out", flush=True)
            continue
        todo = [(p, s, b) for p in swept.values() for s, b in grid(p.seq_len, args.sizes) if s == stage]
        for row in _run(todo, inputs, args, device, report):
            by_key[row["key"]].append(row)
    return {key: choose(found) for key, found in by_key.items()}


def main(args: argparse.Namespace) -> list[dict]:
    import jax

    devices = None
    if args.topology:
        from benchmarks.tpu_compile import _devices

        devices = _devices(args.topology)
    elif jax.default_backend() == "cpu" and not args.smoke:
        raise SystemExit("bench_splash: JAX sees only CPU devices; use --smoke (interpreted) or --topology v5e:1x1")
    device = devices[0] if devices else None
    kind = str((device or jax.devices()[0]).device_kind)
    print(f"bench_splash on {kind}{' (compile only)' if device else ''}\n" + " | ".join(_COLUMNS), flush=True)
    rows: list[dict] = []

    def report(row: dict) -> None:
        rows.append(row)
        print(" | ".join(_cell(row, c) for c in _COLUMNS), flush=True)
        if args.out:  # after every row: a run cut short keeps what it measured
            _write(args.out, kind, rows, [])

    problems = [problem(text) for text in args.problem]
    chosen = _sweep(problems, args, device, report)
    final: list[dict] = []
    if device is None:  # compiling only: nothing to choose from
        todo: list[Candidate] = []
        for p in problems:
            default = SplashBlocks().for_seq(p.seq_len)
            todo += [(p, "final", b) for b in dict.fromkeys([default, *chosen[p.key]])] + [(p, "final", None)]
        final = _run(todo, {p.name: _inputs(p, None) for p in problems}, args, None, report)
    lines = entries(final, kind) if final else []
    for p in problems if final else ():
        print(_saving(p, [r for r in final if r["problem"] == p.name]), flush=True)
    print("\n# levanter/ops/splash_tiles.py, _MEASURED: this chip's entries\n" + "\n".join(lines), flush=True)
    if args.out:
        _write(args.out, kind, rows, lines)
    return rows


def _saving(p: Problem, final: list[dict]) -> str:
    """What the fastest blocks save a training step of ``p``'s model against the default (a layer's
    forward and backward, times its layers)."""
    ran = {r["blocks"]: r["ms"] for r in final if r.get("ms") is not None and r["blocks"] is not None}
    default = ran.get(SplashBlocks().for_seq(p.seq_len))
    if not ran or default is None:
        return f"# {p.name}: no default row to compare with"
    best = min(ran, key=lambda b: ran[b])
    return (f"# {p.name}: {ran[best]:.3f} ms a layer against the default's {default:.3f} ms; {p.layers} layers: "
            f"{(default - ran[best]) * p.layers:.1f} ms a step saved ({label(best)})")


def _write(out: str, device: str, rows: list[dict], lines: list[str]) -> None:
    os.makedirs(out, exist_ok=True)
    plain = [dict(r, key=list(r["key"]), blocks=None if r["blocks"] is None else dataclasses.asdict(r["blocks"]),
                  label=label(r["blocks"])) for r in rows]
    with open(os.path.join(out, "bench_splash.json"), "w") as f:
        json.dump({"device": device, "date": time.strftime("%Y-%m-%d"), "rows": plain, "entries": lines}, f, indent=2)
    table = ["| " + " | ".join(_COLUMNS) + " |", "|" + "---|" * len(_COLUMNS)]
    table += ["| " + " | ".join(_cell(r, c) for c in _COLUMNS) + " |" for r in rows]
    with open(os.path.join(out, "bench_splash.md"), "w") as f:
        f.write("\n".join([f"device: {device}", "", *table, "", "```python", *lines, "```"]) + "\n")


if __name__ == "__main__":
    result = main(_parse(sys.argv[1:]))
    sys.exit(0 if any(r["status"] in ("ok", "compiled") for r in result) else 3)
