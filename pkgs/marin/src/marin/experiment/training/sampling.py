"""Generate text from a trained step's final parameters (``marin sample``), on the key/value-cache
decoder (``levanter.inference``)."""

from __future__ import annotations

from typing import Any

__all__ = ["sample_chat", "sample_completions", "sample_text"]


def sample_completions(output_path: str, prompt: str, *, n: int = 1, max_new_tokens: int = 48,
                       temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0,
                       chat: bool = False, system: str | None = None) -> tuple[str, list[str]]:
    """``(rendered prompt, continuations)``: ``n`` continuations of ``prompt`` by the model in a training
    step's output folder, each until the model's end token (not shown) or
    ``max_new_tokens``. Continuation ``k`` draws with ``completion_seed(seed, 0, k)``, the rule of
    ``generations(...)`` steps. With ``chat``, ``prompt`` is a user turn (after ``system``) rendered
    with the model's chat template.

    Raises:
        FileNotFoundError: no model or tokenizer there, or ``chat`` of a model without a chat template.
        ValueError: an empty prompt, or sampling settings out of range (named).
    """
    from levanter.inference import SamplingParams
    from marin.experiment.generation.model import load_generation_model
    from marin.experiment.generation.steps import completion_seed

    model = load_generation_model(output_path)
    if chat:
        if model.chat_template is None:
            raise FileNotFoundError(f"{output_path} holds no chat_template.json: --chat needs a model fine-tuned "
                                    "on tokenized_chat data")
        prompt = model.chat_template.prompt(prompt, system=system)
    ids = model.encode(prompt)
    if not ids:
        raise ValueError("prompt must not be empty")
    room = min(max_new_tokens, model.context - len(ids))
    if room < 1:
        raise ValueError(f"the prompt's {len(ids)} tokens fill the model's context of {model.context}")
    settings = [SamplingParams(max_tokens=room, temperature=temperature, top_k=top_k, top_p=top_p,
                               seed=completion_seed(seed, 0, k), stop_token_ids=model.end_ids) for k in range(n)]
    engine = model.engine(slots=min(n, 16), steps_per_sync=min(room, 32))
    texts = []
    for done in engine.generate([ids] * n, settings):
        tokens = done.token_ids
        if tokens and tokens[-1] in model.end_ids:
            tokens = tokens[:-1]
        texts.append(model.decode(tokens))
    return prompt, texts


def sample_text(output_path: str, prompt: str, *, max_new_tokens: int = 48, temperature: float = 0.0,
                seed: int = 0, **options: Any) -> str:
    """The continuation of ``prompt`` (up to the model's end token; see
    :func:`sample_completions` for ``options``)."""
    return sample_completions(output_path, prompt, max_new_tokens=max_new_tokens, temperature=temperature,
                              seed=seed, **options)[1][0]


def sample_chat(output_path: str, user_text: str, *, system: str | None = None, max_new_tokens: int = 48,
                temperature: float = 0.0, seed: int = 0) -> tuple[str, str]:
    """``(rendered prompt, reply)``: the assistant's reply to one user turn, rendered with the chat
    template stored beside the model, sampled until the template's end token (not shown).

    Raises:
        FileNotFoundError: the model was not trained on chat data (no chat template beside it).
    """
    prompt, [reply] = sample_completions(output_path, user_text, max_new_tokens=max_new_tokens,
                                         temperature=temperature, seed=seed, chat=True, system=system)
    return prompt, reply
