"""z-loss: ``weight * mean(logsumexp(logits)^2)`` is added to the training loss, and only there."""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from levanter.models.llama import LlamaConfig, transformed_llama
from levanter.trainer import loss_fn, main
from testsupport.levanter_data import final_params, random_params, tiny_config


def test_loss_fn_adds_the_weighted_mean_squared_log_partition():
    cfg = LlamaConfig(vocab_size=16, hidden_dim=8, intermediate_dim=16, num_heads=2, num_kv_heads=1, num_layers=1)
    model = transformed_llama(cfg)
    batch = jnp.asarray(np.random.default_rng(0).integers(0, 16, size=(3, 9)), jnp.int32)
    params = random_params(cfg)  # drawn with numpy: no init to compile
    logits = np.asarray(jax.jit(model.apply)(params, None, batch[:, :-1]), np.float64)
    logz = np.log(np.exp(logits).sum(-1))
    picked = np.take_along_axis(logits, np.asarray(batch[:, 1:])[..., None], -1)[..., 0]
    ce, z = float(np.mean(logz - picked)), float(np.mean(logz ** 2))
    assert z > 1  # a vocabulary of 16 keeps log Z near ln 16, so the term is far from 0
    def loss(weight: float) -> float:
        return float(jax.jit(lambda p, b: loss_fn(model, p, b, jnp.float32, z_loss_weight=weight))(params, batch))

    assert loss(0.0) == pytest.approx(ce, rel=1e-5)
    assert loss(0.5) == pytest.approx(ce + 0.5 * z, rel=1e-5)


def _rows(out: str) -> list[dict]:
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if '"loss"' in line]


def test_training_with_z_loss_logs_it_and_changes_the_updates(tiny_dataset, tmp_path):
    plain, with_z = str(tmp_path / "plain"), str(tmp_path / "z")
    main(tiny_config(tiny_dataset, eval_batches=0), plain)
    main(tiny_config(tiny_dataset, eval_batches=0, z_loss_weight=0.1), with_z)
    a, b = _rows(plain), _rows(with_z)
    # Same init, same first batch: the logged cross entropy of step 1 is the same; only the
    # gradient (and so step 2 and the parameters) sees the z-loss.
    assert b[0]["loss"] == pytest.approx(a[0]["loss"], rel=1e-6)
    assert "z_loss" not in a[0] and b[0]["z_loss"] > 0.1 * np.log(64) ** 2 * 0.5
    pa, pb = final_params(plain), final_params(with_z)
    assert any(not np.allclose(pa[k], pb[k]) for k in pa)
