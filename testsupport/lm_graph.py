"""A tiny language-model graph for the tests of evaluation, branches, extension and compare.

A small bundled corpus, a byte-level BPE trained on it and its token shards are built once per
test module (``data_prefix``); each test then trains tiny Llamas (a few seconds each on CPU)
into a copy of that prefix, with every step run in the test's own process.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from fray import InProcessClient
from levanter.checkpoint import CheckpointConfig
from levanter.models.llama import LlamaConfig
from levanter.optim import AdamConfig, Schedule
from marin.execution.run.runner import StepRunner
from marin.experiment.data import bundled_corpus, tokenized, trained_tokenizer
from marin.experiment.training.train import train_lm

TINY = LlamaConfig(vocab_size=320, hidden_dim=16, intermediate_dim=32, num_heads=2, num_kv_heads=2,
                   num_layers=1, max_seq_len=64)

corpus = bundled_corpus(name="raw/tiny-corpus", num_stories=400, num_shards=2)
held_out = bundled_corpus(name="raw/tiny-held-out", num_stories=40, seed=7, num_shards=1)
tokenizer = trained_tokenizer(name="tokenizers/tiny-bpe", source=corpus, vocab_size=320)
data = tokenized(name="tokenized/tiny", source=corpus, tokenizer=tokenizer, validation_fraction=0.1)


def tiny_model(name: str = "checkpoints/tiny", *, steps: int = 20, optimizer: AdamConfig | None = None,
               save_every: int = 10, keep_every: int | None = 10, **kwargs: Any):
    """A tiny Llama trained on :data:`data` (checkpoints every ``save_every`` steps)."""
    settings = {"eval_every": 0, **kwargs}
    return train_lm(name=name, version="v1", model=TINY,
                    optimizer=optimizer or AdamConfig(learning_rate=3e-3, warmup=2, schedule=Schedule.CONSTANT),
                    datasets={data: 1.0}, batch_size=4, seq_len=32, num_train_steps=steps,
                    checkpoint=CheckpointConfig(save_every=save_every, keep_last=2, keep_every=keep_every,
                                                async_save=False),
                    **settings)


def runner(prefix: str | Path) -> StepRunner:
    """A runner on ``prefix`` that runs every step in this process."""
    return StepRunner(prefix=str(prefix), max_parallel=1, client=InProcessClient(), strict_env=False)


def build_data(prefix: Path) -> Path:
    """Build corpus, held-out text, tokenizer and shards under ``prefix``."""
    result = runner(prefix).run([data, held_out])
    assert result.ok, [(s.name, s.error) for s in result.failed]
    return prefix


def copy_prefix(source: Path, target: Path) -> Path:
    """A private copy of a built prefix (tests add their own models to it)."""
    shutil.copytree(source, target)
    return target
