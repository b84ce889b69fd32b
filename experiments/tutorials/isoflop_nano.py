"""A small IsoFLOP ladder: three compute budgets times three sizes of a tiny Llama, fitted.

At each budget C every size N trains on C / (6N) tokens of the bundled stories and is scored on
held-out stories. The fit step draws, per budget, a parabola of held-out loss in log N and its
minimum, then the compute-optimal N*(C) and D*(C) as power laws with their exponents, standard
errors and 95% intervals (``isoflop_fit.json``, ``isoflop_fit.png``; the run's report shows the plot).
Nine tiny runs: a few minutes on two CPUs. (A ladder this small and this short measures the recipe,
not nature: the exponents come with wide intervals.)

    marin run experiments/tutorials/isoflop_nano.py
    marin compare experiments/tutorials/isoflop_nano.py --sort model_flops
"""

from __future__ import annotations

from experiments.scale import sized
from experiments.train_nano import tinystories
from experiments.tutorials.cooldown_sweep import held_out
from levanter.models.llama import LlamaConfig
from levanter.optim import AdamConfig
from marin.experiment import isoflop

VOCAB = 2048  # the tutorial tokenizer's (experiments.marin_tokenizer): parameters are counted with it


def tiny_llama(hidden_dim: int) -> LlamaConfig:
    """The ladder's model family: two layers, two heads, width ``hidden_dim``."""
    return LlamaConfig(vocab_size=VOCAB, hidden_dim=hidden_dim, intermediate_dim=4 * hidden_dim, num_heads=2,
                       num_kv_heads=2, num_layers=2, max_seq_len=128)


ladder = isoflop(
    "scaling/isoflop-nano",
    # Smoke size (experiments.scale): two budgets of a few dozen steps (the fewest a fit of the
    # optimum against compute takes), every size still in each.
    budgets=sized([1e10, 3e10, 1e11], [1e9, 4e9]),
    sizes=[tiny_llama(8), tiny_llama(16), tiny_llama(32)],
    data=tinystories,
    eval={"held-out": held_out},
    optimizer=AdamConfig(learning_rate=2e-2, weight_decay=0.1, warmup=0.1, min_lr_ratio=0.1),
    batch_size=4,
    seq_len=64,
    eval_every=0,
    min_steps=sized(10, 2),
)

steps = [ladder]
