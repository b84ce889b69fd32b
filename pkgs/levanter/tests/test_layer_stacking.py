"""Stacked layer weights: what main's code wrote (per layer) still loads, resumes and exports.

``data/legacy_run`` is a real run written by the code before the stacking (``tiny_config``, 2
steps, a committed Orbax checkpoint of step 2 and ``final/params.npz``, layers as ``layer_<i>/...``).
"""

from __future__ import annotations

import dataclasses
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from levanter.checkpoint import CheckpointConfig, read_checkpoint_params, restore_checkpoint, saved_per_layer
from levanter.compat.hf_checkpoint import load_hf_params, save_hf_model
from levanter.generate import generate, load_model
from levanter.initialize import CheckpointStart
from levanter.models.layout import is_per_layer, stack_layers, stack_tree, unstack_layers, unstack_tree
from levanter.optim import AdamConfig
from levanter.sharding import MeshConfig, make_mesh
from levanter.trainer import abstract_state, main
from testsupport.levanter_data import TINY_MODEL, TINY_OPTIMIZER, tiny_config

LEGACY = os.path.join(os.path.dirname(__file__), "data", "legacy_run")
MODEL = dataclasses.replace(TINY_MODEL, vocab_size=64)


def _legacy_final() -> dict:
    params: dict = {}
    with np.load(os.path.join(LEGACY, "final", "params.npz")) as flat:
        for key in flat.files:
            module, name = key.rsplit("/", 1)
            params.setdefault(module, {})[name] = flat[key]
    return params


def _equal(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_stack_and_unstack_are_inverse_and_keep_other_entries():
    old = _legacy_final()
    assert is_per_layer(old) and "layer_1/attn/q_proj" in old
    stacked = stack_layers(old)
    assert not is_per_layer(stacked) and stacked["layers/attn/q_proj"]["w"].shape == (2, 32, 32)
    np.testing.assert_array_equal(stacked["layers/mlp/up_proj"]["w"][1], old["layer_1/mlp/up_proj"]["w"])
    assert stacked["embed"] is old["embed"]
    _equal(unstack_layers(stacked), old)
    with pytest.raises(ValueError, match=r"per-layer parameters must be layers 0..1, got layers \[0, 2\]"):
        stack_layers({"layer_0/a": {"w": np.zeros(2)}, "layer_2/a": {"w": np.zeros(2)}})


def test_optimizer_states_convert_with_their_parameters():
    old = jax.tree.map(jnp.asarray, _legacy_final())
    tx = AdamConfig(weight_decay=0.1).build(10)
    state = tx.init(old)
    converted = stack_tree(state)
    _equal(converted, tx.init(stack_layers(old)))
    _equal(unstack_tree(converted), state)


def test_a_checkpoint_written_before_the_stacking_restores_stacked():
    directory = os.path.join(LEGACY, "checkpoints")
    assert saved_per_layer(directory, 2)
    params = read_checkpoint_params(directory, 2)
    _equal(params, stack_layers(_legacy_final()))  # the last checkpoint holds the final parameters
    tx = TINY_OPTIMIZER.at_rate(0.0)
    target = abstract_state(MODEL, tx, make_mesh(MeshConfig()))
    restored = restore_checkpoint(directory, 2, target)
    assert restored.step == 2 and int(restored.state.step) == 2
    assert jax.tree.structure(restored.state) == jax.tree.structure(target)
    for got, want in zip(jax.tree.leaves(restored.state), jax.tree.leaves(target), strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype and got.sharding == want.sharding
    _equal(restored.state.params, params)
    # The moments were restored layer by layer into their stacked places.
    adam = [s for s in jax.tree.leaves(restored.state.opt_state, is_leaf=lambda x: isinstance(x, optax.ScaleByAdamState))
            if isinstance(s, optax.ScaleByAdamState)]
    assert adam and float(jnp.abs(adam[0].mu["layers/attn/q_proj"]["w"][1]).sum()) > 0


def test_final_parameters_of_an_old_run_load_stacked_and_generate(tmp_path):
    config, params = load_model(LEGACY)
    _equal(params, stack_layers(_legacy_final()))
    _, at_step = load_model(LEGACY, step=2)
    _equal(at_step, params)
    assert len(generate(config, params, [1, 2, 3], max_new_tokens=4)) == 4


def test_hf_export_of_an_old_run_keeps_the_hugging_face_layout(tmp_path):
    from safetensors.numpy import load_file

    config, params = load_model(LEGACY)
    save_hf_model(str(tmp_path), config, params)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    old = _legacy_final()
    np.testing.assert_array_equal(tensors["model.layers.1.self_attn.k_proj.weight"], old["layer_1/attn/k_proj"]["w"].T)
    assert not any("layers." in name and ".layers." not in name for name in tensors)
    _equal(load_hf_params(str(tmp_path), config), params)


def test_an_old_run_resumes_and_branches(tiny_dataset, tmp_path):
    # Resume: the old run's own folder, trained on to step 4 by today's code.
    out = str(tmp_path / "resume")
    shutil.copytree(LEGACY, out)
    cfg = tiny_config(tiny_dataset, num_train_steps=4, checkpoint=CheckpointConfig(save_every=2, keep_last=2))
    result = main(cfg, out)
    assert (result.start_step, result.steps) == (2, 4) and np.isfinite(result.final_loss)
    assert not saved_per_layer(os.path.join(out, "checkpoints"), 4)
    # Branch: a new run starting from the old checkpoint.
    start = CheckpointStart(checkpoint_path=os.path.join(LEGACY, "checkpoints"), step=2)
    branch = main(tiny_config(tiny_dataset, num_train_steps=3, initialize_from=start), str(tmp_path / "branch"))
    assert (branch.start_step, branch.steps) == (2, 3)
