"""Two-step CPU pulse test of ``levanter.trainer.main``."""

from __future__ import annotations

import dataclasses
import json
import math
import os

import numpy as np
import pytest

from levanter.checkpoint import CheckpointConfig
from levanter.config import WandbConfig
from levanter.generate import generate, load_final_model
from levanter.trainer import NonFiniteLossError, config_from_dict, config_to_dict, main
from rigging.progress import read_progress
from testsupport.levanter_data import tiny_config

SUMMARY_KEYS = ["final_loss", "val_loss", "steps", "start_step", "output_path", "checkpoint_path", "params_path",
                "config_path", "metrics_path", "model", "tokens_per_s", "checkpoint_blocked_s", "devices", "mesh",
                "processes", "memory", "run_id", "num_params", "flops_per_token", "tokens_trained", "model_flops",
                "hardware_flops", "mfu", "hfu", "peak_flops_per_device", "peak_flops_source", "mfu_causal"]


def test_pulse_two_steps(tiny_dataset, tmp_path):
    out = str(tmp_path / "run")
    result = main(tiny_config(tiny_dataset), out)
    assert result.steps == 2 and result.start_step == 0
    assert math.isfinite(result.final_loss) and math.isfinite(result.val_loss)
    # Untrained on a 64-token vocabulary the loss is near ln(64).
    assert abs(result.final_loss - math.log(64)) < 1.0
    # The summary's JSON (what marin's train_summary.json is made from) keeps its keys, in order.
    summary = result.to_json()
    assert list(summary) == SUMMARY_KEYS
    assert json.loads(json.dumps(summary)) == summary
    assert summary["model"]["vocab_size"] == 64 and summary["memory"] == result.memory.to_json()
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    train_rows = [r for r in rows if "loss" in r]
    assert [r["step"] for r in train_rows] == [1, 2]
    for key in ("loss", "lr", "grad_norm"):
        assert all(math.isfinite(r[key]) for r in train_rows), key
    assert {"tokens_per_s", "mfu", "input_wait_frac"} <= set(train_rows[-1])
    assert any("val_loss" in r for r in rows)
    progress = read_progress(out)  # what a watching runner reads beside the output
    assert (progress.unit, progress.done, progress.total) == ("step", 2, 2)
    assert progress.metrics["loss"] == pytest.approx(train_rows[-1]["loss"])
    assert os.listdir(os.path.join(out, "tensorboard"))
    saved = json.load(open(os.path.join(out, "config.json")))
    assert saved["model"]["vocab_size"] == 64
    assert config_from_dict(saved) == dataclasses.replace(tiny_config(tiny_dataset), model=config_from_dict(saved).model)
    config, params = load_final_model(out)
    assert config.vocab_size == 64
    new = generate(config, params, [1, 2, 3], max_new_tokens=5)
    assert len(new) == 5 and all(0 <= t < 64 for t in new)


def test_vocab_size_comes_from_data(tiny_dataset, tmp_path):
    cfg = tiny_config(tiny_dataset, num_train_steps=1)
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=4096))
    result = main(cfg, str(tmp_path / "run"))
    assert result.model.vocab_size == 64
    _, params = load_final_model(str(tmp_path / "run"))
    assert params["embed"]["embeddings"].shape == (64, 32)


def test_config_roundtrip(tiny_dataset, tmp_path):
    cfg = tiny_config(tiny_dataset, compute_dtype="bfloat16", tags=("a", "b"), run_id="r1", z_loss_weight=1e-4,
                      wandb=WandbConfig(project="p", mode="offline"))
    assert config_from_dict(json.loads(json.dumps(config_to_dict(cfg)))) == cfg


def test_nan_loss_names_the_step(tiny_dataset, tmp_path):
    from testsupport.levanter_data import TINY_OPTIMIZER

    # A huge learning rate overflows float32 within a few steps (Adam's step is about the rate, clipped
    # gradient or not). Only the schedule differs from the other tiny runs, so the step is their program.
    cfg = tiny_config(tiny_dataset, num_train_steps=30,
                      optimizer=dataclasses.replace(TINY_OPTIMIZER, learning_rate=1e30, warmup=0),
                      checkpoint=CheckpointConfig(save_every=100))
    with pytest.raises(NonFiniteLossError) as err:
        main(cfg, str(tmp_path / "run"))
    assert f"at step {err.value.step}" in str(err.value)
    assert err.value.step >= 2
    assert not np.isfinite(err.value.loss)
