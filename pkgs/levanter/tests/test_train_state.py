"""``TrainState`` keeps the checkpoint format of the dict it replaced: same paths, same files, either way round."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from levanter.checkpoint import CheckpointConfig, Checkpointer, read_checkpoint_params
from levanter.training import TrainState
from levanter.training.state import params_initializer, state_initializer
from testsupport.levanter_data import TINY_MODEL, TINY_OPTIMIZER


def _dict_state() -> dict:
    params = {"embed": {"embeddings": jnp.arange(12.0).reshape(4, 3)}, "lm_head": {"w": jnp.ones((3, 4))}}
    return {"params": params, "opt_state": (jnp.zeros((), jnp.int32), {"embed": {"embeddings": jnp.full((4, 3), 0.5)}}),
            "step": jnp.asarray(7, jnp.int32), "key": jax.random.PRNGKey(3)}


def _target(tree):
    device = jax.devices()[0]
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype,
                                                       sharding=jax.sharding.SingleDeviceSharding(device)), tree)


def _same(a, b) -> bool:
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(leaves_a) == len(leaves_b) and all(
        np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(leaves_a, leaves_b, strict=True))


def test_paths_and_leaf_order_are_the_dicts():
    as_dict = _dict_state()
    state = TrainState.of(as_dict)
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(state)]
    assert paths == [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(as_dict)]
    assert "['params']['embed']['embeddings']" in paths
    assert _same(state, as_dict)
    assert state["params"] is state.params and state.replace(step=1).step == 1
    with pytest.raises(KeyError, match="no field 'parameters'"):
        state["parameters"]
    with pytest.raises(KeyError, match=r"lacks \['key'\]"):
        TrainState.of({k: v for k, v in as_dict.items() if k != "key"})


@pytest.mark.parametrize("saved_as", ["dict", "TrainState"])
def test_a_checkpoint_restores_into_either_form(tmp_path, saved_as):
    as_dict = _dict_state()
    saved = as_dict if saved_as == "dict" else TrainState.of(as_dict)
    directory = str(tmp_path / "ckpt")
    checkpointer = Checkpointer(directory, CheckpointConfig(async_save=False))
    try:
        checkpointer.save(7, saved, {"position": 3})
        restored = checkpointer.restore_latest(_target(TrainState.of(as_dict)))
        assert restored is not None and isinstance(restored.state, TrainState)
        assert _same(restored.state, as_dict) and restored.data_state == {"position": 3}
        old_form = checkpointer.restore_latest(_target(as_dict))
        assert old_form is not None and isinstance(old_form.state, dict) and _same(old_form.state, as_dict)
    finally:
        checkpointer.close()
    # Read without a target (how `marin` reads a branch's or an extension's parameters).
    params = read_checkpoint_params(directory, 7)
    assert _same(params, as_dict["params"])


def test_both_forms_write_the_same_checkpoint_metadata(tmp_path):
    written = {}
    for name, state in (("dict", _dict_state()), ("typed", TrainState.of(_dict_state()))):
        directory = str(tmp_path / name)
        checkpointer = Checkpointer(directory, CheckpointConfig(async_save=False))
        try:
            checkpointer.save(1, state, {})
        finally:
            checkpointer.close()
        with open(os.path.join(directory, "1", "state", "_METADATA")) as f:
            written[name] = f.read()
    assert written["dict"] == written["typed"]


@pytest.mark.parametrize("seq_len", [16, 64])
def test_a_fresh_state_has_the_parameters_of_an_init_on_a_full_length_input(seq_len):
    # The init is traced on one token (one compiled init for every sequence length); the parameters
    # must be those an init on the run's own input shape gives, so fresh runs start where they did.
    # The parameters' program of a fresh run (levanter.training.start.fresh_state) of tiny_config's
    # model, so the session compiles this init once.
    key = jax.random.PRNGKey(5)
    params, kept = jax.jit(params_initializer(TINY_MODEL))(key)
    init_key, rest = jax.random.split(key)
    full = jax.jit(TINY_MODEL.build(jnp.float32).init)(init_key, jnp.zeros((1, seq_len), jnp.int32))
    assert jax.tree.structure(params) == jax.tree.structure(full) and _same(params, full)
    assert np.array_equal(kept, rest)


def test_fresh_parameters_drawn_on_the_host_are_the_devices_own_split_as_the_run_says():
    # On an accelerator the parameters are drawn by the host's CPU and each device gets its shards
    # (levanter.training.start.fresh_state): the same state as the devices' own init, placed as the
    # target says; on CPU devices there is no host to go to.
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from levanter.training.start import fresh_state, host_cpu

    tx = TINY_OPTIMIZER.at_rate(0.0)
    mesh = Mesh(np.asarray(jax.devices()), ("fsdp",))
    shapes = jax.eval_shape(state_initializer(TINY_MODEL, tx, True), jax.random.PRNGKey(0))
    # The first dimension split over the devices where it divides, else replicated.
    shardings = jax.tree.map(lambda s: NamedSharding(mesh, P("fsdp") if s.ndim and s.shape[0] % mesh.size == 0
                                                     else P()), shapes)
    assert host_cpu(shardings) is None
    on_devices = jax.jit(state_initializer(TINY_MODEL, tx, True), out_shardings=shardings)(jax.random.PRNGKey(11))
    from_host = fresh_state(TINY_MODEL, tx, 11, shardings, ema=True, host=jax.devices("cpu")[0])
    assert _same(from_host, on_devices) and _same(from_host.ema, from_host.params)
    # On CPU devices the parameters and the optimizer state are two programs (the parameters' shared
    # by every optimizer of the model): the same state again, placed as the target says.
    on_cpus = fresh_state(TINY_MODEL, tx, 11, shardings, ema=True)
    assert _same(on_cpus, on_devices) and jax.tree.structure(on_cpus) == jax.tree.structure(on_devices)
    for got, want in zip(jax.tree.leaves(on_cpus), jax.tree.leaves(shardings), strict=True):
        assert got.sharding.is_equivalent_to(want, got.ndim)
    assert jax.tree.structure(from_host) == jax.tree.structure(on_devices)
    for got, want in zip(jax.tree.leaves(from_host), jax.tree.leaves(shardings), strict=True):
        assert got.sharding.is_equivalent_to(want, got.ndim)
    # The seed is the state's: another seed, other parameters.
    other = fresh_state(TINY_MODEL, tx, 12, shardings, ema=True, host=jax.devices("cpu")[0])
    assert not _same(other.params, from_host.params)
