"""Model families: a run's config names its model's class, and configs written before that read back as Llama."""

from __future__ import annotations

import json

import pytest

from levanter.config import TrainLmConfig, config_from_dict, config_to_dict
from levanter.data.spec import DatasetSpec
from levanter.generate import read_model_config
from levanter.models.family import MODEL_FAMILIES, model_config_from_dict, model_family
from levanter.models.llama import LlamaConfig
from levanter.optim import AdamConfig

MODEL = LlamaConfig(vocab_size=64, hidden_dim=32, intermediate_dim=64, num_heads=2, num_kv_heads=1, num_layers=2)


def _config() -> TrainLmConfig:
    return TrainLmConfig.from_settings((DatasetSpec("/data/a"),), MODEL, AdamConfig())


def test_a_config_records_its_family_and_reads_back():
    as_dict = config_to_dict(_config())
    assert as_dict["model_family"] == "llama" and MODEL_FAMILIES["llama"] is LlamaConfig
    assert "model_family" not in as_dict["model"]  # the model's own fields stay as they were
    assert config_from_dict(json.loads(json.dumps(as_dict))) == _config()


def test_a_config_written_before_families_reads_as_llama(tmp_path):
    as_dict = config_to_dict(_config())
    del as_dict["model_family"]
    assert config_from_dict(as_dict).model == MODEL
    (tmp_path / "config.json").write_text(json.dumps(as_dict))
    assert read_model_config(str(tmp_path)) == MODEL


def test_an_unknown_family_is_named():
    with pytest.raises(ValueError, match="model family must be one of \\['llama'\\], got 'mamba'"):
        model_config_from_dict({}, "mamba")
    with pytest.raises(ValueError, match="model must be a LlamaConfig, got dict"):
        model_family({"hidden_dim": 32})


def test_the_trainer_asks_the_config_for_its_model():
    assert MODEL.sharding_units() == {"heads": 2, "kv_heads": 1}
    transformed = MODEL.build()
    assert callable(transformed.init) and callable(transformed.apply)
