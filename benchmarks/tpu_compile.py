"""Compile training steps for a TPU without one: XLA's memory and cost analysis of each step,
beside the shapes' estimate (``levanter.memory_estimate``).

JAX compiles for a described TPU topology (``jax.experimental.topologies``) when libtpu is
installed, on any host: ``python -m benchmarks.tpu_compile --topology v5e:1x1 --config
llama_150m:32x1024:none:splash``. Nothing runs; each row says whether the step fits the chip
(XLA's own verdict: the compiler refuses a program over the chip's memory) and its temporaries,
arguments, FLOPs and compile seconds; with ``--schedule``, where the step's copies between host and
device memory sit in XLA's schedule (an offloaded optimizer state's: whether a loop runs while they
move). Not part of the test suite (CI has no libtpu).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from typing import Any


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tpu_compile", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--topology", default="v5e:1x1", help="a TPU topology name (jax.experimental.topologies)")
    parser.add_argument("--config", action="append", required=True, metavar="MODEL:BxT:REMAT:ATTENTION[:LOSS]",
                        help="LOSS: the loss over the head, blockwise (default here: no TPU to resolve auto) or pallas")
    parser.add_argument("--moment-dtype", default="float32")
    parser.add_argument("--factored", action="store_true")
    parser.add_argument("--offload-optimizer", action="store_true")
    parser.add_argument("--grad-dtype", default="float32")
    parser.add_argument("--loss-block", type=int, default=None)
    parser.add_argument("--schedule", action="store_true",
                        help="where the host<->device copies sit in the compiled step (benchmarks.host_copies)")
    parser.add_argument("--json", default=None, help="also write the rows here")
    return parser.parse_args(argv)


def _devices(topology: str) -> list[Any]:
    from jax.experimental import topologies

    bounds = [1, 1, 1] if topology.endswith("1x1") else None
    kwargs = {"chips_per_host_bounds": bounds, "num_slices": 1} if bounds else {}
    return list(topologies.get_topology_desc(topology, "tpu", **kwargs).devices)


def compile_row(spec: str, devices: list[Any], args: argparse.Namespace) -> dict:
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from benchmarks.device_check import _preset
    from levanter.checkpoint import CheckpointConfig
    from levanter.config import TrainLmConfig
    from levanter.data import DatasetSpec
    from levanter.memory import peak_bytes
    from levanter.memory_estimate import estimate_memory
    from levanter.models.impl import Impl
    from levanter.optim import AdamConfig
    from levanter.sharding import AXES, activation_sharder, batch_spec
    from levanter.training import abstract_state
    from levanter.training.execution import compile_step, offload_opt_state

    name, shape, remat, attention, *rest = spec.split(":")
    loss = rest[0] if rest else "blockwise"
    batch, seq_len = (int(x) for x in shape.lower().split("x"))
    model = _preset(name)
    model = dataclasses.replace(model, max_seq_len=max(model.max_seq_len, seq_len))
    optimizer = AdamConfig(moment_dtype=args.moment_dtype, factored_second_moment=args.factored)
    config = TrainLmConfig.from_settings((DatasetSpec("/unused"),), model, optimizer, batch_size=batch,
                                         seq_len=seq_len, compute_dtype="bfloat16", remat=remat, attention=attention,
                                         offload_optimizer=args.offload_optimizer, loss_block=args.loss_block,
                                         grad_dtype=args.grad_dtype, loss_impl=loss,
                                         checkpoint=CheckpointConfig())
    import numpy as np

    mesh = Mesh(np.asarray(devices).reshape(len(devices), 1, 1), AXES)
    layout = dataclasses.make_dataclass("Layout", ["batch_sharding", "replicated"])(
        NamedSharding(mesh, P(*batch_spec())), NamedSharding(mesh, P()))
    impl = Impl(remat=config.trainer.remat, attention=config.trainer.attention, loss=config.trainer.loss_impl)
    built = model.build(jnp.bfloat16, shard=activation_sharder(mesh, model.sharding_units()), impl=impl)
    target = abstract_state(model, optimizer.at_rate(0.0), mesh)
    if args.offload_optimizer:
        target = offload_opt_state(target)
    batch_shape = jax.ShapeDtypeStruct((batch, seq_len + 1), jnp.int32, sharding=layout.batch_sharding)
    estimate = estimate_memory(model, batch=batch, seq_len=seq_len, compute_bytes=2, remat=remat, attention=attention,
                               optimizer=optimizer, offload_optimizer=args.offload_optimizer, loss_block=args.loss_block, loss_impl=loss,
                               grad_bytes=2 if args.grad_dtype == "bfloat16" else 4)
    row: dict[str, Any] = {"config": spec, "estimate_gib": round(estimate.total / 2**30, 2)}
    started = time.perf_counter()
    try:
        compiled = compile_step(built, config, layout, target, batch_shape, jax.ShapeDtypeStruct((), jnp.float32))
    except Exception as e:  # noqa: BLE001 - the compiler's refusal is the answer for this row
        row.update(fits=False, error=str(e).splitlines()[0][:300], compile_s=round(time.perf_counter() - started, 1))
        return row
    memory = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list | tuple) else cost
    gib = 2**30
    row.update(fits=True, compile_s=round(time.perf_counter() - started, 1), peak_gib=round((peak_bytes(memory) or 0) / gib, 2),
               temp_gib=round(memory.temp_size_in_bytes / gib, 2), args_gib=round(memory.argument_size_in_bytes / gib, 2),
               out_gib=round(memory.output_size_in_bytes / gib, 2), alias_gib=round(memory.alias_size_in_bytes / gib, 2),
               host_args_gib=round(getattr(memory, "host_argument_size_in_bytes", 0) / gib, 2),
               host_temp_gib=round(getattr(memory, "host_temp_size_in_bytes", 0) / gib, 2),
               estimate_host_gib=round(estimate.host / gib, 2),
               xla_flops=float(cost.get("flops", 0.0)), optimal_s=float(cost.get("optimal_seconds", 0.0)),
               model_flops_causal=model.flops_per_token(seq_len, causal=True) * batch * seq_len)
    if args.schedule:
        from benchmarks.host_copies import scheduled_host_copies

        row["host_copies"] = scheduled_host_copies(compiled.as_text())
    return row


def main(argv: list[str]) -> list[dict]:
    args = _parse(argv)
    devices = _devices(args.topology)
    print(f"compiling for {devices[0].device_kind} ({args.topology}), {len(devices)} device(s)")
    rows = []
    for spec in args.config:
        row = compile_row(spec, devices, args)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
