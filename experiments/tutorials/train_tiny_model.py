"""The seed example of DESIGN.md: tokenize a corpus with the marin tokenizer and train a nano Llama.

With network access, point ``source`` at the Hugging Face dataset instead::

    source="roneneldan/TinyStories"

Offline (as on CI machines) it reads the bundled corpus, so it runs with nothing downloaded.
"""

from experiments.llama import llama_nano
from experiments.marin_tokenizer import corpus, marin_tokenizer
from experiments.scale import sized
from levanter.optim import AdamConfig
from marin.execution.lazy import lower
from marin.execution.step_runner import StepRunner
from marin.experiment.data import tokenized
from marin.experiment.training.train import train_lm

tinystories = tokenized(name="tokenized/tinystories", source=corpus,  # or "roneneldan/TinyStories"
                        tokenizer=marin_tokenizer, sample_count=1_000)
nano_model = train_lm(name="checkpoints/marin-nano-tinystories", version="v1", model=llama_nano,
                      optimizer=AdamConfig(learning_rate=6e-4, weight_decay=0.1),
                      datasets={tinystories: 1.0}, batch_size=sized(4, 16), seq_len=sized(2048, 256),
                      # Smoke size (experiments.scale): 2 steps of train_nano's shape (16 x 256), whose compiled
                      # programs the build already has; tests/test_seed_example.py trains the example's own shape.
                      num_train_steps=sized(100, 2))

steps = [nano_model]

if __name__ == "__main__":
    StepRunner().run([lower(nano_model)])
