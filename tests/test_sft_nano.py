"""``marin run experiments/sft/`` end to end (issue 13): pretrain -> chat tokenize -> fine-tune -> evaluate.

Runs on the prefix of ``make experiments`` (``testsupport.e2e.experiments_prefix``), which
builds ``experiments/sft/sft_nano.py`` with every other experiment. Quality bar: on held-out
conversations the fine-tuned model's assistant-token loss is below a quarter of the pretrained
model's (measured at smoke size: about 0.85 against 8.1 nats/token; the full size reaches 0.44).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from levanter.data.chat import decode_chat_record
from levanter.data.tokenized import open_split
from marin.execution.store.records import StepRecord
from testsupport.e2e import builds_experiments, clean_env, entry, experiments_prefix, marin

MARGIN = 0.25  # fine-tuned loss < MARGIN x pretrained loss


@builds_experiments
@pytest.mark.slow
def test_sft_nano_fine_tunes_below_the_pretrained_loss_and_answers_in_the_chat_format(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    prefix, ran = experiments_prefix(tmp_path_factory)
    evals = {label: f"evals/story-chats/{label}" for label in ("pretrained", "fine-tuned")}
    for name in ("raw/story-chats", "tokenized/story-chats", "checkpoints/marin-nano-sft", *evals.values()):
        assert StepRecord(str(entry(prefix, name))).is_done(), ran.describe()

    results = {label: json.loads((entry(prefix, name) / "eval_results.json").read_text())["results"]["story-chats"]
               for label, name in evals.items()}
    tuned, pretrained = results["fine-tuned"]["loss"], results["pretrained"]["loss"]
    assert results["fine-tuned"]["tokens"] == results["pretrained"]["tokens"] > 500
    assert tuned < MARGIN * pretrained, results
    print(f"assistant-token loss on held-out conversations: pretrained {pretrained:.3f}, fine-tuned {tuned:.3f}")

    # marin compare puts both runs and their eval in one table.
    env = clean_env(MARIN_PREFIX=str(prefix))
    compared = json.loads(marin("compare", "experiments/sft/sft_nano.py", "--format", "json", env=env).stdout)
    losses = {row["name"]: row["metrics"].get("story-chats.loss") for row in compared["rows"]}
    assert losses == {"checkpoints/marin-nano": pretrained, "checkpoints/marin-nano-sft": tuned}, compared
    # Beside the losses, both models' story-task scores, the harness's own numbers.
    tasks = {"pretrained": "evals/marin-nano/story-tasks", "fine-tuned": "evals/marin-nano-sft/story-tasks"}
    model_of = {"pretrained": "checkpoints/marin-nano", "fine-tuned": "checkpoints/marin-nano-sft"}
    by_model = {row["name"]: row for row in compared["rows"]}
    for label, name in tasks.items():
        gathered = json.loads((entry(prefix, name) / "eval_results.json").read_text())
        harness = json.loads((Path(gathered["task_outputs"]["story_qa"]) / "results.json").read_text())
        assert by_model[model_of[label]]["metrics"]["story_qa.acc"] == harness["results"]["story_qa"]["acc,none"]
        assert set(gathered["tasks"]) == {"story_qa", "story_place", "story_ending", "story_cloze", "story_text"}
    # ... and the two evaluations in eval_report's table.
    table = (entry(prefix, "reports/story-tasks") / "eval_report.md").read_text().splitlines()
    assert [line.split(" | ")[0] for line in table[2:]] == ["| pretrained", "| fine-tuned"], table
    print("\n".join(table))

    # The fine-tune grew the pretrained vocabulary by the template's four special tokens.
    data = entry(prefix, "tokenized/story-chats")
    index = json.loads((data / "index.json").read_text())
    pretrained_config = json.loads((entry(prefix, "checkpoints/marin-nano") / "config.json").read_text())
    tuned_config = json.loads((entry(prefix, "checkpoints/marin-nano-sft") / "config.json").read_text())
    assert tuned_config["model"]["vocab_size"] == index["vocab_size"] == pretrained_config["model"]["vocab_size"] + 4
    split = open_split(str(data), "validation")
    assert decode_chat_record(split.source[0])[1].any()

    story = "Once upon a time, there was a little girl named Zoe. She lived in a quiet farm."
    answer = marin("sample", "checkpoints/marin-nano-sft", "--chat", "-n", "32",
                   "--prompt", f"{story}\n\nWho is the story about?", env=env)
    text = answer.stdout
    assert text.startswith(f"<|user|>\n{story}\n\nWho is the story about?<|end|>\n<|assistant|>\n"), answer.describe()
    reply = text.split("<|assistant|>\n", 1)[1].strip()
    assert reply.startswith("The story is about ") and reply.endswith("."), answer.describe()
    print(f"marin sample --chat: {reply}")

    plain = marin("sample", "checkpoints/marin-nano", "--chat", "--prompt", "Hi", env=env, check=False)
    assert plain.returncode == 2 and "holds no chat_template.json" in plain.stderr, plain.describe()
    assert "Traceback" not in plain.stderr
