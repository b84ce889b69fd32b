"""Llama presets under Marin's names, with Marin's shapes (``experiments/llama.py`` in Marin).

``vocab_size`` is a placeholder: the trainer replaces it with the vocabulary size recorded by the
tokenized data (``index.json``), so a preset works with any tokenizer. It is set to the Llama 3
tokenizer's 128,256 so that ``num_params()`` matches the size in the name, as Marin counts it.

Only the shapes this project's Llama builds exactly are here: presets that need Llama 3 rotary
scaling (``llama_8b``, ``llama_3_1_8b`` ...) are left out rather than built differently.
"""

from levanter.models.llama import LlamaConfig

LLAMA3_VOCAB_SIZE = 128_256

# The tutorial model: trains in minutes on a laptop CPU. (Its placeholder vocabulary stays at
# 4,096: `make train-nano` hashes it, and the data's vocabulary replaces it anyway.)
llama_nano = LlamaConfig(vocab_size=4096, hidden_dim=32, intermediate_dim=128, num_heads=2, num_kv_heads=2,
                         num_layers=2, max_seq_len=512)

llama_30m = LlamaConfig(vocab_size=LLAMA3_VOCAB_SIZE, hidden_dim=128, intermediate_dim=448, num_heads=2,
                        num_kv_heads=2, num_layers=4, max_seq_len=1024)

llama_50m = LlamaConfig(vocab_size=LLAMA3_VOCAB_SIZE, hidden_dim=192, intermediate_dim=448, num_heads=2,
                        num_kv_heads=2, num_layers=4, max_seq_len=1024)

llama_75m = LlamaConfig(vocab_size=LLAMA3_VOCAB_SIZE, hidden_dim=256, intermediate_dim=896, num_heads=4,
                        num_kv_heads=4, num_layers=8, max_seq_len=1024)

llama_150m = LlamaConfig(vocab_size=LLAMA3_VOCAB_SIZE, hidden_dim=512, intermediate_dim=1792, num_heads=8,
                         num_kv_heads=8, num_layers=6, max_seq_len=1024)

llama_300m = LlamaConfig(vocab_size=LLAMA3_VOCAB_SIZE, hidden_dim=768, intermediate_dim=2688, num_heads=12,
                         num_kv_heads=12, num_layers=12, max_seq_len=1024)

llama_600m = LlamaConfig(vocab_size=LLAMA3_VOCAB_SIZE, hidden_dim=1024, intermediate_dim=3584, num_heads=16,
                         num_kv_heads=8, num_layers=24, max_seq_len=1024)

llama_1_4b = LlamaConfig(vocab_size=LLAMA3_VOCAB_SIZE, hidden_dim=2048, intermediate_dim=7168, num_heads=16,
                         num_kv_heads=8, num_layers=16, max_seq_len=4096)

llama_1_9b = LlamaConfig(vocab_size=LLAMA3_VOCAB_SIZE, hidden_dim=2048, intermediate_dim=7168, num_heads=16,
                         num_kv_heads=8, num_layers=24, max_seq_len=4096)

llama_3_5b = LlamaConfig(vocab_size=LLAMA3_VOCAB_SIZE, hidden_dim=2560, intermediate_dim=8960, num_heads=20,
                         num_kv_heads=10, num_layers=32, max_seq_len=4096)

# Marin's 8B with Llama 2 rotary embeddings (no Llama 3 frequency scaling): the shape built here.
llama_8b_old_rotary = LlamaConfig(vocab_size=LLAMA3_VOCAB_SIZE, hidden_dim=4096, intermediate_dim=14336,
                                  num_heads=32, num_kv_heads=8, num_layers=32, max_seq_len=4096)

# For scaling-law sweeps, smallest first.
scaling_llamas = [llama_30m, llama_50m, llama_150m, llama_300m, llama_600m, llama_1_4b, llama_1_9b, llama_3_5b]
