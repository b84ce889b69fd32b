"""Generate text from a trained step's final parameters."""

from __future__ import annotations

import os
import tempfile

from rigging import filesystem as fs

__all__ = ["sample_chat", "sample_text"]


def sample_text(output_path: str, prompt: str, *, max_new_tokens: int = 48, temperature: float = 0.0,
                seed: int = 0, end_token: str = "<|endoftext|>", strip_end: bool = False) -> str:
    """The continuation of ``prompt`` by the model in a training step's output folder, up to and
    including ``end_token`` (left out with ``strip_end``)."""
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
    eos = tokenizer.token_to_id(end_token)
    new_ids = generate(config, params, prompt_ids, max_new_tokens=max_new_tokens, temperature=temperature,
                       seed=seed, eos_id=eos)
    if new_ids and new_ids[-1] == eos and strip_end:
        new_ids = new_ids[:-1]
    return tokenizer.decode(new_ids)


def sample_chat(output_path: str, user_text: str, *, system: str | None = None, max_new_tokens: int = 48,
                temperature: float = 0.0, seed: int = 0) -> tuple[str, str]:
    """``(rendered prompt, reply)``: the assistant's reply to one user turn, rendered with the chat
    template stored beside the model, sampled until the template's end token (not shown).

    Raises:
        FileNotFoundError: the model was not trained on chat data (no chat template beside it).
    """
    from marin.experiment.chat.tokenize import load_chat_template

    try:
        template = load_chat_template(output_path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{output_path} holds no chat_template.json: --chat needs a model fine-tuned "
                                "on tokenized_chat data") from None
    prompt = template.prompt(user_text, system=system)
    reply = sample_text(output_path, prompt, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
                        end_token=template.end_token, strip_end=True)
    return prompt, reply
