"""The soak's graph (``marin run testsupport/soak/graph.py:steps``) and its one step function of its own.

Three branches over one bundled corpus, each exercising a part of the engine a kill can hit:

* training: corpus -> tokenizer -> tokenized -> a 2-layer Llama with Orbax checkpoints;
* zephyr's shuffle: an exact-document dedup step whose grouping runs on local worker processes
  (``Grouping.ZEPHYR_WORKERS``: 2 map tasks, 2 partitions; work files under
  ``<output>/.shuffle/<stage>/``);
* steps whose outputs decide the next steps: a seeded TPE sweep of 4 byte-bigram trials, 2 a
  round (round-0 expands into trials 0-1 and round-1, round-1 into trials 2-3 and the results),
  each trial reading the corpus and the dedup's sidecars, and ``best`` reading the sweep.

The trial (:func:`bigram_trial`) counts its calls in the file named by ``$SOAK_CALLS`` (one line
when it starts and one when it has written its output, with its step name, pid and the pids above
it): the soak compares them with the kills and removals it made, so that no build is done twice
unseen. The file is an unhashed field: the clean run and the soak share every hash.

Lives apart from the program (``testsupport/soak/__main__.py``) so that its step function has one module name
(``testsupport.soak.graph``) in the runners and in the soak's own process (which runs as ``__main__``).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any

from marin.execution.core.lazy import StepHandle
from rigging import filesystem as fs
from rigging.fields import unhashed_field

TRAIN_STEPS = 48
"""The model's training steps, unless ``$SOAK_TRAIN_STEPS`` says otherwise (``--train-steps``)."""
SAVE_EVERY = 4
CALLS_ENV = "SOAK_CALLS"
"""Names the file the trials count their calls in (none: not counted)."""
TRAIN_STEPS_ENV = "SOAK_TRAIN_STEPS"
"""Names the model's training steps (the soak's ``--train-steps``; unset: :data:`TRAIN_STEPS`). The
soak sets it in its own process, so that its runners, its ``marin verify`` and its own plans read
one graph."""
MODEL = "soak/model"
DEDUP = "soak/dedup"
SWEEP = "soak/sweep"
TARGETS = (MODEL, DEDUP, f"{SWEEP}/best")
"""The names of the steps :func:`steps` returns."""
TOKENIZED = "soak/tokenized"
TOKENIZER = "soak/tokenizer"
SMALL_TARGETS = (TOKENIZER,)
"""The names of the steps :func:`small_steps` returns."""
SWEEP_TRIALS = 4
SWEEP_PARALLEL = 2


@dataclass(frozen=True)
class BigramConfig:
    """A byte-bigram language model of the documents a dedup step kept, scored on held-out ones."""

    corpus: Any
    """Documents (a step's output of JSON-lines shards)."""
    dedup: Any
    """The exact-dedup step's output over ``corpus``: its sidecars say which documents are duplicates."""
    alpha: float = 1.0
    """Add-alpha smoothing of the bigram counts (the sweep varies it)."""
    holdout: int = 5
    """Documents whose id is a multiple of this are held out for ``val_loss``."""
    calls: str = unhashed_field(default="")
    """A file where calls are counted (empty: none)."""

    def __post_init__(self) -> None:
        if not self.alpha > 0:
            raise ValueError(f"alpha must be > 0, got {self.alpha}")
        if self.holdout < 2:
            raise ValueError(f"holdout must be >= 2, got {self.holdout}")


@dataclass(frozen=True)
class Call:
    """One line of a calls file: a trial's step ``name`` started or ended in process ``pid``,
    whose parent was ``ppid`` and grandparent ``gppid`` (a runner, or its warm template and then
    the runner)."""

    name: str
    event: str
    pid: int
    ppid: int
    gppid: int


def count_call(path: str, event: str) -> None:
    """Append ``<step name> <event> <pid> <ppid> <gppid>`` to ``path`` (one ``O_APPEND`` write)."""
    if not path:
        return
    import psutil  # in the step's process only

    from marin.execution.run.worker import current_step

    running = current_step()
    try:
        gppid = psutil.Process(os.getppid()).ppid()
    except psutil.NoSuchProcess:
        gppid = 0
    line = f"{running.name if running else '?'} {event} {os.getpid()} {os.getppid()} {gppid}\n".encode()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_calls(path: str) -> list[Call]:
    """The calls counted in ``path``, in order."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [Call(name, event, int(pid), int(ppid), int(gppid))
                for name, event, pid, ppid, gppid in (line.split() for line in f)]


def _pairs(text: str) -> Any:
    """The byte pairs of ``text`` as indices ``a * 256 + b``."""
    import numpy as np

    data = np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)
    return data[:-1] * 256 + data[1:]


def _loss(log_p: Any, docs: list[Any]) -> float:
    """Mean negative log-likelihood per byte pair of ``docs`` (nats)."""
    import numpy as np

    pairs = np.concatenate(docs) if docs else np.zeros(0, dtype=np.int64)
    return -float(log_p[pairs].mean()) if pairs.size else math.nan


def bigram_trial(config: BigramConfig, output_path: str) -> None:
    """Step function: fit add-alpha byte bigrams on the kept training documents; write
    ``train_summary.json`` (``final_loss`` on them, ``val_loss`` on the held-out ones, nats/byte)."""
    import numpy as np  # in the step's process only

    from marin.processing.attributes import iter_lockstep, list_shards

    count_call(config.calls, "start")
    train, held_out, skipped = [], [], 0
    for shard in list_shards(config.corpus):
        for doc, (attrs,) in iter_lockstep(shard, [str(config.dedup)]):
            if int(doc["id"]) % config.holdout == 0:
                held_out.append(_pairs(doc["text"]))
            elif attrs["duplicate"]:
                skipped += 1
            else:
                train.append(_pairs(doc["text"]))
    counts = np.bincount(np.concatenate(train), minlength=256 * 256).reshape(256, 256).astype(np.float64)
    log_p = np.log((counts + config.alpha) / (counts.sum(axis=1, keepdims=True) + 256 * config.alpha)).reshape(-1)
    summary = {"final_loss": _loss(log_p, train), "val_loss": _loss(log_p, held_out), "steps": 1, "start_step": 0,
               "train_documents": len(train), "held_out_documents": len(held_out), "duplicates_skipped": skipped}
    fs.atomic_write(fs.join(output_path, "train_summary.json"), json.dumps(summary, sort_keys=True))
    count_call(config.calls, "end")


class BigramTrial(StepHandle, fn=bigram_trial):
    """Handle to a bigram trial (a sweep's base: each trial varies ``alpha``)."""


def train_steps() -> int:
    """The model's training steps: ``$SOAK_TRAIN_STEPS`` (a positive integer), else :data:`TRAIN_STEPS`."""
    value = os.environ.get(TRAIN_STEPS_ENV, "")
    if not value:
        return TRAIN_STEPS
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{TRAIN_STEPS_ENV} must be a positive integer, got {value!r}")
    return int(value)


def small_steps() -> list:
    """The soak's small graph (``--graph small``): the corpus (three JSON-lines shards) and the
    tokenizer trained on it, two data steps of records, shard uploads and leases, without
    training, shuffle or sweep: a soak of a few rounds in seconds."""
    from marin.experiment.data import bundled_corpus, trained_tokenizer

    corpus = bundled_corpus(name="soak/raw", num_stories=300, seed=0, num_shards=3)
    return [trained_tokenizer(name=TOKENIZER, source=corpus, vocab_size=320)]


def steps() -> list:
    """The soak graph: small enough for CI, every stage real."""
    from levanter.checkpoint import CheckpointConfig
    from levanter.models.llama import LlamaConfig
    from levanter.optim import AdamConfig
    from marin.experiment.data import bundled_corpus, tokenized, trained_tokenizer
    from marin.experiment.datakit import dedup
    from marin.experiment.sweeps.sweep import best, sweep
    from marin.experiment.training.train import train_lm

    corpus = bundled_corpus(name="soak/raw", num_stories=300, seed=0, num_shards=3)
    tokenizer = trained_tokenizer(name=TOKENIZER, source=corpus, vocab_size=320)
    data = tokenized(name=TOKENIZED, source=corpus, tokenizer=tokenizer, num_shards=3)
    model = train_lm(
        name=MODEL, version="v1",
        model=LlamaConfig(vocab_size=320, hidden_dim=32, intermediate_dim=64, num_heads=2, num_kv_heads=2,
                          num_layers=2, max_seq_len=64),
        optimizer=AdamConfig(learning_rate=3e-3, warmup=4),
        datasets={data: 1.0}, batch_size=8, seq_len=64, num_train_steps=train_steps(), eval_every=0,
        eval_batches=1,
        # Checkpoints every few steps, so kills land between checkpoints and resumes skip work.
        checkpoint=CheckpointConfig(save_every=SAVE_EVERY, keep_last=2),
    )
    kept = dedup(DEDUP, corpus, method="exact_document", grouping="zephyr_workers")
    trial = BigramTrial(name="unused", config=BigramConfig(corpus=corpus, dedup=kept,
                                                           calls=os.environ.get(CALLS_ENV, "")))
    swept = sweep(SWEEP, base=trial, space={"alpha": ("log_uniform", 1e-3, 10.0)}, method="tpe",
                  trials=SWEEP_TRIALS, parallel=SWEEP_PARALLEL, seed=0, objective="val_loss")
    # The dedup is a target too: were it only read by the sweep, a built sweep would leave it unneeded.
    return [model, kept, best(swept)]
