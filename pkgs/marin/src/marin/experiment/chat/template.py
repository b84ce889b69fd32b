"""Chat templates as data: Jinja text rendered with ``jinja2``, as Hugging Face chat templates are.

A template sees ``messages`` (a list of ``{"role", "content"}``) and ``add_generation_prompt``, and
wraps what the model must learn to say in ``{% generation %} … {% endgeneration %}`` (the tag
Hugging Face uses for assistant masks). Rendering keeps those spans apart, and each span is
tokenized on its own, so the loss mask is exact at token boundaries: no token straddles an
assistant span's edge, and decoding the mask-on tokens gives back exactly the spans' text.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from marin.execution.core.identity import keep_identities
from marin.experiment.chat import Conversation, Message, Role

__all__ = [
    "CHATML_TEMPLATE",
    "CHAT_SPECIAL_TOKENS",
    "DEFAULT_CHAT_TEMPLATE",
    "ChatTemplate",
    "TemplateError",
    "add_special_tokens",
]

# Private-use code points mark generation spans in the rendered text; they never reach a tokenizer.
_OPEN, _CLOSE = "\ue000", "\ue001"

CHAT_SPECIAL_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>")
"""The default template's special tokens (added whole to the tokenizer)."""


class TemplateError(ValueError):
    """A template that cannot be used, or a conversation it cannot render; the message says why."""


@dataclass(frozen=True)
class ChatTemplate:
    """A chat template: its Jinja source and the special tokens it needs.

    Attributes:
        source: the Jinja text (see the module docstring for what it sees and must mark).
        special_tokens: tokens the template writes that must be single tokens of the tokenizer;
            missing ones are added by the chat tokenize step.
        end_token: the token that ends an assistant turn (sampling stops at it); one of
            ``special_tokens``.
    """

    source: str
    special_tokens: tuple[str, ...] = CHAT_SPECIAL_TOKENS
    end_token: str = "<|end|>"

    def __post_init__(self) -> None:
        object.__setattr__(self, "special_tokens", tuple(self.special_tokens))
        if "generation" not in self.source:
            raise TemplateError("a chat template must mark the assistant's text with {% generation %} … "
                                "{% endgeneration %}, got a template without it")
        if self.end_token not in self.special_tokens:
            raise TemplateError(f"end_token {self.end_token!r} must be one of special_tokens {self.special_tokens}")
        self._compiled()  # a syntax error is named now, not at the first conversation

    @functools.cache  # noqa: B019 - frozen and hashable: one compiled template per template
    def _compiled(self) -> Any:
        import jinja2
        import jinja2.sandbox

        env = jinja2.sandbox.ImmutableSandboxedEnvironment(
            extensions=[_generation_extension()], undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
        try:
            return env.from_string(self.source)
        except jinja2.TemplateSyntaxError as e:
            raise TemplateError(f"chat template line {e.lineno}: {e.message}") from None

    def render_spans(self, messages: Sequence[Message], *, add_generation_prompt: bool = False
                     ) -> list[tuple[str, bool]]:
        """The rendered text as ``(text, is_generation)`` spans in order (empty spans dropped)."""
        import jinja2

        for m in messages:
            if _OPEN in m.content or _CLOSE in m.content:
                raise TemplateError("a message holds a private-use character U+E000/U+E001 that the "
                                    "template renderer reserves")
        try:
            text = self._compiled().render(messages=[m.to_json() for m in messages],
                                           add_generation_prompt=add_generation_prompt)
        except jinja2.TemplateError as e:
            raise TemplateError(f"chat template failed to render: {type(e).__name__}: {e}") from None
        spans: list[tuple[str, bool]] = []
        for i, part in enumerate(text.split(_OPEN)):
            pieces = part.split(_CLOSE)
            if len(pieces) != (1 if i == 0 else 2):
                raise TemplateError("unbalanced or nested {% generation %} blocks in the rendered template")
            marks = (False,) if i == 0 else (True, False)
            spans.extend((piece, marked) for piece, marked in zip(pieces, marks, strict=True) if piece)
        return spans

    def render(self, messages: Sequence[Message], *, add_generation_prompt: bool = False) -> str:
        """The rendered text of ``messages``."""
        return "".join(t for t, _ in self.render_spans(messages, add_generation_prompt=add_generation_prompt))

    def encode(self, tokenizer: Any, conversation: Conversation) -> tuple[list[int], list[int]]:
        """``(ids, loss_mask)`` of a conversation: mask 1 on the tokens of generation spans.

        Raises:
            TemplateError: nothing of the conversation is marked (no assistant text to learn).
        """
        return self.encode_spans(tokenizer, self.render_spans(conversation))

    def encode_spans(self, tokenizer: Any, spans: Sequence[tuple[str, bool]]) -> tuple[list[int], list[int]]:
        """:meth:`encode` of spans already rendered (:meth:`render_spans`)."""
        encodings = tokenizer.encode_batch_fast([t for t, _ in spans], add_special_tokens=False)
        ids: list[int] = []
        mask: list[int] = []
        for (_text, marked), encoding in zip(spans, encodings, strict=True):
            ids.extend(encoding.ids)
            mask.extend([int(marked)] * len(encoding.ids))
        if not any(mask):
            raise TemplateError("the template marks no assistant text in this conversation")
        return ids, mask

    def prompt(self, user_text: str, system: str | None = None) -> str:
        """The text that asks the model for the assistant's reply to one user turn."""
        messages = ([Message(Role.SYSTEM, system)] if system else []) + [Message(Role.USER, user_text)]
        return self.render(messages, add_generation_prompt=True)


@functools.cache
def _generation_extension() -> type:
    from jinja2 import nodes
    from jinja2.ext import Extension

    class GenerationExtension(Extension):
        """``{% generation %}body{% endgeneration %}``: the body, wrapped in span markers."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_mark"), [], [], body).set_lineno(lineno)

        def _mark(self, caller: Any) -> str:
            return _OPEN + caller() + _CLOSE

    return GenerationExtension


def add_special_tokens(tokenizer: Any, tokens: Sequence[str]) -> list[str]:
    """Add the ``tokens`` the tokenizer lacks as special tokens; returns those added (in order).

    New ids go after the existing ones, so every earlier id keeps its meaning.
    """
    from tokenizers import AddedToken

    missing = [t for t in tokens if tokenizer.token_to_id(t) is None]
    if missing:
        tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in missing])
    return missing


DEFAULT_CHAT_TEMPLATE = ChatTemplate(
    source=(
        "{% for m in messages %}"
        "{% if m.role == 'assistant' %}<|assistant|>\n{% generation %}{{ m.content }}<|end|>{% endgeneration %}\n"
        "{% else %}<|{{ m.role }}|>\n{{ m.content }}<|end|>\n{% endif %}"
        "{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
    ),
)
"""``<|role|>`` header line, the turn, ``<|end|>``; the assistant's text and its ``<|end|>`` are learned."""

CHATML_TEMPLATE = ChatTemplate(
    source=(
        "{% for m in messages %}<|im_start|>{{ m.role }}\n"
        "{% if m.role == 'assistant' %}{% generation %}{{ m.content }}<|im_end|>{% endgeneration %}"
        "{% else %}{{ m.content }}<|im_end|>{% endif %}\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    ),
    special_tokens=("<|im_start|>", "<|im_end|>"),
    end_token="<|im_end|>",
)
"""The ChatML layout (``<|im_start|>role … <|im_end|>``)."""


# Moved from chat_template.py: what it defines keeps that name in every hash (and for workers and pickle).
keep_identities(globals(), "marin.experiment.chat_template")
