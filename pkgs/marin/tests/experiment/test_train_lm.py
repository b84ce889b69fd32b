"""``train_lm``: its step config is levanter's TrainLmConfig, checked when the handle is made."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import steps_for_tests as t

from iris.cluster import ResourceConfig
from levanter.checkpoint import CheckpointConfig
from levanter.config import TrainLmConfig, WandbConfig
from levanter.data.spec import DatasetSpec
from levanter.models.llama import LlamaConfig
from levanter.optim import AdamConfig
from levanter.sharding import MeshConfig
from marin.execution.core.errors import InvalidStep
from marin.execution.core.graph import dependencies_of
from marin.execution.core.lazy import lower
from marin.experiment.data import tokenized
from marin.experiment.training.train import train_lm, train_lm_step
from testsupport.hashing import hash_over_fixed_sources

DATA = tokenized(name="tokenized/x", source="/corpus", tokenizer="/tokenizer.json")


def _handle(**settings):
    settings.setdefault("optimizer", AdamConfig())
    return train_lm(name="checkpoints/x", version="v1", model=LlamaConfig(),
                    datasets={DATA: 1.0}, batch_size=8, seq_len=64, num_train_steps=20, **settings)


def test_the_step_config_is_levanters_config_with_the_data_as_a_dependency():
    step = lower(_handle(seed=3, eval_every=10, checkpoint=CheckpointConfig(save_every=5)))
    assert step.fn is train_lm_step and isinstance(step.config, TrainLmConfig)
    assert step.config.data.datasets == (DatasetSpec(path=DATA, weight=1.0),)
    assert (step.config.trainer.batch_size, step.config.trainer.seq_len, step.config.trainer.num_train_steps,
            step.config.trainer.seed, step.config.trainer.eval_every) == (8, 64, 20, 3, 10)
    assert dependencies_of(step) == [lower(DATA)]


def test_settings_that_do_not_change_the_model_do_not_change_the_hash():
    base = hash_over_fixed_sources(_handle())
    for settings in ({"run_id": "mine"}, {"tags": ["a", "b"]}, {"log_every": 10}, {"prefetch": 1},
                     {"shard_cache_dir": "/tmp/x"}, {"peak_flops_per_device": 1e12},
                     {"wandb": WandbConfig(project="p")}, {"z_loss_weight": None}, {"evals": None},
                     {"resources": ResourceConfig.with_cpu()}, {"mesh": MeshConfig(data=1, fsdp=-1, tensor=2)},
                     # How the step is computed, not what (tests show equal values and gradients).
                     {"remat": "full"}, {"remat": "offload"}, {"attention": "splash"}, {"loss_block": 16}, {"offload_optimizer": True}):
        assert hash_over_fixed_sources(_handle(**settings)) == base, settings
    for settings in ({"seed": 1}, {"z_loss_weight": 1e-4}, {"grad_accum": 2}, {"eval_every": 7},
                     {"compute_dtype": "bfloat16"}, {"checkpoint": CheckpointConfig(save_every=7)},
                     # The optimizer state's storage changes the numbers.
                     {"optimizer": AdamConfig(moment_dtype="bfloat16")},
                     {"optimizer": AdamConfig(factored_second_moment=True)}, {"grad_dtype": "bfloat16"}):
        assert hash_over_fixed_sources(_handle(**settings)) != base, settings


def test_the_hash_of_a_training_step_is_pinned():
    # Computed on the code before remat, attention kernels, loss blocks and compact moments existed:
    # adding them (unhashed, or hashed only when set) left every training step's identity as it was.
    assert hash_over_fixed_sources(_handle()) == "cb7995276137b51a98ffa343526652319fc967253626e03b8b4aed333d379102"
    assert hash_over_fixed_sources(_handle(remat="save_dots", attention="xla")) == hash_over_fixed_sources(_handle())


@pytest.mark.parametrize("settings, message", [
    ({"grad_accum": 3}, "train_lm 'checkpoints/x': batch_size must be divisible by grad_accum, got batch_size=8 "
                        "and grad_accum=3"),
    ({"z_loss_weight": -1}, "train_lm 'checkpoints/x': z_loss_weight must be a finite number >= 0 or None, got -1"),
    ({"learning_rate": 1e-3}, "train_lm 'checkpoints/x': unknown training setting 'learning_rate'; settings are: "),
    ({"mesh": "fsdp=8"}, "train_lm 'checkpoints/x': mesh must be a MeshConfig, got str"),
    ({"remat": "some"}, "train_lm 'checkpoints/x': remat must be one of ['auto', 'none', 'save_dots', "
                        "'save_attention', 'full', 'offload'], got 'some'"),
    ({"attention": "flash"}, "train_lm 'checkpoints/x': attention must be one of ['auto', 'xla', 'splash'], got 'flash'"),
    ({"evals": ["hellaswag"]}, "train_lm 'checkpoints/x': eval dataset 'hellaswag': 'hellaswag' is not a tokenized "
                               "handle, a step, an existing path, a URL or a Hugging Face dataset id"),
])
def test_a_bad_setting_fails_when_the_handle_is_made(settings, message):
    with pytest.raises(InvalidStep) as err:
        _handle(**settings)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_marin_plan_reports_a_bad_setting_in_one_line_without_touching_the_store(tmp_path):
    exp = tmp_path / "bad_train.py"
    exp.write_text(textwrap.dedent("""
        from levanter.models.llama import LlamaConfig
        from levanter.optim import AdamConfig
        from marin.experiment.data import tokenized
        from marin.experiment.training.train import train_lm

        data = tokenized(name="tokenized/x", source="/corpus", tokenizer="/tokenizer.json")
        model = train_lm(name="checkpoints/x", version="v1", model=LlamaConfig(), optimizer=AdamConfig(),
                         datasets={data: 1.0}, batch_size=6, seq_len=64, num_train_steps=20, grad_accum=4)
        steps = [model]
    """))
    prefix = tmp_path / "store"
    proc = subprocess.run([sys.executable, "-m", "marin.cli.main", "plan", str(exp), "--prefix", str(prefix)],
                          capture_output=True, text=True, cwd=t.WORKSPACE, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines()[0] == (f"error: {exp}:8: train_lm 'checkpoints/x': batch_size must be "
                                           "divisible by grad_accum, got batch_size=6 and grad_accum=4")
    assert "Traceback" not in proc.stderr and not prefix.exists()
