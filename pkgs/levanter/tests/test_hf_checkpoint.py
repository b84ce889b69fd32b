"""The Llama in Hugging Face's layout, both ways (transformers itself reads it in marin's test_hf_export)."""

from __future__ import annotations

import dataclasses
import json
import os

import jax
import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import save

from levanter.checkpoint import read_checkpoint_params
from levanter.compat.hf_checkpoint import (
    HfCheckpointError,
    from_hf_tensors,
    hf_config,
    llama_config_from_hf,
    load_hf_params,
    read_hf_tensors,
    save_hf_model,
    to_hf_tensors,
)
from levanter.generate import load_final_model
from levanter.models.llama import LlamaConfig
from levanter.trainer import main
from testsupport.levanter_data import final_params, random_params, tiny_config

# Grouped-query attention (4 query heads over 2 key/value heads) and an 8-wide head, so the rotary
# layout and the head grouping both matter for the logits.
CONFIG = LlamaConfig(vocab_size=96, hidden_dim=32, intermediate_dim=80, num_heads=4, num_kv_heads=2,
                     num_layers=2, max_seq_len=64)


def _tokens(config: LlamaConfig, batch: int = 2, length: int = 24) -> np.ndarray:
    return np.random.default_rng(3).integers(0, config.vocab_size, (batch, length)).astype(np.int32)


def _assert_same_params(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for module in a:
        assert a[module].keys() == b[module].keys(), module
        for name in a[module]:
            np.testing.assert_array_equal(np.asarray(a[module][name]), np.asarray(b[module][name]),
                                          err_msg=f"{module}/{name}")


def test_hf_tensor_names_and_shapes_follow_pytorch_layout():
    params = random_params(CONFIG)
    tensors = to_hf_tensors(CONFIG, params)
    assert tensors["model.embed_tokens.weight"].shape == (96, 32)
    assert tensors["model.layers.1.self_attn.q_proj.weight"].shape == (32, 32)
    assert tensors["model.layers.1.self_attn.k_proj.weight"].shape == (16, 32)  # [kv_heads * head_dim, hidden]
    assert tensors["model.layers.0.mlp.down_proj.weight"].shape == (32, 80)
    assert tensors["lm_head.weight"].shape == (96, 32)
    # The model's layer weights are stacked; the file has one tensor per layer.
    np.testing.assert_array_equal(tensors["model.layers.1.mlp.gate_proj.weight"],
                                  np.asarray(params["layers/mlp/gate_proj"]["w"][1]).T)
    assert len(tensors) == 2 + 2 * 9 + 1 and all(t.dtype == np.float32 for t in tensors.values())


@pytest.mark.parametrize("tie", [False, True])
def test_round_trip_through_files_is_exact(tmp_path, tie):
    config = dataclasses.replace(CONFIG, tie_embeddings=tie, rope_theta=500000.0, norm_eps=1e-6)
    params = random_params(config)
    save_hf_model(str(tmp_path), config, params, eos_token_id=0)
    assert ("lm_head.weight" in read_hf_tensors(str(tmp_path))) is not tie
    hf = json.loads((tmp_path / "config.json").read_text())
    assert (hf["tie_word_embeddings"], hf["rope_theta"], hf["rms_norm_eps"]) == (tie, 500000.0, 1e-6)
    assert llama_config_from_hf(hf) == config
    _assert_same_params(load_hf_params(str(tmp_path), config), params)


def test_bfloat16_and_sharded_checkpoints_load(tmp_path):
    params = random_params(CONFIG)
    tensors = to_hf_tensors(CONFIG, params)
    names = sorted(tensors)
    weight_map = {}
    for shard, part in enumerate((names[: len(names) // 2], names[len(names) // 2:])):
        file = f"model-{shard + 1:05d}-of-00002.safetensors"
        # Hub checkpoints are mostly bfloat16, a type safetensors' own numpy loader cannot read.
        (tmp_path / file).write_bytes(save({n: tensors[n].astype(ml_dtypes.bfloat16) for n in part}))
        weight_map.update({n: file for n in part})
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (tmp_path / "config.json").write_text(json.dumps(hf_config(CONFIG)))

    loaded = load_hf_params(str(tmp_path), CONFIG)
    rounded = jax.tree.map(lambda x: np.asarray(x).astype(ml_dtypes.bfloat16).astype(np.float32), params)
    _assert_same_params(loaded, rounded)


def _write(folder, tensors: dict, config: dict) -> str:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(save(tensors))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    return str(folder)


def test_misfits_are_one_line_errors_naming_the_parameter(tmp_path):
    tensors = to_hf_tensors(CONFIG, random_params(CONFIG))
    good = hf_config(CONFIG)

    def error(tensors=tensors, config=good, model=CONFIG) -> str:
        folder = _write(tmp_path / f"case{len(os.listdir(tmp_path))}", tensors, config)
        with pytest.raises(HfCheckpointError) as info:
            load_hf_params(folder, model)
        message = str(info.value)
        assert "\n" not in message
        return message

    wide = {**tensors, "model.layers.1.mlp.up_proj.weight": np.zeros((81, 32), np.float32)}
    assert "tensor model.layers.1.mlp.up_proj.weight has shape (81, 32), the configured model needs (80, 32)" \
        in error(wide)
    missing = {k: v for k, v in tensors.items() if k != "model.norm.weight"}
    assert "tensor model.norm.weight is missing" in error(missing)
    extra = {**tensors, "model.layers.2.input_layernorm.weight": np.ones(32, np.float32)}
    assert "tensor model.layers.2.input_layernorm.weight has no place in the configured model" in error(extra)
    # Shapes alone cannot tell 4 heads of 8 from 2 heads of 16: the config says.
    assert "num_attention_heads is 4 but the configured model has num_heads=2" in \
        error(model=dataclasses.replace(CONFIG, num_heads=2, num_kv_heads=2))
    assert "rope_theta is 10000.0 but the configured model has rope_theta=500000.0" in \
        error(model=dataclasses.replace(CONFIG, rope_theta=500000.0))
    assert "rope_scaling={'rope_type': 'llama3'} is not supported" in \
        error(config={**good, "rope_scaling": {"rope_type": "llama3"}})
    assert "model_type is 'mistral', only 'llama' is supported" in error(config={**good, "model_type": "mistral"})
    # Old checkpoints' rotary buffers are recomputed, not an error.
    with_buffer = {**tensors, "model.layers.0.self_attn.rotary_emb.inv_freq": np.ones(4, np.float32)}
    from_hf_tensors(CONFIG, with_buffer)


def test_folder_without_weights_or_config_is_named(tmp_path):
    with pytest.raises(HfCheckpointError, match=r"no config\.json \(not a Hugging Face model folder\)"):
        load_hf_params(str(tmp_path), CONFIG)
    (tmp_path / "config.json").write_text(json.dumps(hf_config(CONFIG)))
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(HfCheckpointError, match="only safetensors weights are read"):
        load_hf_params(str(tmp_path), CONFIG)


def test_training_starts_from_an_hf_checkpoint_and_checkpoints_read_back(pretrained_tiny, tmp_path):
    from levanter.compat.hf_checkpoint import HfCheckpointError
    from levanter.config import config_from_dict, config_to_dict
    from levanter.initialize import HfCheckpoint
    from levanter.optim import AdamConfig
    from levanter.trainer import checkpoint_dir

    # The session's tiny run (20 steps of tiny_config: checkpoints every 2 steps, the last 2 kept).
    tiny_dataset, source = pretrained_tiny
    config, params = load_final_model(source)
    # The last checkpoint reads back as the final parameters, without a model or optimizer to restore into.
    _assert_same_params(read_checkpoint_params(checkpoint_dir(source), 20), params)
    with pytest.raises(FileNotFoundError, match=r"no committed checkpoint of step 19 \(committed: \[18, 20\]\)"):
        read_checkpoint_params(checkpoint_dir(source), 19)
    hf_folder = str(tmp_path / "hf")
    save_hf_model(hf_folder, config, params)

    # A step of learning rate 1e-30 moves no float32 weight of this size: the run's final
    # parameters are exactly where it started (and seed 5 would start elsewhere).
    cfg = tiny_config(tiny_dataset, num_train_steps=1, eval_batches=0, seed=5,
                      optimizer=AdamConfig(learning_rate=1e-30), initialize_from=HfCheckpoint(hf_folder))
    assert config_from_dict(json.loads(json.dumps(config_to_dict(cfg)))) == cfg
    main(cfg, str(tmp_path / "run"))
    started = final_params(str(tmp_path / "run"))
    for key, value in final_params(source).items():
        np.testing.assert_array_equal(started[key], value, err_msg=key)

    wider = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, intermediate_dim=80))
    with pytest.raises(HfCheckpointError, match="intermediate_size is 64 but the configured model has intermediate_dim=80"):
        main(wider, str(tmp_path / "wider"))
    with pytest.raises(ValueError, match="initialize_from must be one of \\['CheckpointStart', 'HfCheckpoint', 'TrainedModel'\\] or None, got str"):
        tiny_config(tiny_dataset, initialize_from=hf_folder)
