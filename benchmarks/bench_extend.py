"""Extend instead of retrain, side by side: ``python -m benchmarks.bench_extend``.

The nano model of ``make train-nano`` is built for 200 steps, then asked for 400: the second build
extends the first (starts from its step-200 checkpoint). Beside it, the same 400-step step is built
from scratch in a prefix that has no earlier build. Both 400-step builds are whole step builds
through the runner (in this process, so neither pays for importing JAX), timed from the run call
to its return; the report gives steps trained and wall time of each, their ratio (goal: extension
<= 0.55 x retrain) and whether the two results are the same bit for bit.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time

import numpy as np

STEPS, FIRST = 400, 200


def _model(steps: int):
    from experiments.llama import llama_nano
    from experiments.train_nano import tinystories
    from levanter.checkpoint import CheckpointConfig
    from levanter.optim import AdamConfig
    from marin.experiment.training.train import train_lm

    return train_lm(name="checkpoints/marin-nano-bench", version="v1", model=llama_nano,
                    optimizer=AdamConfig(learning_rate=3e-3, weight_decay=0.1, warmup=20, schedule="constant"),
                    datasets={tinystories: 1.0}, batch_size=16, seq_len=256, num_train_steps=steps,
                    eval_every=0, checkpoint=CheckpointConfig(save_every=100))


def _runner(prefix: str):
    from fray import InProcessClient
    from marin.execution.run.runner import StepRunner

    return StepRunner(prefix=prefix, max_parallel=1, client=InProcessClient(), strict_env=False)


def _build(prefix: str, handle) -> tuple[float, dict]:
    start = time.perf_counter()
    result = _runner(prefix).run([handle])
    seconds = time.perf_counter() - start
    if not result.ok:
        raise RuntimeError(f"build failed: {[(s.name, s.error) for s in result.failed]}")
    out = result.by_name(handle.name).output_path
    with open(os.path.join(out, "train_summary.json")) as f:
        summary = json.load(f)
    summary["output_path"] = out
    return seconds, summary


def main() -> dict[str, float]:
    """Run the benchmark and return its numbers (also printed as a table)."""
    from experiments.train_nano import tinystories
    from levanter.generate import load_final_model

    logging.getLogger("absl").setLevel(logging.ERROR)
    tmp = tempfile.mkdtemp(prefix="bench-extend-")
    data_prefix = os.path.join(tmp, "data")
    result = _runner(data_prefix).run([tinystories])
    if not result.ok:
        raise RuntimeError(f"data failed: {[(s.name, s.error) for s in result.failed]}")
    extend_prefix, retrain_prefix = os.path.join(tmp, "extend"), os.path.join(tmp, "retrain")
    shutil.copytree(data_prefix, extend_prefix)
    shutil.copytree(data_prefix, retrain_prefix)

    _build(extend_prefix, _model(FIRST))
    extend_s, extended = _build(extend_prefix, _model(STEPS))
    retrain_s, retrained = _build(retrain_prefix, _model(STEPS))
    same = all(np.array_equal(a, b) for a, b in zip(
        _flat(load_final_model(extended["output_path"])[1]), _flat(load_final_model(retrained["output_path"])[1]),
        strict=True))
    shutil.rmtree(tmp, ignore_errors=True)

    steps_ext = extended["steps"] - extended["start_step"]
    steps_re = retrained["steps"] - retrained["start_step"]
    res = {"extend_steps_trained": steps_ext, "retrain_steps_trained": steps_re,
           "extend_wall_s": extend_s, "retrain_wall_s": retrain_s, "wall_ratio": extend_s / retrain_s,
           "bit_identical": float(same)}
    print(f"\nExtend {FIRST} -> {STEPS} steps vs retrain {STEPS} (nano model, 16 x 256 tokens, CPU)")
    print(f"{'':28s}{'extend':>10s}{'retrain':>10s}{'ratio':>9s}{'goal':>9s}")
    print(f"{'steps trained':28s}{steps_ext:>10d}{steps_re:>10d}{steps_ext / steps_re:>9.2f}")
    print(f"{'wall time of the build (s)':28s}{extend_s:>10.1f}{retrain_s:>10.1f}{extend_s / retrain_s:>9.2f}"
          f"{'<= 0.55':>9s}")
    print(f"{'same final parameters':28s}{'yes' if same else 'NO':>10s}")
    return res


def _flat(params: dict) -> list[np.ndarray]:
    return [np.asarray(params[m][n]) for m in sorted(params) for n in sorted(params[m])]


if __name__ == "__main__":
    main()
