"""LoRA: adapters as a transform of the parameter tree, trained alone over frozen weights, folded on read."""

from __future__ import annotations

import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from levanter.checkpoint import read_checkpoint_params
from levanter.config import TrainLmConfig
from levanter.generate import load_model
from levanter.initialize import TrainedModel
from levanter.lora import LORA_A, LORA_B, LoraConfig, fold, init_adapters
from levanter.models.llama import transformed_llama
from levanter.optim import AdamConfig
from levanter.trainer import main
from levanter.training import TrainState, make_train_step
from levanter.training.step import lm_objective
from testsupport.levanter_data import TINY_MODEL, final_params, random_params, tiny_config

# The adapted weights whose input side is their smaller one: with rank = that side, A is square.
SQUARE_IN = ("q_proj", "o_proj", "gate_proj", "up_proj")
# One layer, to compile quickly: the equivalence is per weight.
SMALL = dataclasses.replace(TINY_MODEL, hidden_dim=16, intermediate_dim=32, num_layers=1)


def _batch(seed: int = 0) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).integers(1, SMALL.vocab_size, size=(4, 17)), jnp.int32)


def _first_step(params, tx, objective=None, frozen=None):
    model = transformed_llama(SMALL)
    step = jax.jit(make_train_step(model, tx, jnp.float32, 1, objective=objective))
    state = TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params),
                       key=jax.random.PRNGKey(0))
    new_state, _ = step(state, _batch(), None, frozen)
    return new_state.params


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_full_rank_lora_takes_full_fine_tuning_first_step(optimizer: str) -> None:
    """With rank = the weight's input side and ``scale * A`` orthogonal, ``A (dB)`` is the full step.

    SGD: ``dW = -lr s^2 A A^T G`` is ``-lr G`` for any orthogonal ``s A`` (random here). Adam's
    first step is elementwise (``-lr g / (|g| + eps)``), so it commutes only with ``s A = I``.
    """
    base = jax.tree.map(jnp.asarray, random_params(SMALL, seed=1))
    rank = SMALL.hidden_dim
    c = 0.5  # A = c Q, alpha chosen so that scale = alpha / rank = 1 / c
    lora = LoraConfig(rank=rank, alpha=rank / c, targets=SQUARE_IN)
    adapters = init_adapters(lora, base)
    rng = np.random.default_rng(7)
    for names in adapters.values():
        q = np.linalg.qr(rng.standard_normal((rank, rank)))[0] if optimizer == "sgd" else np.eye(rank)
        names[LORA_A] = jnp.asarray(c * q, jnp.float32)
    lr = 0.05
    tx = optax.inject_hyperparams(optax.sgd)(learning_rate=lr) if optimizer == "sgd" else AdamConfig(learning_rate=lr, warmup=0, weight_decay=0.0,
                                                              max_grad_norm=None).at_rate(lr)
    full = _first_step(base, tx)
    objective = lm_objective(transformed_llama(SMALL), jnp.float32,
                             params_of=lambda trained, frozen: fold(frozen, trained, lora.scale))
    stepped = _first_step(adapters, tx, objective, frozen=base)
    adapted = fold(base, stepped, lora.scale)
    moved = 0
    for module, names in base.items():
        if module.rsplit("/", 1)[-1] in SQUARE_IN:
            delta_full = np.asarray(full[module]["w"] - names["w"])
            delta_lora = np.asarray(adapted[module]["w"] - names["w"])
            np.testing.assert_allclose(delta_lora, delta_full, rtol=2e-4, atol=1e-7, err_msg=module)
            moved += 1
        else:  # frozen: only the adapters train
            for name, value in names.items():
                np.testing.assert_array_equal(np.asarray(adapted[module][name]), np.asarray(value))
    assert moved == 4 * SMALL.num_layers


def test_adapters_start_at_zero_and_fold_batched_over_leading_axes() -> None:
    lora = LoraConfig(rank=2, alpha=4.0, targets=("q_proj",))
    stacked = {"layers/~/attn/~/q_proj": {"w": jnp.ones((3, 4, 5))}, "embed": {"embeddings": jnp.ones((7, 4))}}
    adapters = init_adapters(lora, stacked)
    assert adapters["layers/~/attn/~/q_proj"][LORA_A].shape == (3, 4, 2)
    assert adapters["layers/~/attn/~/q_proj"][LORA_B].shape == (3, 2, 5)
    np.testing.assert_array_equal(fold(stacked, adapters, lora.scale)["layers/~/attn/~/q_proj"]["w"], 1.0)
    a = np.arange(24, dtype=np.float32).reshape(3, 4, 2)
    b = np.ones((3, 2, 5), np.float32)
    folded = fold(stacked, {"layers/~/attn/~/q_proj": {LORA_A: a, LORA_B: b}}, 2.0)
    for layer in range(3):
        np.testing.assert_allclose(folded["layers/~/attn/~/q_proj"]["w"][layer], 1 + 2.0 * a[layer] @ b[layer])


def test_bad_lora_settings_are_one_line_errors_naming_what_is_wrong(tiny_dataset: str) -> None:
    with pytest.raises(ValueError, match=r"^lora rank 64 is larger than the dimension of q_proj \(32 x 32\): at most 32$"):
        tiny_config(tiny_dataset, initialize_from=TrainedModel("/x"), lora=LoraConfig(rank=64, targets=("q_proj",)))
    with pytest.raises(ValueError, match=r"lora targets \['qproj'\] name no linear module of the model"):
        tiny_config(tiny_dataset, initialize_from=TrainedModel("/x"), lora=LoraConfig(targets=("qproj",)))
    with pytest.raises(ValueError, match="lora adapts trained weights: give initialize_from=checkpoint"):
        tiny_config(tiny_dataset, lora=LoraConfig())
    with pytest.raises(ValueError, match="lora rank must be a positive int, got 0"):
        LoraConfig(rank=0)
    with pytest.raises(ValueError, match="lora rank 9 is larger than the dimension of .*k_proj"):
        init_adapters(LoraConfig(rank=9, targets=("k_proj",)),
                      {"layer_0/~/attn/~/k_proj": {"w": jax.ShapeDtypeStruct((32, 8), jnp.float32)}})



def test_an_average_of_a_lora_run_is_refused_in_one_line(tiny_dataset: str) -> None:
    # ema(A) ema(B) is not the average of W + s A B: the combination is refused before anything runs.
    with pytest.raises(ValueError, match=r"^ema with lora would average the factors A and B, not the weights the "
                                         r"model computes with \(W \+ s A B\): drop ema=, or train the weights "
                                         r"without lora$"):
        tiny_config(tiny_dataset, initialize_from=TrainedModel("/x"), lora=LoraConfig(targets=("q_proj",)), ema=0.9)
def test_a_lora_run_trains_and_checkpoints_only_adapters_and_reads_back_folded(pretrained_tiny, tmp_path) -> None:
    tiny_dataset, pretrained = pretrained_tiny
    lora = LoraConfig(rank=4, alpha=8.0, targets=("q_proj", "v_proj", "down_proj"))
    out = str(tmp_path / "lora")
    config: TrainLmConfig = tiny_config(tiny_dataset, num_train_steps=4, eval_batches=1, initialize_from=TrainedModel(pretrained),
                                        lora=lora, optimizer=AdamConfig(learning_rate=3e-2, warmup=0))
    result = main(config, out)

    record = json.load(open(os.path.join(out, "lora.json")))
    assert record["rank"] == 4 and record["base"] == {"kind": "trained_model", "path": pretrained, "ema": False}
    saved = final_params(out)
    assert saved and all(k.rsplit("/", 1)[-1] in (LORA_A, LORA_B) for k in saved), sorted(saved)
    # Two factors of three targets in every layer (stacked: the layers on a leading axis).
    assert sum(int(np.prod(v.shape[:-2])) for v in saved.values()) == 2 * 3 * TINY_MODEL.num_layers
    checkpoint = read_checkpoint_params(os.path.join(out, "checkpoints"), 4)
    assert {name for names in checkpoint.values() for name in names} == {LORA_A, LORA_B}

    _, base = load_model(pretrained)
    model_config, folded = load_model(out)
    assert model_config == result.model
    changed = {m for m in base if not all(np.array_equal(np.asarray(base[m][n]), np.asarray(folded[m][n]))
                                           for n in base[m])}
    assert changed == {m for m in base if m.rsplit("/", 1)[-1] in lora.targets}
    # The folded model is the one the run validated: same loss on the same batch.
    from levanter.data import DatasetSpec, eval_batches
    from levanter.trainer import loss_fn

    batch = jnp.asarray(eval_batches([DatasetSpec(tiny_dataset)], seq_len=32, batch_size=8, max_batches=1)[0])
    model = transformed_llama(model_config)
    loss = float(jax.jit(lambda p, b: loss_fn(model, p, b, jnp.float32))(folded, batch))
    assert loss == pytest.approx(result.val_loss, rel=1e-5)
