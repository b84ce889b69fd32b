"""Chat data: readers and their one-line errors, templates and exact masks, the tokenize step, hashes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from levanter.data.chat import decode_chat_record
from levanter.data.tokenized import open_split
from levanter.models.llama import LlamaConfig
from levanter.optim import AdamConfig
from marin.execution.core.lazy import lower
from marin.experiment.chat import Role, read_conversations
from marin.experiment.chat.data import tokenized_chat
from marin.experiment.chat.template import CHATML_TEMPLATE, DEFAULT_CHAT_TEMPLATE, ChatTemplate
from marin.experiment.chat.tokenize import load_chat_template, tokenize_chat_to_shards
from marin.experiment.data import trained_tokenizer
from marin.experiment.data.sources import resolve_source
from marin.experiment.training.train import train_lm
from zephyr import Counters, DataError, ShardFailed

GOOD = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Who is Mia?"},
                     {"role": "assistant", "content": "Mia is a girl who finds a red kite."}]}
SHAREGPT = {"conversations": [{"from": "human", "value": "Where does it happen?"},
                              {"from": "gpt", "value": "In the park, near the old tree."}]}

# A plain-text template (no special tokens of its own beyond an end marker) as a third layout.
PLAIN_TEMPLATE = ChatTemplate(
    source=("{% for m in messages %}{% if m.role == 'assistant' %}Answer: "
            "{% generation %}{{ m.content }}</s>{% endgeneration %}\n"
            "{% else %}Question: {{ m.content }}\n{% endif %}{% endfor %}"
            "{% if add_generation_prompt %}Answer: {% endif %}"),
    special_tokens=("</s>",), end_token="</s>")


def _write_jsonl(path: Path, records: list) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory) -> str:
    """A real byte-level BPE trained on chat-like text (without the templates' special tokens)."""
    texts = [f"Question {i}: who is Mia and where is the park? Answer: Mia plays near tree {i}." for i in range(300)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return str(path)


# ----------------------------------------------------------------------------- readers


def test_both_formats_in_jsonl_and_parquet_normalise_to_the_same_conversations(tmp_path: Path) -> None:
    jsonl = _write_jsonl(tmp_path / "a.jsonl", [GOOD, SHAREGPT])
    pq.write_table(pa.Table.from_pylist([GOOD]), tmp_path / "b.parquet")
    pq.write_table(pa.Table.from_pylist([SHAREGPT]), tmp_path / "c.parquet")
    from_jsonl = list(read_conversations(jsonl))
    from_parquet = list(read_conversations([str(tmp_path / "b.parquet"), str(tmp_path / "c.parquet")]))
    assert from_jsonl == from_parquet
    assert [m.role for m in from_jsonl[1]] == [Role.USER, Role.ASSISTANT]
    assert from_jsonl[1][1].content == "In the park, near the old tree."


BAD = [
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "content": "x"},
                   {"role": "assistant", "content": "ok"}]}, "turn 1: role 'tool' is not one of assistant, system, user"),
    ({"conversations": [{"from": "robot", "value": "hi"}, {"from": "gpt", "value": "ok"}]},
     "turn 0: from 'robot' is not one of"),
    ({"messages": [{"role": "user", "content": "  "}, {"role": "assistant", "content": "ok"}]}, "turn 0 (user) is empty"),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}]}, "turn 1 (assistant) is empty"),
    ({"messages": [{"role": "user", "content": "hi"}]}, "ends with 'user', not 'assistant'"),
    ({"messages": []}, "'messages' must be a non-empty list of turns, got empty"),
    ({"text": "plain"}, "no 'messages' (OpenAI) or 'conversations' (ShareGPT) field (fields: text)"),
    ({"messages": [{"role": "user", "content": 3}, {"role": "assistant", "content": "x"}]}, "turn 0: 'content' is int"),
    ({"messages": [GOOD["messages"][2]], "conversations": SHAREGPT["conversations"]}, "both 'messages' and 'conversations'"),
]


# A Parquet column has one type, so a turn whose content is a number cannot sit beside text there.
CASES = [(fmt, record, problem) for fmt in ("jsonl", "parquet") for record, problem in BAD
         if not (fmt == "parquet" and "is int" in problem)]


@pytest.mark.parametrize(("fmt", "record", "problem"), CASES, ids=[f"{f}-{p}" for f, _r, p in CASES])
def test_every_bad_record_is_one_line_naming_file_and_record(tmp_path: Path, fmt: str, record: dict, problem: str) -> None:
    if fmt == "jsonl":
        path = _write_jsonl(tmp_path / "chat.jsonl", [GOOD, record])
        where = "line 2"
    else:
        path = str(tmp_path / "chat.parquet")
        pq.write_table(pa.Table.from_pylist([record]), path)
        where = "record 0"
    with pytest.raises(DataError) as info:
        list(read_conversations(path))
    message = str(info.value)
    assert message.startswith(f"{path}: {where}: ") and problem in message and "\n" not in message
    counters = Counters()
    kept = list(read_conversations(path, on_error="skip", counters=counters))
    assert counters["skipped_records"] == 1 and len(kept) == (1 if fmt == "jsonl" else 0)


def test_a_text_file_is_refused_as_chat_data(tmp_path: Path) -> None:
    (tmp_path / "chat.txt").write_text("hello\n")
    with pytest.raises(DataError, match="chat.txt: structured records need JSON lines"):
        list(read_conversations(str(tmp_path / "chat.txt")))


def test_a_hugging_face_id_resolves_from_the_hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The hub cache's own layout: datasets--owner--name/{refs/main, snapshots/<commit>/files}.
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "datasets--someone--chats"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    _write_jsonl(snapshot / "train.jsonl", [GOOD, SHAREGPT])
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    resolved = resolve_source("someone/chats")
    assert [Path(p) for p in resolved] == [snapshot / "train.jsonl"]
    assert len(list(read_conversations(resolved))) == 2


# ----------------------------------------------------------------------------- templates and masks


@pytest.mark.parametrize("template", [DEFAULT_CHAT_TEMPLATE, CHATML_TEMPLATE, PLAIN_TEMPLATE],
                         ids=["default", "chatml", "plain"])
def test_mask_on_tokens_decode_to_exactly_the_assistant_texts(tokenizer_path: str, template: ChatTemplate) -> None:
    from marin.experiment.chat.tokenize import prepare_chat_tokenizer

    tokenizer, _added = prepare_chat_tokenizer(Path(tokenizer_path).read_text(), template)
    conversation = tuple(read_conversations_from([GOOD]))[0]
    # Multi-turn, with text that BPE would like to merge across the span edges ("Mia." + "\n").
    conversation = conversation + conversation[1:]
    ids, mask = template.encode(tokenizer, conversation)
    runs, current = [], []
    for token, on in zip(ids, mask, strict=True):
        if on:
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    decoded = [tokenizer.decode(run, skip_special_tokens=False) for run in runs]
    expected = [m.content + template.end_token for m in conversation if m.role is Role.ASSISTANT]
    assert decoded == expected
    # Everything else is the rest of the rendered text, nothing lost or added at the boundaries.
    assert tokenizer.decode(ids, skip_special_tokens=False) == template.render(conversation)
    assert tokenizer.token_to_id(template.end_token) is not None


def read_conversations_from(records: list[dict]):
    from marin.experiment.chat import conversation_from_record

    return [conversation_from_record(r) for r in records]


def test_a_template_without_generation_marks_or_with_bad_syntax_is_refused() -> None:
    from marin.experiment.chat.template import TemplateError

    with pytest.raises(TemplateError, match="must mark the assistant's text"):
        ChatTemplate(source="{% for m in messages %}{{ m.content }}{% endfor %}")
    with pytest.raises(TemplateError, match="chat template line 1"):
        ChatTemplate(source="{% generation %}{{ x }")
    with pytest.raises(TemplateError, match="end_token '<eos>' must be one of"):
        ChatTemplate(source="{% generation %}{% endgeneration %}", end_token="<eos>")


# ----------------------------------------------------------------------------- the tokenize step


def test_tokenize_chat_packs_within_max_seq_len_counts_truncation_and_stores_the_template(
        tokenizer_path: str, tmp_path: Path) -> None:
    long_answer = " ".join(["Mia plays near the tree in the park."] * 30)
    records = [{"messages": [{"role": "user", "content": f"Who is child {i}?"},
                             {"role": "assistant", "content": f"Child {i} is Mia, in the park."}]} for i in range(40)]
    records += [{"messages": [{"role": "user", "content": "Tell me."},
                                                     {"role": "assistant", "content": long_answer}]}]
    source = _write_jsonl(tmp_path / "chat.jsonl", records)
    out = str(tmp_path / "out")
    summary = tokenize_chat_to_shards(source, tokenizer_path, out, DEFAULT_CHAT_TEMPLATE, max_seq_len=96,
                                      validation_fraction=0.2)
    assert summary["added_tokens"] == list(DEFAULT_CHAT_TEMPLATE.special_tokens)
    assert summary["counters"]["conversations"] == 41
    assert summary["counters"]["truncated_conversations"] == 1 and summary["counters"]["truncated_tokens"] > 0
    assert load_chat_template(out) == DEFAULT_CHAT_TEMPLATE
    tokenizer = Tokenizer.from_file(str(Path(out) / "tokenizer.json"))
    seen = 0
    for split in ("train", "validation"):
        data = open_split(out, split)
        assert data.is_chat
        for i in range(len(data.source)):
            rows = decode_chat_record(data.source[i])
            assert rows.shape[1] <= 96
            for segment in np.unique(rows[2]):
                part = rows[:, rows[2] == segment]
                text = tokenizer.decode(part[0].tolist(), skip_special_tokens=False)
                assert text.startswith("<|") and part[1].any()
                seen += 1
    assert seen == 41
    assert summary["train_records"] + summary["validation_records"] < 41  # packed several per record
    unpacked = tokenize_chat_to_shards(source, tokenizer_path, str(tmp_path / "unpacked"), DEFAULT_CHAT_TEMPLATE,
                                       max_seq_len=96, pack=False, validation_fraction=0.2)
    assert unpacked["train_records"] + unpacked["validation_records"] == 41


def test_a_bad_record_fails_the_step_naming_it_or_is_counted_when_skipped(tokenizer_path: str, tmp_path: Path) -> None:
    source = _write_jsonl(tmp_path / "chat.jsonl", [GOOD, {"messages": [{"role": "user", "content": "hi"}]}])
    # The step runs shards as zephyr does: the shard's failure carries the one-line data error.
    with pytest.raises(ShardFailed, match=r"DataError: .*chat.jsonl: line 2: the conversation ends with 'user'"):
        tokenize_chat_to_shards(source, tokenizer_path, str(tmp_path / "a"), DEFAULT_CHAT_TEMPLATE, max_seq_len=64)
    assert not (tmp_path / "a" / "index.json").exists()
    summary = tokenize_chat_to_shards(source, tokenizer_path, str(tmp_path / "b"), DEFAULT_CHAT_TEMPLATE,
                                      max_seq_len=64, on_error="skip", validation_fraction=0.0)
    assert summary["counters"]["skipped_records"] == 1 and summary["train_records"] == 1


def test_changing_the_template_changes_the_tokenize_and_fine_tune_hashes_and_nothing_upstream(tmp_path: Path) -> None:
    source = _write_jsonl(tmp_path / "chat.jsonl", [GOOD])
    tokenizer = trained_tokenizer("tokenizers/t", str(tmp_path), vocab_size=300)

    def graph(template: ChatTemplate):
        chat = tokenized_chat("tokenized/chat", source, tokenizer, template=template, max_seq_len=64)
        tuned = train_lm("checkpoints/sft", "v1", LlamaConfig(), AdamConfig(), {chat: 1.0},
                         batch_size=2, seq_len=64, num_train_steps=2)
        return lower(tokenizer), lower(chat), lower(tuned)

    a, b = graph(DEFAULT_CHAT_TEMPLATE), graph(CHATML_TEMPLATE)
    assert a[0].hash == b[0].hash
    assert a[1].hash != b[1].hash and a[2].hash != b[2].hash
    assert graph(DEFAULT_CHAT_TEMPLATE)[1].hash == a[1].hash
