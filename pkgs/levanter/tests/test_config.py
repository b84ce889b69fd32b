"""levanter.config: one tree of training settings, each written once and checked when it is made."""

from __future__ import annotations

import dataclasses

import pytest

from levanter.checkpoint import CheckpointConfig
from levanter.config import (
    TRAINER_REVISION,
    ComputeDtype,
    DataConfig,
    TrainerConfig,
    TrainLmConfig,
    WandbConfig,
    config_from_dict,
    config_to_dict,
)
from levanter.data.spec import DatasetSpec
from levanter.models.llama import LlamaConfig
from levanter.optim import AdamConfig
from rigging.fields import is_hashed

DATA = (DatasetSpec("/data/a"), DatasetSpec("/data/b", weight=3.0))


def _config(**settings) -> TrainLmConfig:
    return TrainLmConfig.from_settings(DATA, LlamaConfig(), AdamConfig(), **settings)


def test_flat_settings_land_in_their_sections():
    cfg = _config(batch_size=16, seq_len=64, num_train_steps=10, seed=3, compute_dtype="bfloat16", prefetch=2,
                  shard_cache_dir="/tmp/shards", vocab_from_data=False, z_loss_weight=1e-4, run_id="r",
                  tags=["x", "y"], checkpoint=CheckpointConfig(save_every=5))
    assert cfg.data == DataConfig(DATA, vocab_from_data=False, prefetch=2, shard_cache_dir="/tmp/shards")
    assert cfg.trainer == TrainerConfig(num_train_steps=10, batch_size=16, seq_len=64, seed=3,
                                        compute_dtype=ComputeDtype.BFLOAT16, run_id="r", tags=("x", "y"),
                                        checkpoint=CheckpointConfig(save_every=5))
    assert cfg.z_loss_weight == 1e-4 and cfg.revision == TRAINER_REVISION


def test_every_setting_name_is_unique_across_sections():
    names = [f.name for cls in (DataConfig, TrainerConfig, TrainLmConfig) for f in dataclasses.fields(cls)]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


@pytest.mark.parametrize("settings, message", [
    ({"batch_size": 6, "grad_accum": 4},
     "batch_size must be divisible by grad_accum, got batch_size=6 and grad_accum=4"),
    ({"batch_size": 0}, "batch_size must be a positive int, got 0"),
    ({"seq_len": 12.5}, "seq_len must be a positive int, got 12.5"),
    ({"eval_every": -1}, "eval_every must be an int >= 0, got -1"),
    ({"prefetch": -2}, "prefetch must be an int >= 0, got -2"),
    ({"compute_dtype": "float16"}, "compute_dtype must be one of ['float32', 'bfloat16'], got 'float16'"),
    ({"z_loss_weight": -0.1}, "z_loss_weight must be a finite number >= 0 or None, got -0.1"),
    ({"tags": ["ok", ""]}, "tags must be a sequence of non-empty strings, got ('ok', '')"),
    ({"run_id": " "}, "run_id must be a non-empty string or None, got ' '"),
    ({"checkpoint": {"save_every": 5}}, "checkpoint must be a CheckpointConfig, got dict"),
    ({"wandb": "my-project"}, "wandb must be a WandbConfig or None, got str"),
    ({"evals_every": 3}, "unknown training setting 'evals_every'; did you mean 'eval_every'?"),
    ({"nonsense": 3}, "unknown training setting 'nonsense'; settings are: "),
])
def test_a_bad_setting_is_one_line_naming_the_field(settings, message):
    with pytest.raises(ValueError) as err:
        _config(**settings)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_optimizer_schedule_is_checked_against_the_run_length():
    wsd = AdamConfig(schedule="wsd", decay=50, warmup=10)
    assert TrainLmConfig.from_settings(DATA, LlamaConfig(), wsd, num_train_steps=60).optimizer is wsd
    with pytest.raises(ValueError, match="do not fit in num_train_steps=40"):
        TrainLmConfig.from_settings(DATA, LlamaConfig(), wsd, num_train_steps=40)


def test_sections_must_have_their_types():
    with pytest.raises(ValueError, match="model must be a LlamaConfig, got dict"):
        TrainLmConfig(data=DataConfig(DATA), model={"hidden_dim": 32})
    with pytest.raises(ValueError, match="datasets must hold DatasetSpec values, got str"):
        DataConfig(("/data/a",))
    with pytest.raises(ValueError, match="datasets must name at least one dataset"):
        DataConfig(())


def test_z_loss_weight_none_means_off():
    assert _config(z_loss_weight=None) == _config() == _config(z_loss_weight=0)
    assert _config().z_loss_weight == 0.0


def test_revision_is_the_trainers_not_a_setting():
    with pytest.raises(TypeError):
        TrainLmConfig(data=DataConfig(DATA), revision=1)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="unknown training setting 'revision'"):
        _config(revision=1)


def test_only_settings_that_do_not_change_the_model_are_unhashed():
    unhashed = {f.name for cls in (DataConfig, TrainerConfig, TrainLmConfig) for f in dataclasses.fields(cls)
                if not is_hashed(f)}
    # mesh: where the arrays live, not what is computed (a run resumes on another slice shape);
    # epochs_warning: when `marin plan` warns of a repeated dataset; remat, attention, loss_block,
    # loss_impl, layer_unroll and offload_optimizer: how the step is computed (tests show the same
    # values and gradients).
    assert unhashed == {"prefetch", "shard_cache_dir", "log_every", "peak_flops_per_device", "run_id", "tags",
                        "wandb", "mesh", "epochs_warning", "remat", "attention", "loss_block", "loss_impl",
                        "layer_unroll", "offload_optimizer"}


def test_dict_round_trip_keeps_every_section():
    cfg = _config(compute_dtype="bfloat16", tags=("a",), run_id="r", z_loss_weight=1e-3,
                  wandb=WandbConfig(project="p", entity="e", mode="offline"))
    as_dict = config_to_dict(cfg)
    assert as_dict["trainer"]["compute_dtype"] == "bfloat16" and as_dict["revision"] == TRAINER_REVISION
    assert config_from_dict(as_dict) == cfg


def test_wandb_config_checks_its_mode():
    with pytest.raises(ValueError, match="wandb mode must be 'online', 'offline', 'disabled' or None, got 'local'"):
        WandbConfig(mode="local")
