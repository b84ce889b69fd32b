"""Llama presets used by the experiments.

``vocab_size`` here is a placeholder: the trainer replaces it with the vocabulary size recorded by
the tokenized data (``index.json``), so a preset works with any tokenizer.
"""

from levanter.models.llama import LlamaConfig

# The tutorial model: trains in minutes on a laptop CPU.
llama_nano = LlamaConfig(
    vocab_size=4096,
    hidden_dim=32,
    intermediate_dim=128,
    num_heads=2,
    num_kv_heads=2,
    num_layers=2,
    max_seq_len=512,
)

# About 150M parameters (153M with a 32k vocabulary): a first real run on one accelerator.
llama_150m = LlamaConfig(
    vocab_size=32768,
    hidden_dim=768,
    intermediate_dim=2688,
    num_heads=12,
    num_kv_heads=12,
    num_layers=12,
    max_seq_len=2048,
)
