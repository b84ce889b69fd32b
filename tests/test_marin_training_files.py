"""Marin's training tutorials, in both forms, train a nano model from a Hugging Face id resolved from
a hub cache built by the test (no network); Marin's fields this project lacks are refused by name."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from testsupport.e2e import clean_env, entry, run
from testsupport.hub_cache import tinystories_like

EXECUTOR_FORM = '''\
"""A tiny model on TinyStories on CPU, in the executor form of Marin's tutorials."""

from fray.cluster import ResourceConfig
from levanter.data.text import TextLmDatasetFormat
from marin.execution.executor import executor_main, versioned

from experiments.defaults import default_tokenize, default_train
from experiments.llama import llama_nano
from experiments.marin_models import marin_tokenizer
from experiments.simple_train_config import SimpleTrainConfig

stories = "roneneldan/TinyStories"

stories_tokenized = default_tokenize(
    name=stories,
    dataset=stories,
    tokenizer=marin_tokenizer,
    format=TextLmDatasetFormat(),
    sample_count=150,
)

config = SimpleTrainConfig(
    resources=ResourceConfig.with_cpu(),
    train_batch_size=2,
    num_train_steps=4,
    learning_rate=6e-4,
    weight_decay=0.1,
    max_eval_batches=1,
    train_seq_len=128,
)

model = default_train(
    name="nano-stories",
    tokenized=stories_tokenized,
    model_config=versioned(llama_nano),
    train_config=config,
    tags=["llama", "nano", "test"],
    eval_harness_tasks=[],
    use_default_validation=False,
)

if __name__ == "__main__":
    executor_main(steps=[model])
'''

LAZY_FORM = '''\
"""A tiny model on TinyStories, in the lazy-handle form of Marin's tutorials."""

import argparse

from fray.types import ResourceConfig
from levanter.optim.config import AdamConfig
from marin.execution.lazy import ArtifactStep, lower
from marin.execution.step_runner import StepRunner
from marin.experiment.data import tokenized
from marin.experiment.training.train import train_lm
from marin.processing.tokenize.tokenize import TokenizedCache
from marin.training.training import LevanterCheckpoint

from experiments.llama import llama_nano
from experiments.marin_tokenizer import marin_tokenizer

DEVICES = {
    "cpu": (ResourceConfig.with_cpu(), 2),
    "v6e-4": (ResourceConfig.with_tpu("v6e-4", slice_count=1, cpu=8, ram="64g", disk="50g"), 64),
}


def data() -> ArtifactStep[TokenizedCache]:
    return tokenized("stories", tokenizer=marin_tokenizer, source="roneneldan/TinyStories", sample_count=150,
                     version="2026.11.30")


def build(device: str, version: str = "dev") -> ArtifactStep[LevanterCheckpoint]:
    resources, batch_size = DEVICES[device]
    return train_lm(
        name=f"checkpoints/tiny-stories-{device}",
        version=version,
        model=llama_nano,
        optimizer=AdamConfig(learning_rate=6e-4, weight_decay=0.1),
        datasets={data(): 1.0},
        batch_size=batch_size,
        seq_len=128,
        num_train_steps=4,
        z_loss_weight=None,
        evals=None,
        resources=resources,
        run_id=f"tiny-stories-{device}",
        tags=["llama", "tutorial", device],
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", choices=tuple(DEVICES), default="cpu")
    args = parser.parse_args()
    StepRunner().run([lower(build(args.device))])
'''


@pytest.fixture(scope="module")
def hub_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's hub cache and store: both forms read one cache and build into one store, so the
    tokenizer they share (``marin_tokenizer``: a corpus and a BPE trained on it) is built once."""
    folder = tmp_path_factory.mktemp("hub-store")
    tinystories_like(folder / "hf")
    return folder


@pytest.fixture
def hub_env(hub_store: Path) -> dict[str, str]:
    return clean_env(HF_HOME=str(hub_store / "hf"), HF_HUB_OFFLINE="1", MARIN_PREFIX=str(hub_store / "store"))


@pytest.mark.slow
def test_executor_form_trains_from_the_hub_cache(tmp_path: Path, hub_store: Path, hub_env: dict[str, str]) -> None:
    experiment = tmp_path / "tiny_cpu.py"
    experiment.write_text(EXECUTOR_FORM)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    store = hub_store / "store"
    run([sys.executable, str(experiment), "--prefix", str(store)], cwd=elsewhere, env=hub_env)
    data = entry(store, "tokenized/roneneldan/TinyStories")
    index = json.loads((data / "index.json").read_text())
    # 150 documents from each of the two cached train shards; the dataset's own validation split.
    assert (index["splits"]["train"]["records"], index["splits"]["validation"]["records"]) == (300, 60)
    summary = json.loads((entry(store, "checkpoints/nano-stories") / "train_summary.json").read_text())
    assert summary["steps"] == 4 and summary["final_loss"] > 0


@pytest.mark.slow
def test_lazy_form_trains_from_the_hub_cache_and_records_run_id_and_tags(tmp_path: Path, hub_store: Path,
                                                                         hub_env: dict[str, str]) -> None:
    experiment = tmp_path / "tiny_lazy.py"
    experiment.write_text(LAZY_FORM)
    run([sys.executable, str(experiment), "--device", "cpu"], cwd=tmp_path, env=hub_env)
    out = entry(hub_store / "store", "checkpoints/tiny-stories-cpu")
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["steps"] == 4
    provenance = (out / ".marin" / "provenance.json").read_text()
    assert "tiny-stories-cpu" in provenance and "tutorial" in provenance
    # A request this host can never satisfy is refused before anything runs, naming the step and resource.
    refused = run([sys.executable, str(experiment), "--device", "v6e-4"], cwd=tmp_path, env=hub_env, check=False)
    assert refused.returncode != 0
    assert "step checkpoints/tiny-stories-v6e-4: the job needs more than this machine has" in refused.stderr
    assert "tpu_chips: 4 > 0" in refused.stderr


def _train(**overrides: object):
    from experiments.defaults import default_train
    from experiments.llama import llama_nano
    from experiments.simple_train_config import SimpleTrainConfig
    from fray.cluster import ResourceConfig
    from marin.experiment.data import tokenized

    data = tokenized("tokenized/x", source="/nonexistent", tokenizer="/nonexistent")
    train_fields = {k: v for k, v in overrides.items() if not k.startswith("arg_")}
    args = {k[4:]: v for k, v in overrides.items() if k.startswith("arg_")}
    config = SimpleTrainConfig(resources=ResourceConfig.with_cpu(), train_batch_size=2, num_train_steps=3,
                               learning_rate=1e-3, **train_fields)
    return default_train(name="x", tokenized=data, model_config=llama_nano, train_config=config,
                         **{"use_default_validation": False, "eval_harness_tasks": [], **args})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"ema_beta": 0.995}, r"^SimpleTrainConfig.ema_beta=0.995 is not supported by this project"),
        ({"int8": True}, r"^SimpleTrainConfig.int8=True is not supported"),
        ({"rewarmup": 0.1}, r"^SimpleTrainConfig.rewarmup=0.1 is not supported"),
        ({"decay": 0.2, "lr_schedule": "constant"}, r"^SimpleTrainConfig.decay=0.2 with lr_schedule='constant'"),
        ({"data_seed": 7}, r"^SimpleTrainConfig.data_seed=7 is not supported"),
        ({"initialize_from_hf": "org/model"}, r"^SimpleTrainConfig.initialize_from_hf='org/model' is not supported"),
        ({"lr_schedule": "bogus"}, r"^SimpleTrainConfig.lr_schedule='bogus' is not supported \(supported: "),
        ({"optimizer_config": object()}, r"^SimpleTrainConfig.optimizer_config=object\(...\) is not supported"),
        ({"train_seq_len": 4096}, r"^SimpleTrainConfig.train_seq_len=4096 exceeds the model's max_seq_len 512"),
        ({"arg_use_default_validation": True}, r"^default_train\(use_default_validation=True\): Marin's default"),
        ({"arg_eval_harness_tasks": ["hellaswag"]}, r"^default_train\(eval_harness_tasks=\['hellaswag'\]\)"),
        ({"arg_trainer_mesh": "data"}, r"^default_train\(trainer_mesh='data'\) is not supported"),
        ({"arg_override_output_path": "gs://b/x"}, r"^default_train\(override_output_path='gs://b/x'\)"),
    ],
)
def test_each_unsupported_field_is_named(overrides: dict[str, object], message: str) -> None:
    from experiments.defaults import UnsupportedSetting

    with pytest.raises(UnsupportedSetting, match=message):
        _train(**overrides)


def test_supported_fields_reach_the_training_step() -> None:
    from levanter.config import WandbConfig
    from levanter.optim import AdamConfig

    handle = _train(weight_decay=0.05, beta2=0.98, warmup=0.1, lr_schedule="linear", min_lr_ratio=0.0,
                    steps_per_eval=2, max_eval_batches=3, train_seq_len=256, z_loss_weight=1e-4,
                    arg_tags=["a", "b"], arg_wandb_name="run-7", arg_wandb_group="sweep")
    config = handle.config
    assert handle.name == "checkpoints/x"
    assert config.optimizer == AdamConfig(learning_rate=1e-3, weight_decay=0.05, beta2=0.98, warmup=0.1,
                                          schedule="linear", min_lr_ratio=0.0)
    trainer = config.trainer
    assert (trainer.batch_size, trainer.seq_len, trainer.num_train_steps) == (2, 256, 3)
    assert (trainer.eval_every, trainer.eval_batches) == (2, 3)
    assert (trainer.tags, trainer.run_id, trainer.wandb) == (("a", "b"), "run-7", WandbConfig(group="sweep"))
    assert config.z_loss_weight == 1e-4
    # Marin's `decay`: the last 20% of training decays in the schedule's shape (warmup-stable-decay).
    decayed = _train(decay=0.2, lr_schedule="cosine").config.optimizer
    assert (decayed.schedule.value, decayed.decay, decayed.decay_shape.value) == ("wsd", 0.2, "cosine")
    assert _train(decay=0.2).config.optimizer.decay_shape.value == "linear"
    assert _train().config.z_loss_weight == 0.0


def test_default_tokenize_refuses_what_it_cannot_do() -> None:
    from experiments.defaults import UnsupportedSetting, default_tokenize
    from levanter.data.text import TextLmDatasetFormat
    from marin.execution.core.sources import source

    class ChatFormat:
        pass

    with pytest.raises(UnsupportedSetting, match=r"^default_tokenize\(format=ChatFormat\(...\)\): only TextLm"):
        default_tokenize("x", "org/data", tokenizer="/tok", format=ChatFormat())
    with pytest.raises(UnsupportedSetting, match=r"^default_tokenize\(is_validation=True\) is not supported"):
        default_tokenize("x", "org/data", tokenizer="/tok", is_validation=True)
    handle = default_tokenize("org/data", "org/data", tokenizer="/tok", format=TextLmDatasetFormat("story"),
                              sample_count=10)
    assert handle.name == "tokenized/org/data"
    assert (handle.config.source, handle.config.text_field, handle.config.sample_count) == (
        source("org/data"), "story", 10)  # a Hub id: fingerprinted by its commit when planned
