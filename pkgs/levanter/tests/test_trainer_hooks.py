"""``levanter.trainer.main`` with a caller's hook, and the FLOPs accounting in its summary."""

from __future__ import annotations

import json
import os

import jax
import numpy as np
import pytest

from levanter.trainer import ScheduledHook, StepInfo, main, resolve_model
from testsupport.levanter_data import tiny_config


def test_a_callers_hook_sees_each_step_and_its_metrics_are_logged(tiny_dataset, tmp_path):
    out = str(tmp_path / "run")
    config = tiny_config(tiny_dataset, num_train_steps=3)
    seen: list[tuple[int, float, bool]] = []

    def param_norm(info: StepInfo) -> dict[str, float]:
        norm = float(np.sqrt(sum(np.sum(np.square(x)) for x in jax.tree.leaves(jax.device_get(info.state.params)))))
        seen.append((info.step, info.metrics["loss"], info.last))
        return {"hook/param_norm": norm}

    result = main(config, out, hooks=[ScheduledHook(param_norm, every=2)])
    assert [(s, last) for s, _, last in seen] == [(2, False), (3, True)]
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    losses = {r["step"]: r["loss"] for r in rows if "loss" in r}
    assert [loss for _, loss, _ in seen] == [losses[2], losses[3]]
    logged = [(r["step"], r["hook/param_norm"]) for r in rows if "hook/param_norm" in r]
    assert [s for s, _ in logged] == [2, 3] and all(v > 0 for _, v in logged)
    # The final parameters are those the hook saw at the last step.
    with np.load(os.path.join(out, "final", "params.npz")) as final:
        norm = float(np.sqrt(sum(np.sum(np.square(final[k].astype(np.float64))) for k in final.files)))
    assert logged[-1][1] == pytest.approx(norm, rel=1e-5)

    # FLOPs accounting of the 3 steps x 8 sequences x 32 tokens.
    model = resolve_model(config)
    assert result.flops.num_params == model.num_params()
    assert result.flops.flops_per_token == model.flops_per_token(32)
    assert result.flops.tokens_trained == 3 * 8 * 32
    assert result.flops.model_flops == model.flops_per_token(32) * 3 * 8 * 32
    # XLA counts more than the model's matmuls (norms, softmax, the optimizer), never less.
    assert result.flops.hardware_flops > result.flops.model_flops
    assert (result.flops.peak_flops_per_device, result.flops.peak_flops_source) == (1e11, "config")
    assert 0 < result.flops.mfu < result.flops.hfu
    assert result.flops.hfu / result.flops.mfu == pytest.approx(result.flops.hardware_flops / result.flops.model_flops)


def test_with_gradient_accumulation_hardware_flops_count_every_micro_batch(tiny_dataset, tmp_path, monkeypatch):
    # The step is counted as XLA would run it unrolled (loops are counted once by XLA's cost
    # analysis): accumulation over micro-batches does the same arithmetic as one batch. (Over 4
    # micro-batches: test_data_parallel's accumulated step, so the session compiles it once.)
    from levanter.training import execution

    class Counted(dict):
        stored = 0

        def __setitem__(self, key, value):
            Counted.stored += 1
            super().__setitem__(key, value)

    monkeypatch.setattr(execution, "_COUNTED", Counted())
    whole = main(tiny_config(tiny_dataset, num_train_steps=1, eval_batches=0), str(tmp_path / "one"))
    result = main(tiny_config(tiny_dataset, num_train_steps=1, grad_accum=4, eval_batches=0), str(tmp_path / "run"))
    assert result.flops.model_flops == result.flops.flops_per_token * 8 * 32 and result.flops.mfu > 0
    assert result.flops.hardware_flops == whole.flops.hardware_flops > result.flops.model_flops
    # Both runs count the same unrolled step: the process lowered it for the first only.
    assert Counted.stored == 1
    wider = main(tiny_config(tiny_dataset, num_train_steps=1, eval_batches=0, batch_size=16), str(tmp_path / "wide"))
    assert Counted.stored == 2 and wider.flops.hardware_flops > whole.flops.hardware_flops
