"""A model folder's own chat template, as Hugging Face lays it out and ``transformers`` renders it.

Where it is: ``chat_template.jinja`` beside the tokenizer, else the ``chat_template`` field of
``tokenizer_config.json`` (a Jinja string, or a list of named templates of which ``default`` is
used), else a processor's ``chat_template.json`` (``{"chat_template": ...}``). How it renders (what
``apply_chat_template`` does): a sandboxed Jinja environment with ``trim_blocks`` and
``lstrip_blocks``, the ``loopcontrols`` extension and the ``{% generation %}`` tag (its body kept as
is), ``raise_exception(message)``, ``strftime_now(format)`` and a ``tojson`` filter that keeps
non-ASCII text; the template sees ``messages`` (``{"role", "content"}`` each),
``add_generation_prompt``, ``tools`` and ``documents`` (None), and the tokenizer's special tokens
from ``tokenizer_config.json`` (``bos_token``, ``eos_token`` ...).

:func:`model_chat_template` picks a folder's template: its own when it has one, else the project's
(``chat_template.json`` written by ``tokenized_chat``, :mod:`marin.experiment.chat.template`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from marin.experiment.chat import Message, Role
from marin.experiment.chat.template import _CLOSE, _OPEN, ChatTemplate, TemplateError, _generation_extension
from rigging import filesystem as fs

__all__ = ["JINJA_FILE", "TOKENIZER_CONFIG_FILE", "HfChatTemplate", "model_chat_template"]

TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
JINJA_FILE = "chat_template.jinja"
_SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
"""The special tokens of ``tokenizer_config.json`` a template sees by name."""


@dataclass(frozen=True)
class HfChatTemplate:
    """A Hugging Face chat template (see the module docstring for what it sees).

    Attributes:
        source: the Jinja text.
        special_tokens: ``(name, text)`` of the tokenizer's special tokens (``("eos_token", "</s>")``).
        origin: the file it was read from (named in errors).
    """

    source: str
    special_tokens: tuple[tuple[str, str], ...] = ()
    origin: str = "chat template"

    def __post_init__(self) -> None:
        self._compiled()  # a syntax error is named when the model loads, not at the first request

    @property
    def end_token(self) -> str | None:
        """The token that ends the model's turn (the tokenizer's ``eos_token``), when it has one."""
        return dict(self.special_tokens).get("eos_token")

    @functools.cache  # noqa: B019 - frozen and hashable: one compiled template per template
    def _compiled(self) -> Any:
        # jinja2 is imported where a template is compiled or rendered, as in chat.template: planning
        # a graph that names a chat model never loads it.
        import jinja2
        import jinja2.ext
        import jinja2.sandbox

        # The project's {% generation %} tag (its span markers removed by render()): a template written
        # for assistant masks renders a prompt as transformers renders it.
        env = jinja2.sandbox.ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[_generation_extension(), jinja2.ext.loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now)
        try:
            return env.from_string(self.source)
        except jinja2.TemplateSyntaxError as e:
            raise TemplateError(f"{self.origin}: chat template line {e.lineno}: {e.message}") from None

    def render(self, messages: Sequence[Message], *, add_generation_prompt: bool = False) -> str:
        """The text of ``messages`` (with the header of the assistant's next turn when asked).

        Raises:
            TemplateError: the template refused the conversation (its ``raise_exception``) or failed.
        """
        import jinja2

        try:
            text = self._compiled().render(messages=[m.to_json() for m in messages], tools=None, documents=None,
                                           add_generation_prompt=add_generation_prompt, **dict(self.special_tokens))
        except jinja2.TemplateError as e:
            raise TemplateError(f"the chat template of {self.origin} failed: {e}") from None
        return text.replace(_OPEN, "").replace(_CLOSE, "")

    def prompt(self, user_text: str, system: str | None = None) -> str:
        """The text that asks the model for the assistant's reply to one user turn."""
        messages = ([Message(Role.SYSTEM, system)] if system else []) + [Message(Role.USER, user_text)]
        return self.render(messages, add_generation_prompt=True)


def model_chat_template(folder: str) -> HfChatTemplate | ChatTemplate | None:
    """The chat template of a model folder: its own (Hugging Face's layout), else the project's
    ``chat_template.json``, else None.

    Raises:
        TemplateError: a template file or field that cannot be read or compiled (the file named).
    """
    from marin.experiment.chat.tokenize import TEMPLATE_FILE, load_chat_template

    config_path = fs.join(folder, TOKENIZER_CONFIG_FILE)
    config = _read_json(config_path) if fs.exists(config_path) else {}
    specials = _special_tokens(config)
    jinja_path = fs.join(folder, JINJA_FILE)
    if fs.exists(jinja_path):
        return HfChatTemplate(fs.read_text(jinja_path), specials, jinja_path)
    if config.get("chat_template") is not None:
        return HfChatTemplate(_default_template(config["chat_template"], config_path), specials, config_path)
    ours = fs.join(folder, TEMPLATE_FILE)
    if not fs.exists(ours):
        return None
    stored = _read_json(ours)
    if "source" not in stored and isinstance(stored.get("chat_template"), str):  # a processor's, Hugging Face's
        return HfChatTemplate(stored["chat_template"], specials, ours)
    return load_chat_template(folder)


def _read_json(path: str) -> dict[str, Any]:
    try:
        data = json.loads(fs.read_text(path))
    except ValueError as e:
        raise TemplateError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise TemplateError(f"{path}: must hold a JSON object, got {type(data).__name__}")
    return data


def _default_template(field: Any, path: str) -> str:
    """The template a ``chat_template`` field names: itself, or the one named ``default`` of a list."""
    if isinstance(field, str):
        return field
    if isinstance(field, list) and all(isinstance(t, dict) and isinstance(t.get("template"), str) for t in field):
        named = {t.get("name"): t["template"] for t in field}
        if "default" in named:
            return named["default"]
        raise TemplateError(f"{path}: chat_template names no 'default' template (it has {sorted(map(str, named))})")
    raise TemplateError(f"{path}: chat_template must be a Jinja string or a list of {{name, template}}, "
                        f"got {type(field).__name__}")


def _special_tokens(config: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """``(name, text)`` of the special tokens a config names (a token is a string or ``{"content": ...}``)."""
    out = []
    for name in _SPECIAL_TOKENS:
        value = config.get(name)
        text = value.get("content") if isinstance(value, dict) else value
        if isinstance(text, str):
            out.append((name, text))
    return tuple(out)


def _raise_exception(message: str) -> None:
    import jinja2

    raise jinja2.TemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:  # noqa: A002 - the name templates call it with
    import datetime

    return datetime.datetime.now().strftime(format)
