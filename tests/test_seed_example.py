"""The seed example of DESIGN.md runs as written, pointed at a local corpus (issue 4).

The code below is the DESIGN.md example verbatim. The test changes three things, each checked
to occur exactly once: ``source`` (a Hugging Face id there; a local folder of .jsonl/.txt files
here, as the machines that test this have no network), ``StepRunner()`` (given this test's
prefix) and ``num_train_steps``: 100 steps of batch 4 x 2048 tokens take about 1.5 s each on
this CPU (some 150 s, plus compilation), so the test trains 2 steps of the same shape (a final and
a validation loss all the same).
``experiments/tutorials/train_tiny_model.py`` (part of ``make experiments``) trains all 100.
"""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

from marin.execution.store.records import StepRecord
from testsupport.e2e import ROOT, clean_env, entry, run, success_records

SEED_EXAMPLE = '''\
from marin.experiment.data import tokenized
from marin.experiment.train import train_lm
from marin.execution.lazy import lower
from marin.execution.step_runner import StepRunner
from levanter.optim import AdamConfig
from experiments.marin_tokenizer import marin_tokenizer
from experiments.llama import llama_nano

tinystories = tokenized(name="tokenized/tinystories", source="roneneldan/TinyStories",
                        tokenizer=marin_tokenizer, sample_count=1_000)
nano_model = train_lm(name="checkpoints/marin-nano-tinystories", version="v1", model=llama_nano,
                      optimizer=AdamConfig(learning_rate=6e-4, weight_decay=0.1),
                      datasets={tinystories: 1.0}, batch_size=4, seq_len=2048, num_train_steps=100)
if __name__ == "__main__":
    StepRunner().run([lower(nano_model)])
'''

TEST_STEPS = 2

_NAMES = ["Lily", "Tom", "Mia", "Ben", "Sue", "Max"]
_THINGS = ["a red ball", "a small dog", "a big tree", "a shiny stone", "a blue kite", "a warm cake"]
_PLACES = ["the park", "the garden", "the forest", "the beach", "the house", "the hill"]
_ENDS = ["They were happy.", "They laughed a lot.", "It was a good day.", "They went home to sleep."]


def _story(rng: random.Random) -> str:
    name, friend = rng.sample(_NAMES, 2)
    return (f"Once upon a time, {name} found {rng.choice(_THINGS)} in {rng.choice(_PLACES)}. "
            f"{name} showed it to {friend}. {friend} said, \"Let us play with it!\" "
            f"They played in {rng.choice(_PLACES)} all day and then they found {rng.choice(_THINGS)}. "
            f"{friend} took it to {rng.choice(_PLACES)}. {rng.choice(_ENDS)} {rng.choice(_ENDS)}")


FILES, PER_FILE, TEXT_LINES = 10, 1200, 300


def write_corpus(folder: Path) -> int:
    """JSON-lines files and a text file (a document per line).

    Returns how many documents ``sample_count=1_000`` keeps: at most 1,000 from each file. The
    validation split (2%) must fill at least one batch of 4 x 2049 tokens, or there is no
    validation loss.
    """
    rng = random.Random(1234)
    folder.mkdir(parents=True)
    for k in range(FILES):
        with open(folder / f"part-{k:02d}.jsonl", "w") as f:
            for i in range(PER_FILE):
                f.write(json.dumps({"id": f"{k}-{i}", "text": _story(rng)}) + "\n")
    with open(folder / "extra.txt", "w") as f:
        for _ in range(TEXT_LINES):
            f.write(_story(rng) + "\n")
    return FILES * min(PER_FILE, 1000) + min(TEXT_LINES, 1000)


def _adapted(corpus: Path, prefix: Path) -> str:
    code = SEED_EXAMPLE
    for old, new in ((' source="roneneldan/TinyStories",', f" source={str(corpus)!r},"),
                     ("StepRunner()", f"StepRunner(prefix={str(prefix)!r})"),
                     ("num_train_steps=100)", f"num_train_steps={TEST_STEPS})")):
        assert code.count(old) == 1, old
        code = code.replace(old, new)
    return code


def test_the_seed_example_runs_on_a_local_corpus(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    documents = write_corpus(corpus)
    prefix = tmp_path / "prefix"
    script = tmp_path / "seed_example.py"
    script.write_text(_adapted(corpus, prefix))

    first = run([sys.executable, str(script)], env=clean_env(PYTHONPATH=str(ROOT)))

    tokens = entry(prefix, "tokenized/tinystories")
    model = entry(prefix, "checkpoints/marin-nano-tinystories")
    for step in ("raw/tinystories-synthetic", "tokenizers/marin-bpe-2k", "tokenized/tinystories",
                 "checkpoints/marin-nano-tinystories"):
        assert StepRecord(str(entry(prefix, step))).is_done(), f"{step} did not finish\n{first.describe()}"

    # The local corpus was tokenized, at most 1,000 documents from each file.
    prov = json.loads((tokens / ".marin" / "provenance.json").read_text())
    assert prov["config"]["source"] == str(corpus)
    assert prov["config"]["sample_count"] == 1000
    index = json.loads((tokens / "index.json").read_text())
    records = sum(split["records"] for split in index["splits"].values())
    assert records == documents, index["splits"]
    assert index["splits"]["train"]["records"] > index["splits"]["validation"]["records"] > 0

    # The model trained with the example's shape.
    config = json.loads((model / "config.json").read_text())
    trainer = config["trainer"]
    assert (trainer["batch_size"], trainer["seq_len"], trainer["num_train_steps"]) == (4, 2048, TEST_STEPS)
    assert (config["model"]["hidden_dim"], config["model"]["num_layers"]) == (32, 2)
    assert config["optimizer"]["learning_rate"] == 6e-4 and config["optimizer"]["weight_decay"] == 0.1
    summary = json.loads((model / "train_summary.json").read_text())
    assert summary["steps"] == TEST_STEPS
    vocab = config["model"]["vocab_size"]
    for key in ("final_loss", "val_loss"):
        assert summary[key] is not None and math.isfinite(summary[key]), summary
        assert 0 < summary[key] < math.log(vocab) + 1, summary
    assert (model / "final" / "params.npz").is_file()

    # Run again: everything is cached, nothing is rewritten.
    before = success_records(prefix)
    assert len(before) == 4, sorted(before)
    second = run([sys.executable, str(script)], env=clean_env(PYTHONPATH=str(ROOT)))
    assert success_records(prefix) == before, second.describe()
    assert second.seconds < 30, second.describe()
