"""Accelerator check: train Llama presets in bfloat16 and print a table row per configuration.

Run through ``benchmarks/device_check.sh`` on a GPU or TPU machine. Every configuration runs in
this one process (a TPU is opened once: one process at a time can hold it): ``--model``,
``--batch-size``, ``--seq-len``, ``--remat``, ``--attention``, ``--loss-impl`` and ``--unroll`` (layers per
iteration of the layer scan) describe one, and each ``--config MODEL:BATCHxSEQ[:REMAT[:ATTENTION[:LOSS[:UNROLL]]]]``
adds another. A configuration whose memory estimate
(``levanter.memory_estimate``) does not fit the device is refused with one line naming the
estimate and the fix, and the next one runs. Each row: model, batch, sequence length, remat,
attention, the loss over the head (``blockwise`` or ``pallas``, resolved), the layers per iteration (resolved), compile seconds, step ms, tokens/s, MFU in the project's count (causal attention
counted unmasked) and in the causal-halved count (MaxText's), both against the device's
datasheet peak, and the step's HBM against what the device has: the device's own peak
(``peak_bytes_in_use``) where it reports one, else XLA's count (:func:`levanter.memory.peak_bytes`;
``hbm_from`` says which).

``--out DIR`` writes the table (``device_check.json``, ``device_check.md``) and, with
``--profile``, a ``jax.profiler`` trace of a few steps of each configuration and its summary
(named ops and their share of the traced time, and the copies between host and device memory: in
flight and waited for). ``--offload-optimizer both`` runs each configuration with its optimizer
state on the device and in host memory (the ``opt_state`` column). ``--smoke`` swaps in ``llama_nano`` and a few
steps so the script itself is checked on a CPU (``make test`` runs it). Data are random tokens
written to a temporary folder in the tokenized format the trainer reads.
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
import time
from typing import Any

_COLUMNS = ("model", "batch", "seq_len", "remat", "attention", "loss", "unroll", "compile_s", "first_step_s", "step_ms", "tokens_per_s",
            "mfu", "mfu_causal", "hbm_step_gib", "hbm_from", "hbm_available_gib", "input_wait", "opt_state", "status")

_STARTED = time.perf_counter()
"""When this process started (near enough: when this module was imported)."""


@dataclasses.dataclass(frozen=True)
class Spec:
    """One configuration to run."""

    model: str
    batch: int
    seq_len: int
    remat: str
    attention: str
    loss: str = "auto"
    unroll: int | None = None
    """Layers per iteration of the layer scan (``TrainerConfig.layer_unroll``; None: auto)."""
    offload: bool = False
    """The optimizer state in host memory between steps (``--offload-optimizer``)."""


def _spec(text: str, remat: str, attention: str, loss: str, unroll: int | None) -> Spec:
    """``MODEL:BATCHxSEQ[:REMAT[:ATTENTION[:LOSS[:UNROLL]]]]``."""
    parts = text.split(":")
    try:
        batch, seq_len = (int(x) for x in parts[1].lower().split("x"))
        unroll = _unroll(parts[5]) if len(parts) > 5 else unroll
    except (IndexError, ValueError):
        raise argparse.ArgumentTypeError(
            f"--config must be MODEL:BATCHxSEQ[:REMAT[:ATTENTION[:LOSS[:UNROLL]]]], got {text!r}") from None
    return Spec(parts[0], batch, seq_len, parts[2] if len(parts) > 2 else remat,
                parts[3] if len(parts) > 3 else attention, parts[4] if len(parts) > 4 else loss, unroll)


def _unroll(text: str) -> int | None:
    """``auto`` (None) or a count of layers."""
    return None if text == "auto" else int(text)


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="device_check.sh", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="llama_nano, few steps: a CPU check of this script")
    parser.add_argument("--model", default=None, help="a llama_* preset of experiments/llama.py (default llama_150m)")
    parser.add_argument("--batch-size", type=int, default=None, help="global batch (default 32; smoke: 8)")
    parser.add_argument("--seq-len", type=int, default=None, help="tokens per sequence (default 1024; smoke: 64)")
    parser.add_argument("--remat", default="auto", help="auto, none, save_dots, save_attention, full or offload")
    parser.add_argument("--attention", default="auto", help="auto, xla or splash")
    parser.add_argument("--loss-impl", default="auto", help="the loss over the head: auto, blockwise or pallas")
    parser.add_argument("--unroll", type=_unroll, default=None,
                        help="layers per iteration of the layer scan, or auto (the default: levanter's choice)")
    parser.add_argument("--config", action="append", default=[], metavar="MODEL:BxT[:REMAT[:ATTN[:LOSS[:UNROLL]]]]",
                        help="another configuration (repeatable); with any, --model runs only if given")
    parser.add_argument("--steps", type=int, default=None, help="training steps each (default 100; smoke: 6)")
    parser.add_argument("--warmup", type=int, default=None, help="steps left out of the medians (default 10; smoke: 2)")
    parser.add_argument("--moment-dtype", default="float32", help="Adam moments' storage: float32 or bfloat16")
    parser.add_argument("--factored", action="store_true", help="factored second moment (Adafactor-style)")
    parser.add_argument("--grad-dtype", default="float32", help="gradients' dtype: float32 or bfloat16")
    parser.add_argument("--offload-optimizer", nargs="?", const="on", default="off", choices=("on", "off", "both"),
                        help="optimizer state in host memory; 'both' runs each configuration with it on the device "
                             "and in host memory (with --profile: the host copies timed in each)")
    parser.add_argument("--memory-gib", type=float, default=None,
                        help="device memory to fit in (default: what the device reports; a CPU reports none)")
    parser.add_argument("--fsdp", type=int, default=1, help="fsdp axis of the mesh (data axis takes the rest)")
    parser.add_argument("--tensor", type=int, default=1, help="tensor axis of the mesh")
    parser.add_argument("--force", action="store_true",
                        help="run what the estimate refuses (the compiler's own refusal is still one line)")
    parser.add_argument("--out", default=None, help="folder for the table (and profiles)")
    parser.add_argument("--profile", action="store_true", help="trace 3 steps of each configuration (needs --out)")
    args = parser.parse_args(argv)
    defaults = (6, 8, 64, 2) if args.smoke else (100, 32, 1024, 10)
    for name, default in zip(("steps", "batch_size", "seq_len", "warmup"), defaults, strict=True):
        if getattr(args, name) is None:
            setattr(args, name, default)
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
    if args.warmup >= args.steps:
        parser.error(f"--warmup must be < --steps, got warmup {args.warmup} and steps {args.steps}")
    if args.profile and not args.out:
        parser.error("--profile needs --out (where the traces go)")
    try:
        args.specs = [_spec(c, args.remat, args.attention, args.loss_impl, args.unroll) for c in args.config]
    except argparse.ArgumentTypeError as e:
        parser.error(str(e))
    if args.model is not None or not args.specs:
        model = args.model or ("llama_nano" if args.smoke else "llama_150m")
        args.specs.insert(0, Spec(model, args.batch_size, args.seq_len, args.remat, args.attention, args.loss_impl,
                                  args.unroll))
    # Both: on the device first, the larger of the two programs, while the device is still empty.
    places = {"off": (False,), "on": (True,), "both": (False, True)}[args.offload_optimizer]
    args.specs = [dataclasses.replace(spec, offload=offload) for spec in args.specs for offload in places]
    return args


def _preset(name: str) -> Any:
    """The ``llama_*`` preset ``name`` of ``experiments/llama.py``."""
    import experiments.llama as presets
    from levanter.models.llama import LlamaConfig

    found = getattr(presets, name, None)
    if not name.startswith("llama_") or not isinstance(found, LlamaConfig):
        names = sorted(n for n in dir(presets) if n.startswith("llama_") and isinstance(getattr(presets, n), LlamaConfig))
        raise SystemExit(f"device_check: no model {name!r} in experiments/llama.py; models are: {', '.join(names)}")
    return found


def main(argv: list[str]) -> list[dict]:
    args = _parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("absl").setLevel(logging.ERROR)
    import jax

    if jax.default_backend() == "cpu" and not args.smoke:
        raise SystemExit("device_check: JAX sees only CPU devices (install jax with its CUDA or TPU plugin); "
                         "use --smoke for a CPU check of the script")
    from levanter.training.execution import device_memory

    available = int(args.memory_gib * 2**30) if args.memory_gib else device_memory(jax.devices()[0])
    device = f"{jax.devices()[0].device_kind} x{len(jax.devices())}"
    print(f"device_check on {device}; memory {'unknown' if available is None else f'{available / 2**30:.2f} GiB'}")
    print(" | ".join(_COLUMNS))
    # The random tokens and the runs' folders are the check's own: removed when it ends, however it ends.
    with tempfile.TemporaryDirectory(prefix="device-check-") as tmp:
        return _rows(args, device, available, tmp)


def _rows(args: argparse.Namespace, device: str, available: int | None, tmp: str) -> list[dict]:
    """Run (or refuse) each configuration in turn, print its row and keep the rows in ``args.out``."""
    from benchmarks.device_profile import summarise_trace  # imports JAX: as main's, after the arguments

    rows = []
    for spec in args.specs:
        row = _run(spec, args, available, tmp)
        rows.append(row)
        print(" | ".join(_cell(row, c) for c in _COLUMNS), flush=True)
        if row["status"] != "ok":
            print(row["status"], file=sys.stderr, flush=True)
        if args.profile and row.get("trace_dir"):
            row["profile"] = summarise_trace(row.pop("trace_dir"))
            for line in row["profile"]["lines"][:1] + [x for x in row["profile"]["lines"] if "copies" in x]:
                print(f"  profile: {line}", flush=True)  # the host copies' line: what an offloaded state costs
        if args.out:  # after every row: a run cut short keeps the rows it made
            _write(args.out, device, rows)
    return rows


_PERCENT = ("mfu", "mfu_causal", "input_wait")


def _cell(row: dict, column: str) -> str:
    value = row.get(column)
    if value is None:
        return ""
    if column in _PERCENT:
        return f"{value:.1%}"
    if column == "tokens_per_s":
        return f"{value:,.0f}"
    if column == "status":
        return "ok" if value == "ok" else "refused"
    return str(value)


def _run(spec: Spec, args: argparse.Namespace, available: int | None, tmp: str) -> dict:
    """Train ``spec`` (or refuse it) and return its row."""
    from levanter.memory_estimate import HEADROOM, choose_remat, estimate_memory
    from levanter.models.impl import Attention, Remat, resolve_unroll
    from levanter.ops.cross_entropy import resolve_loss_impl

    model = _preset(spec.model)
    if spec.seq_len > model.max_seq_len:
        model = dataclasses.replace(model, max_seq_len=spec.seq_len)
    row: dict[str, Any] = {"model": spec.model, "batch": spec.batch, "seq_len": spec.seq_len,
                           "opt_state": "host" if spec.offload else "device"}
    remat, attention = Remat.parse(spec.remat), _attention(Attention.parse(spec.attention), spec.seq_len)
    loss = resolve_loss_impl(spec.loss, model.hidden_dim)
    kwargs: dict[str, Any] = dict(batch=spec.batch, seq_len=spec.seq_len, compute_bytes=2, attention=attention,
                  loss_impl=loss,
                  optimizer=_optimizer(args), offload_optimizer=spec.offload,
                  grad_bytes=2 if args.grad_dtype == "bfloat16" else 4)
    if remat is Remat.AUTO and available is not None:
        remat, estimate = choose_remat(model, available, **kwargs)
    else:
        estimate = estimate_memory(model, remat=Remat.NONE if remat is Remat.AUTO else remat, **kwargs)
    row.update(remat=estimate.remat, attention=attention.value, loss=loss.value,
               unroll=resolve_unroll(spec.unroll, model.num_layers),
               estimate_gib=round(estimate.total / 2**30, 2))
    if available is not None and not estimate.fits(available) and not args.force:
        row["status"] = (f"refused: {spec.model} {spec.batch}x{spec.seq_len} needs about {estimate.describe()} "
                         f"x{HEADROOM} headroom > {available / 2**30:.2f} GiB on the device; fix: a smaller "
                         "--batch-size or --seq-len, --remat full, --moment-dtype bfloat16 --factored, "
                         "--grad-dtype bfloat16 or --offload-optimizer")
        return row
    try:
        row.update(_train(model, spec, remat, attention, args, available, tmp))
    except Exception as e:  # noqa: BLE001 - a compiler's out-of-memory refusal is this row's answer
        text = str(e)
        if "RESOURCE_EXHAUSTED" not in text and "exceeds" not in text and "Out of memory" not in text:
            raise
        first = next((line for line in text.splitlines() if line.strip()), text)[:400]
        row["status"] = (f"refused by the compiler: {spec.model} {spec.batch}x{spec.seq_len} (estimate "
                         f"{estimate.describe()}): {first}")
    return row


def _attention(choice: Any, seq_len: int) -> Any:
    from levanter.models._llama_haiku import resolve_attention

    return resolve_attention(choice, seq_len)


def _optimizer(args: argparse.Namespace) -> Any:
    from levanter.optim import AdamConfig

    return AdamConfig(learning_rate=3e-4, warmup=min(100, args.steps // 10 + 1), moment_dtype=args.moment_dtype,
                      factored_second_moment=args.factored)


def _data(tmp: str, vocab: int, smoke: bool) -> str:
    """Random documents over ``vocab`` ids (written once per vocabulary)."""
    from benchmarks.bench_train import _write_dataset

    path = os.path.join(tmp, f"data-{vocab}")
    return path if os.path.exists(path) else _write_dataset(path, vocab=vocab, docs=3000 if smoke else 20_000)


def _train(model: Any, spec: Spec, remat: Any, attention: Any, args: argparse.Namespace, available: int | None,
           tmp: str) -> dict:
    """Set the run up, train it without checkpoints, and measure it."""
    import gc

    from levanter.checkpoint import CheckpointConfig
    from levanter.config import ComputeDtype, TrainLmConfig
    from levanter.data import DatasetSpec
    from levanter.sharding import MeshConfig
    from levanter.train_setup import set_up
    from levanter.training import Throughput, Trainer

    config = TrainLmConfig.from_settings(
        (DatasetSpec(_data(tmp, model.vocab_size, args.smoke)),), model, _optimizer(args), batch_size=spec.batch,
        seq_len=spec.seq_len, num_train_steps=args.steps, compute_dtype=ComputeDtype.BFLOAT16, eval_batches=0,
        checkpoint=CheckpointConfig(save_every=args.steps), log_every=1, remat=remat, attention=attention,
        loss_impl=spec.loss, layer_unroll=spec.unroll,
        offload_optimizer=spec.offload, grad_dtype=args.grad_dtype, mesh=MeshConfig(data=-1, fsdp=args.fsdp, tensor=args.tensor))
    out = os.path.join(tmp, f"run-{spec.model}-{spec.batch}x{spec.seq_len}-{remat.value}-{attention.value}-{spec.loss}"
                            f"-u{spec.unroll or 'auto'}"
                            + ("-offloaded" if spec.offload else ""))
    peak_before = _device_peak()
    started = time.perf_counter()
    setup = set_up(config, out)
    compile_s = time.perf_counter() - started
    n = len(setup.layout.devices)
    loop = Trainer(setup.train_step, setup.iterator, setup.place, num_train_steps=args.steps, writer=setup.writer,
                   throughput=Throughput(setup.tokens_per_step, setup.flops_per_token * setup.tokens_per_step, n,
                                         setup.peak.flops_per_s, setup.causal_flops_per_token * setup.tokens_per_step),
                   log_every=1, started_at=setup.started_at, rate_of_step=setup.rate_of_step)
    trace_dir = _add_profiler(loop, args, out) if args.profile else None
    try:
        loop.run(setup.start.state, setup.start.step)
    finally:
        setup.iterator.close()
        setup.writer.close()
    row = _measure(os.path.join(out, "metrics.jsonl"), args.warmup, setup, available,
                   _own_peak(peak_before, _device_peak()))
    first_step_at = setup.started_at + (row["first_step_s"] or 0.0)
    row.update(compile_s=round(compile_s, 1), trace_dir=trace_dir, status="ok",
               first_step_since_process_start_s=round(first_step_at - _STARTED, 1),
               cost_analysis=_cost(setup.train_step))
    del setup, loop
    gc.collect()
    return row


def _add_profiler(loop: Any, args: argparse.Namespace, out: str) -> str:
    """Hooks tracing steps ``warmup + 1 .. warmup + 3``; returns the trace folder."""
    import jax

    trace_dir = os.path.join(args.out, "traces", os.path.basename(out))
    first = args.warmup
    last = min(first + 3, args.steps - 1)
    # A due hook makes the loop wait for its step: due at these steps (and their multiples) only.
    loop.add_hook(lambda info: jax.profiler.start_trace(trace_dir, create_perfetto_trace=True)
                  if info.step == first else None, every=first, at_end=False)
    loop.add_hook(lambda info: jax.profiler.stop_trace() if info.step == last else None, every=last, at_end=False)
    return trace_dir


def _device_peak() -> int | None:
    """The most bytes any local device has held at once since this process started (None: the
    backend does not say, as on a CPU)."""
    import jax

    peaks = [(d.memory_stats() or {}).get("peak_bytes_in_use") for d in jax.local_devices()]
    return max((int(p) for p in peaks if p is not None), default=None)


def _own_peak(before: int | None, after: int | None) -> int | None:
    """A configuration's own peak on the device: the process's peak after it, where it raised it
    (a device's peak cannot be reset, so a smaller configuration after a larger one has none)."""
    return after if after is not None and (before is None or after > before) else None


def _hbm(memory: Any, device_peak: int | None) -> tuple[int | None, str]:
    """(bytes, "device" or "xla"): the step's HBM, the device's peak where known, else XLA's count."""
    if device_peak is not None:
        return device_peak, "device"
    return memory.step_peak_bytes_per_device, "xla"


def _gib(n: int | None) -> float | None:
    return None if n is None else round(n / 2**30, 2)


def _measure(metrics_path: str, warmup: int, setup: Any, available: int | None, device_peak: int | None) -> dict:
    with open(metrics_path) as f:
        rows = [json.loads(line) for line in f]
    steady = [r for r in rows if "step_time" in r and r["step"] > warmup]
    step_time = statistics.median(r["step_time"] for r in steady)
    memory = setup.memory
    used, source = _hbm(memory, device_peak)
    return {"step_ms": round(step_time * 1e3, 2), "tokens_per_s": setup.tokens_per_step / step_time,
            "mfu": statistics.median(r["mfu"] for r in steady),
            "mfu_causal": statistics.median(r["mfu_causal"] for r in steady),
            "input_wait": statistics.median(r["input_wait_frac"] for r in steady),
            # From the run's set-up (init, compile, first batch) to its first step's end.
            "first_step_s": next((round(r["time_to_first_step_s"], 1) for r in rows if "time_to_first_step_s" in r),
                                 None),
            "hbm_step_gib": _gib(used), "hbm_from": source,
            "hbm_xla_gib": _gib(memory.step_peak_bytes_per_device), "hbm_device_peak_gib": _gib(device_peak),
            "hbm_available_gib": _gib(available),
            "final_loss": steady[-1]["loss"], "peak_flops_per_device": setup.peak.flops_per_s,
            "memory": memory.to_json()}


def _cost(compiled: Any) -> dict | None:
    """XLA's cost analysis of the compiled step (per device): flops, bytes accessed, and the like."""
    try:
        analysis = compiled.cost_analysis()
    except NotImplementedError:
        return None
    if isinstance(analysis, list | tuple):
        analysis = analysis[0] if analysis else None
    keep = ("flops", "bytes accessed", "transcendentals", "optimal_seconds")
    return {k: float(v) for k, v in dict(analysis or {}).items() if k in keep}


def _write(out: str, device: str, rows: list[dict]) -> None:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "device_check.json"), "w") as f:
        json.dump({"device": device, "date": time.strftime("%Y-%m-%d"), "rows": rows}, f, indent=2, default=str)
    lines = [f"device: {device}", "", "| " + " | ".join(_COLUMNS) + " |", "|" + "---|" * len(_COLUMNS)]
    lines += ["| " + " | ".join(_cell(r, c) for c in _COLUMNS) + " |" for r in rows]
    lines += ["", *(r["status"] for r in rows if r["status"] != "ok")]
    for r in rows:
        for line in (r.get("profile") or {}).get("lines", []):
            lines.append(f"{r['model']} {r['batch']}x{r['seq_len']} {r['remat']}/{r['attention']}/{r['loss']}"
                         f" (optimizer state on the {r['opt_state']}): {line}")
    with open(os.path.join(out, "device_check.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    result = main(sys.argv[1:])
    sys.exit(0 if all(r["status"] == "ok" for r in result) else 3)
