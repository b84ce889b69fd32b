"""A model folder's own chat template (Hugging Face's layout): where it is found, rendered as
``transformers`` renders it, the project's template as the fallback, and one-line errors naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from marin.experiment.chat import Message, Role
from marin.experiment.chat.hf_template import HfChatTemplate, model_chat_template
from marin.experiment.chat.template import DEFAULT_CHAT_TEMPLATE, ChatTemplate, TemplateError
from marin.experiment.chat.tokenize import template_to_json

# Written for this test in the style of the Hub's templates: a {% generation %} block (for assistant
# masks), loop controls, tojson, and the special tokens by name.
TEMPLATE = """{% for message in messages %}
    {% if message.role == 'system' %}{% continue %}{% endif %}
[{{ message.role | upper }}] {% if message.role == 'assistant' %}{% generation %}{{ message.content }}{{ eos_token }}{% endgeneration %}
{% else %}{{ message.content | tojson }}
{% endif %}
{% endfor %}
{% if add_generation_prompt %}[ASSISTANT] {% endif %}"""
CONFIG = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
          "eos_token": {"__type": "AddedToken", "content": "</s>", "special": True}}
MESSAGES = [Message(Role.SYSTEM, "Be brief."), Message(Role.USER, "Où est Mia?"), Message(Role.ASSISTANT, "Ici."),
            Message(Role.USER, "Et Tom?")]


def _folder(root: Path, files: dict[str, object]) -> Path:
    """A tokenizer folder: ``tokenizer.json`` and ``files`` (name -> text, or a ``dict`` written as JSON)."""
    root.mkdir()
    tokenizer = Tokenizer(models.WordLevel({"<s>": 0, "</s>": 1, "[UNK]": 2}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    (root / "tokenizer.json").write_text(tokenizer.to_str())
    for name, content in files.items():
        (root / name).write_text(content if isinstance(content, str) else json.dumps(content))
    return root


@pytest.mark.parametrize("where", ["tokenizer_config", "jinja_file"])
def test_the_folders_template_renders_as_transformers_renders_it(tmp_path: Path, where: str) -> None:
    from transformers import PreTrainedTokenizerFast

    # The project's template beside it: the folder's own comes first.
    files: dict[str, object] = {"chat_template.json": template_to_json(DEFAULT_CHAT_TEMPLATE)}
    files |= ({"tokenizer_config.json": CONFIG | {"chat_template": TEMPLATE}} if where == "tokenizer_config" else
              {"tokenizer_config.json": CONFIG, "chat_template.jinja": TEMPLATE})
    folder = _folder(tmp_path / "model", files)
    template = model_chat_template(str(folder))
    assert isinstance(template, HfChatTemplate) and template.end_token == "</s>"
    reference = PreTrainedTokenizerFast.from_pretrained(str(folder))
    for add in (True, False):
        expected = reference.apply_chat_template([m.to_json() for m in MESSAGES], tokenize=False,
                                                 add_generation_prompt=add)
        assert template.render(MESSAGES, add_generation_prompt=add) == expected
    assert template.prompt("Hi") == '[USER] "Hi"\n[ASSISTANT] '


def test_named_templates_a_processors_file_and_the_projects_own(tmp_path: Path) -> None:
    named = [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "{{ messages[0].content }}"}]
    listed = model_chat_template(str(_folder(tmp_path / "listed", {"tokenizer_config.json": {"chat_template": named}})))
    assert isinstance(listed, HfChatTemplate) and listed.render(MESSAGES[1:2]) == "Où est Mia?"
    processor = model_chat_template(str(_folder(tmp_path / "processor", {"chat_template.json": {"chat_template": "P"}})))
    assert isinstance(processor, HfChatTemplate) and processor.render(MESSAGES) == "P"
    ours = model_chat_template(str(_folder(tmp_path / "ours", {"tokenizer_config.json": CONFIG, "chat_template.json":
                                                               template_to_json(DEFAULT_CHAT_TEMPLATE)})))
    assert isinstance(ours, ChatTemplate) and ours == DEFAULT_CHAT_TEMPLATE
    assert model_chat_template(str(_folder(tmp_path / "none", {"tokenizer_config.json": CONFIG}))) is None


@pytest.mark.parametrize(("config", "problem"), [
    ("{not json", "not valid JSON"),
    ({"chat_template": "{% if messages %}"}, "chat template line 1"),
    ({"chat_template": [{"name": "tool_use", "template": "T"}]}, "names no 'default' template (it has ['tool_use'])"),
    ({"chat_template": 3}, "chat_template must be a Jinja string")])
def test_a_broken_template_is_one_line_naming_the_file(tmp_path: Path, config: object, problem: str) -> None:
    folder = _folder(tmp_path / "model", {"tokenizer_config.json": config})
    with pytest.raises(TemplateError) as caught:
        model_chat_template(str(folder))
    message = str(caught.value)
    assert message.startswith(str(folder / "tokenizer_config.json")) and problem in message and "\n" not in message


def test_a_templates_own_refusal_names_it(tmp_path: Path) -> None:
    source = "{% if messages[0].role != 'user' %}{{ raise_exception('Start with a user turn.') }}{% endif %}x"
    template = HfChatTemplate(source, origin="folder/tokenizer_config.json")
    assert template.render(MESSAGES[1:]) == "x"
    with pytest.raises(TemplateError, match="folder/tokenizer_config.json failed: Start with a user turn."):
        template.render(MESSAGES)
