"""Evaluation steps: keyed on the exact checkpoint, tokenized and raw text data, results as JSON."""

from __future__ import annotations

import json
import math

import pytest

from marin.execution.run.outcome import Outcome
from marin.experiment.data import tokenized, trained_tokenizer
from marin.experiment.evaluation.eval import EVAL_RESULTS_FILE, evaluate
from rigging import filesystem as fs
from testsupport.lm_graph import copy_prefix, data, held_out, runner, tiny_model


@pytest.fixture(scope="module")
def data_prefix(trained_prefix):
    return trained_prefix  # the tiny models of 10 and 20 steps are built there already


def _results(result, name):
    return json.loads(fs.read_text(fs.join(result.by_name(name).output_path, EVAL_RESULTS_FILE)))


def test_eval_is_keyed_on_the_checkpoint_it_reads(data_prefix, tmp_path):
    prefix = copy_prefix(data_prefix, tmp_path / "store")
    model = tiny_model(steps=20)
    at_10 = evaluate("evals/tiny-10", model, {"tiny": data}, checkpoint=10)
    at_20 = evaluate("evals/tiny-20", model, {"tiny": data}, checkpoint=20)
    final = evaluate("evals/tiny-final", model, {"tiny": data})
    # (``at_20`` is only compared by its key below: evaluating it would repeat the final one's work.)
    first = runner(prefix).run([at_10, final])
    assert first.ok, [(s.name, s.error) for s in first.failed]

    # The key holds the checkpoint: another checkpoint of the same model is another eval step,
    # and the last checkpoint is the final parameters, so one key serves both.
    assert at_10.lower().hash != evaluate("evals/tiny-10", model, {"tiny": data}).lower().hash
    assert at_20.lower().hash == evaluate("evals/tiny-20", model, {"tiny": data}).lower().hash
    r10, rfinal = _results(first, "evals/tiny-10"), _results(first, "evals/tiny-final")
    assert (r10["checkpoint"], r10["step"]) == (10, 10)
    assert (rfinal["checkpoint"], rfinal["step"]) == ("final", 20)
    # Training for longer lowered the loss; the scores agree with one another.
    assert rfinal["results"]["tiny"]["loss"] < r10["results"]["tiny"]["loss"]
    for scores in (r10["results"]["tiny"], rfinal["results"]["tiny"]):
        assert scores["kind"] == "tokenized"
        assert math.isclose(scores["perplexity"], math.exp(scores["loss"]), rel_tol=1e-9)
        assert math.isclose(scores["bits_per_byte"], scores["loss"] * scores["tokens"] / math.log(2) / scores["bytes"],
                            rel_tol=1e-9)
        assert scores["bytes"] > scores["tokens"] > 0

    # The same checkpoint again: cached. A model trained longer: its final eval is a new step.
    again = runner(prefix).run([at_10, final])
    assert {s.outcome for s in again.steps if s.name.startswith("evals/")} == {Outcome.CACHED}
    longer_final = evaluate("evals/tiny-final", tiny_model(steps=30), {"tiny": data})
    assert longer_final.lower().hash != final.lower().hash
    plan = runner(prefix).plan([longer_final])
    assert {p.name: p.action.value for p in plan.steps}["evals/tiny-final"] == "run"


def test_eval_of_raw_text_uses_the_models_tokenizer(data_prefix, tmp_path):
    prefix = copy_prefix(data_prefix, tmp_path / "store")
    model = tiny_model(steps=10)
    ev = evaluate("evals/raw", model, {"held-out": held_out, "tiny": data})
    result = runner(prefix).run([ev])
    assert result.ok, [(s.name, s.error) for s in result.failed]
    scores = _results(result, "evals/raw")["results"]
    raw = scores["held-out"]
    assert raw["kind"] == "raw text"
    # The held-out stories: about 0.58 KB each, all of them scored (40 stories, 1 window per 32 tokens).
    text_bytes = sum(len(json.loads(line)["text"].encode()) for path, _ in fs.walk_files(result.by_name("raw/tiny-held-out").output_path)
                     if path.endswith(".jsonl")
                     for line in fs.read_text(fs.join(result.by_name("raw/tiny-held-out").output_path, path)).splitlines())
    assert 0.9 * text_bytes < raw["bytes"] <= text_bytes
    assert 0 < raw["bits_per_byte"] < 8 and math.isfinite(raw["loss"])


def test_eval_refuses_a_checkpoint_the_run_does_not_keep():
    model = tiny_model(steps=40, save_every=10, keep_every=None)
    with pytest.raises(ValueError, match="checkpoint 15 is never written"):
        evaluate("evals/x", model, {"tiny": data}, checkpoint=15)
    with pytest.raises(ValueError, match="checkpoint 10 is deleted by the run"):
        evaluate("evals/x", model, {"tiny": data}, checkpoint=10)
    with pytest.raises(ValueError, match="past the end of training"):
        evaluate("evals/x", model, {"tiny": data}, checkpoint=50)
    evaluate("evals/x", model, {"tiny": data}, checkpoint=30)  # among the last two: kept


def test_train_lm_evals_add_an_eval_step_of_the_final_model(tmp_path):
    model = tiny_model(steps=10, evals=[data, held_out])
    labelled = tiny_model("checkpoints/other", steps=10, evals={"stories": held_out})
    plan = runner(tmp_path / "store").plan([model, labelled])
    by_name = {p.name: p for p in plan.steps}
    ev = by_name["evals/checkpoints/tiny"].step
    assert [(d.label, d.kind.value) for d in ev.config.datasets] == [("tokenized/tiny", "tokenized"),
                                                                    ("raw/tiny-held-out", "raw text")]
    assert ev.config.checkpoint == "final" and ev.config.seq_len == 32
    assert [d.label for d in by_name["evals/checkpoints/other"].step.config.datasets] == ["stories"]
    # The eval step reads this model: it is a dependency, so it runs after it and follows its hash.
    deps = [plan.steps[d].name for d in by_name["evals/checkpoints/tiny"].deps]
    assert "checkpoints/tiny" in deps
    # Adding evals does not change the model's own identity.
    assert model.lower().hash == tiny_model(steps=10).lower().hash
    with pytest.raises(ValueError, match="evals must be a list of datasets or a mapping"):
        tiny_model(steps=10, evals="tokenized/tiny")


def test_eval_of_chat_data_grows_a_pretrained_vocabulary_and_scores_assistant_tokens(data_prefix, tmp_path):
    from marin.experiment.chat.data import tokenized_chat
    from testsupport.lm_graph import tokenizer

    prefix = copy_prefix(data_prefix, tmp_path / "store")
    source = tmp_path / "chats.jsonl"
    source.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"Who is in story {i}?"},
                                                       {"role": "assistant", "content": f"Lily and her cat {i}."}]}) + "\n"
                              for i in range(60)))
    chats = tokenized_chat("tokenized/tiny-chats", source=str(source), tokenizer=tokenizer, max_seq_len=64,
                           validation_fraction=0.3)
    ev = evaluate("evals/chats", tiny_model(steps=10), {"chats": chats, "tiny": data}, seq_len=64)
    result = runner(prefix).run([ev])
    assert result.ok, [(s.name, s.error) for s in result.failed]
    scores = _results(result, "evals/chats")["results"]
    # The chat data's tokenizer is the model's plus the template's special tokens: the model is
    # scored with its vocabulary grown, on the assistant's tokens only (fewer than all the windows').
    assert scores["chats"]["kind"] == "tokenized" and math.isfinite(scores["chats"]["loss"])
    assert scores["chats"]["tokens"] > 0 and scores["chats"]["bytes"] > 0 and scores["tiny"]["tokens"] > 0

    # The fine-tune of that model on the chats (its vocabulary grown) is scored on both too: the
    # plain text was tokenized before the template's tokens existed, and is scored as it is.
    from levanter.optim import AdamConfig
    from marin.experiment.training.train import checkpoint, train_lm
    from testsupport.lm_graph import TINY

    tuned = train_lm("checkpoints/tiny-chat", "v1", model=TINY, optimizer=AdamConfig(learning_rate=3e-3, warmup=1),
                     datasets={chats: 1.0}, batch_size=4, seq_len=64, num_train_steps=4, eval_every=0,
                     initialize_from=checkpoint(tiny_model(steps=10)))
    tuned_eval = runner(prefix).run([evaluate("evals/tuned", tuned, {"chats": chats, "tiny": data}, seq_len=64)])
    assert tuned_eval.ok, [(s.name, s.error) for s in tuned_eval.failed]
    tuned_scores = _results(tuned_eval, "evals/tuned")["results"]
    assert tuned_scores["tiny"]["tokens"] == scores["tiny"]["tokens"]  # the same windows of plain text
    assert tuned_scores["chats"]["tokens"] == scores["chats"]["tokens"]
    assert tuned_scores["chats"]["loss"] < scores["chats"]["loss"]  # four steps on the chats helped there

    other = tokenized("tokenized/tiny-other", source=held_out,
                      tokenizer=trained_tokenizer("tokenizers/tiny-other", source=held_out, vocab_size=300))
    refused = runner(prefix).run([evaluate("evals/other", tiny_model(steps=10), {"other": other})])
    assert "was tokenized with another tokenizer than the model" in refused.by_name("evals/other").error
