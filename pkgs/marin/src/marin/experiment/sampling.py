"""Generate text from a trained step's final parameters."""

from __future__ import annotations

import os
import tempfile

from rigging import filesystem as fs

__all__ = ["sample_text"]


def sample_text(output_path: str, prompt: str, *, max_new_tokens: int = 48, temperature: float = 0.0,
                seed: int = 0) -> str:
    """The continuation of ``prompt`` by the model in a training step's output folder."""
    from tokenizers import Tokenizer

    from levanter.generate import generate, load_final_model

    tokenizer_file = fs.join(output_path, "tokenizer.json")
    if not fs.exists(tokenizer_file):
        raise FileNotFoundError(f"{tokenizer_file}: no tokenizer beside the model (is this a train_lm output?)")
    with tempfile.TemporaryDirectory() as scratch:
        local = os.path.join(scratch, "tokenizer.json")
        with open(local, "wb") as f:
            f.write(fs.read_bytes(tokenizer_file))
        tokenizer = Tokenizer.from_file(local)
    config, params = load_final_model(output_path)
    prompt_ids = tokenizer.encode(prompt).ids
    if not prompt_ids:
        raise ValueError("prompt must not be empty")
    eos = tokenizer.token_to_id("<|endoftext|>")
    new_ids = generate(config, params, prompt_ids, max_new_tokens=max_new_tokens, temperature=temperature,
                       seed=seed, eos_id=eos)
    return tokenizer.decode(new_ids)
