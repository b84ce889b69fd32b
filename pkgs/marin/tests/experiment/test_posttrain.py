"""Post-training handles: preference data, reference log-probs as a shared step, DPO, merges, LoRA, EMA."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from levanter.data.tokenized import open_split
from levanter.generate import load_model
from levanter.lora import LoraConfig
from levanter.optim import AdamConfig
from marin.execution.core.errors import InvalidStep
from marin.experiment import (
    checkpoint,
    dpo,
    evaluate,
    export_hf,
    merge_checkpoints,
    merge_lora,
    preference_chat,
    reference_logprobs,
    story_preferences,
    train_lm,
)
from marin.experiment.chat.template import DEFAULT_CHAT_TEMPLATE
from marin.experiment.posttrain.preference import preference_from_record, read_preferences
from marin.experiment.posttrain.tokenize import encode_preference
from rigging import filesystem as fs
from testsupport.hub_cache import write_hub_dataset
from testsupport.lm_graph import TINY, copy_prefix, data, runner, tiny_model, tokenizer

NAMES = ("Mia", "Leo", "Zoe", "Sam", "Ada", "Tom")
OBJECTS = ("ball", "kite", "hat", "cup", "book", "drum")


def _rows(n: int) -> list[dict]:
    """TRL-layout rows about tiny stories: the right object chosen, another rejected."""
    out = []
    for i in range(n):
        name, obj, other = NAMES[i % 6], OBJECTS[i % 6], OBJECTS[(i + 1 + i // 6) % 6]
        out.append({"prompt": f"{name} had a {obj}. What did {name} have?", "chosen": f"{name} had a {obj}.",
                    "rejected": f"{name} had a {other}."})
    return out


def _jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


USER = {"role": "user", "content": "Who is Mia?"}
LAYOUTS = {
    "trl strings": {"prompt": "Who is Mia?", "chosen": "A girl.", "rejected": "A cat."},
    "trl conversational": {"prompt": [USER], "chosen": [{"role": "assistant", "content": "A girl."}],
                           "rejected": [{"role": "assistant", "content": "A cat."}]},
    "ultrafeedback": {"prompt": "Who is Mia?", "chosen": [USER, {"role": "assistant", "content": "A girl."}],
                      "rejected": [USER, {"role": "assistant", "content": "A cat."}]},
    "whole conversations": {"chosen": [USER, {"role": "assistant", "content": "A girl."}],
                            "rejected": [USER, {"role": "assistant", "content": "A cat."}]},
    "sharegpt": {"chosen": [{"from": "human", "value": "Who is Mia?"}, {"from": "gpt", "value": "A girl."}],
                 "rejected": [{"from": "human", "value": "Who is Mia?"}, {"from": "gpt", "value": "A cat."}]},
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_layout_reads_as_the_same_preference(layout: str) -> None:
    pair = preference_from_record(LAYOUTS[layout])
    assert [m.content for m in pair.prompt] == ["Who is Mia?"]
    assert [m.content for m in pair.chosen] == ["A girl."] and [m.content for m in pair.rejected] == ["A cat."]


@pytest.mark.parametrize(("row", "problem"), [
    ({"prompt": "Q?", "chosen": "A."}, "a preference row needs both 'chosen' and 'rejected', this one has no 'rejected'"),
    ({"prompt": "Q?", "chosen": "A.", "rejected": "  "}, "the 'rejected' completion is empty"),
    ({"prompt": "Q?", "chosen": [], "rejected": "B."}, "the 'chosen' completion is empty"),
    ({"chosen": [USER, {"role": "assistant", "content": "A."}],
      "rejected": [{"role": "user", "content": "Who is Leo?"}, {"role": "assistant", "content": "B."}]},
     r"the prompt differs between 'chosen' and 'rejected' \(turn 0\)"),
    ({"prompt": "Who is Leo?", "chosen": [USER, {"role": "assistant", "content": "A."}], "rejected": "B."},
     r"the prompt differs between 'prompt' and 'chosen' \(turn 0\)"),
    ({"prompt": "Q?", "chosen": [{"role": "assistant", "content": "A."}, {"role": "user", "content": "more"}],
      "rejected": "B."}, "the 'chosen' completion ends with 'user', not 'assistant'"),
    ({"prompt": "Q?", "chosen": [{"role": "user", "content": "Q?"}], "rejected": "B."},
     r"the prompt differs between 'prompt' and 'chosen' \(turn 1\)"),
])
def test_a_bad_row_is_one_line_naming_its_file_and_line(tmp_path: Path, row: dict, problem: str) -> None:
    from zephyr import DataError

    path = _jsonl(tmp_path / "prefs.jsonl", [LAYOUTS["trl strings"], row])
    with pytest.raises(DataError, match=problem) as info:
        list(read_preferences(path))
    assert "prefs.jsonl: line 2: " in str(info.value) and "\n" not in str(info.value)


def test_parquet_rows_read_as_json_lines_do(tmp_path: Path) -> None:
    for layout in ("trl strings", "ultrafeedback", "whole conversations"):  # strings, and lists of structs
        rows = [LAYOUTS[layout], LAYOUTS[layout]]
        pq.write_table(pa.Table.from_pylist(rows), tmp_path / "prefs.parquet")
        assert list(read_preferences(str(tmp_path / "prefs.parquet"))) == [preference_from_record(LAYOUTS[layout])] * 2


def test_only_the_completion_is_marked_and_the_prompt_is_the_same_on_both_sides(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    from marin.experiment.chat.tokenize import prepare_chat_tokenizer
    from testsupport.levanter_data import byte_level_tokenizer

    tok, _ = prepare_chat_tokenizer(byte_level_tokenizer(["Who is Mia? She is a girl. A cat."] * 20, 300),
                                    DEFAULT_CHAT_TEMPLATE)
    row = {"prompt": [USER, {"role": "assistant", "content": "A girl."}, {"role": "user", "content": "And Leo?"}],
           "chosen": "A boy.", "rejected": "A dog who runs."}
    prompt, (c_ids, c_mask), (r_ids, r_mask) = encode_preference(DEFAULT_CHAT_TEMPLATE, tok, preference_from_record(row))
    n = prompt.count("<|")  # the prompt's tokens: shared, unmarked (its earlier assistant turn too)
    first_c, first_r = c_mask.index(1), r_mask.index(1)
    assert c_ids[:first_c] == r_ids[:first_r] and first_c == first_r and n > 0
    decode = Tokenizer.from_str(tok.to_str()).decode
    assert decode([i for i, m in zip(c_ids, c_mask, strict=True) if m], skip_special_tokens=False) == "A boy.<|end|>"
    assert decode([i for i, m in zip(r_ids, r_mask, strict=True) if m],
                  skip_special_tokens=False) == "A dog who runs.<|end|>"


def test_a_pair_too_long_is_dropped_and_counted_and_none_fitting_is_one_line(tmp_path: Path) -> None:
    from marin.experiment.posttrain.tokenize import tokenize_preferences_to_shards
    from testsupport.levanter_data import byte_level_tokenizer
    from zephyr import DataError

    tok = tmp_path / "tokenizer.json"
    tok.write_text(byte_level_tokenizer(["Who is Mia? A girl. A cat."] * 20, 300))
    long_row = {"prompt": "Who is Mia? " * 20_000, "chosen": "A girl.", "rejected": "A cat."}  # a ~240 KB line
    source = _jsonl(tmp_path / "p.jsonl", [LAYOUTS["trl strings"], long_row])
    done = tokenize_preferences_to_shards(source, str(tok), str(tmp_path / "out"), DEFAULT_CHAT_TEMPLATE, max_seq_len=64,
                                          validation_fraction=0.0)
    assert done["train_records"] == 1 and done["counters"]["pairs"] == 2 and done["counters"]["pairs_too_long"] == 1
    with pytest.raises(DataError, match=r"p2.jsonl: empty corpus: no documents to tokenize \(1 preference pairs were "
                                        r"dropped: a side longer than max_seq_len; raise max_seq_len\)$"):
        tokenize_preferences_to_shards(_jsonl(tmp_path / "p2.jsonl", [long_row]), str(tok), str(tmp_path / "out2"),
                                       DEFAULT_CHAT_TEMPLATE, max_seq_len=64)


def test_a_hub_dataset_is_read_at_its_pinned_revision(tmp_path: Path, monkeypatch, lm_data_prefix: Path) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    old, new = "1" * 40, "2" * 40
    for revision, rows in ((old, _rows(12)), (new, _rows(20))):
        write_hub_dataset(tmp_path / "hf", "org/prefs", {"data/train-00000-of-00001.jsonl": "".join(
            json.dumps(r) + "\n" for r in rows).encode()}, revision=revision)
    prefix = copy_prefix(lm_data_prefix, tmp_path / "store")
    pinned = preference_chat("tokenized/hub-prefs", "org/prefs", tokenizer, max_seq_len=64, validation_fraction=0.0,
                             revision=old)
    latest = preference_chat("tokenized/hub-prefs-main", "org/prefs", tokenizer, max_seq_len=64, validation_fraction=0.0)
    result = runner(prefix).run([pinned, latest])
    assert result.ok, [(s.name, s.error) for s in result.failed]
    counts = [open_split(result.by_name(name).output_path, "train").num_documents
              for name in ("tokenized/hub-prefs", "tokenized/hub-prefs-main")]
    assert counts == [12, 20]  # pinned to the old commit; the other reads main, the new one
    with pytest.raises(InvalidStep, match=r"^preference_chat 'x': revision='abc' applies to a Hugging Face dataset id"):
        preference_chat("x", str(tmp_path), tokenizer, revision="abc")


def test_bad_post_training_arguments_are_one_line_errors_naming_the_handle_and_argument(tmp_path: Path) -> None:
    prefs = preference_chat("tokenized/prefs", _jsonl(tmp_path / "p.jsonl", _rows(4)), tokenizer)
    base = tiny_model(steps=20)
    with pytest.raises(InvalidStep, match=r"^dpo 'd': beta must be a finite number > 0, got 0$"):
        dpo("d", base, prefs, beta=0)
    with pytest.raises(InvalidStep, match=r"^dpo 'd': beta must be a finite number > 0, got -1"):
        dpo("d", base, prefs, beta=-1)
    with pytest.raises(InvalidStep, match=r"^dpo 'd': loss must be one of 'sigmoid', 'ipo', 'hinge', got 'orpo'$"):
        dpo("d", base, prefs, beta=0.1, loss="orpo")
    with pytest.raises(InvalidStep, match=r"^dpo 'd': lora rank 64 is larger than the dimension of q_proj \(16 x 16\)"):
        dpo("d", base, prefs, beta=0.1, lora=LoraConfig(rank=64))
    # A LoRA run keeps no average (levanter.training.trained): asking for one is refused where it is written.
    with pytest.raises(InvalidStep, match=r"^dpo 'd': ema with lora would average the factors A and B"):
        dpo("d", base, prefs, beta=0.1, lora=LoraConfig(rank=4), ema=0.9)
    with pytest.raises(InvalidStep, match=r"^train_lm 's': lora rank 17 is larger than the dimension of"):
        train_lm("s", "v1", TINY, AdamConfig(), {data: 1.0}, 4, 32, 10, lora=LoraConfig(rank=17),
                 initialize_from=checkpoint(base))
    with pytest.raises(InvalidStep, match=r"^dpo 'd': data must be a preference_chat\(\.\.\.\) handle"):
        dpo("d", base, data, beta=0.1)
    with pytest.raises(InvalidStep, match=r"^reference_logprobs 'r': data must be a preference_chat"):
        reference_logprobs("r", base, data)
    with pytest.raises(InvalidStep, match=r"^dpo 'd': model: model must be a train_lm"):
        dpo("d", "not a model", prefs, beta=0.1)
    other = preference_chat("tokenized/other", _jsonl(tmp_path / "o.jsonl", _rows(6)), tokenizer)
    with pytest.raises(InvalidStep, match=r"^dpo 'd': reference r scores tokenized/other, not this run's data "):
        dpo("d", base, prefs, beta=0.1, reference=reference_logprobs("r", base, other))
    with pytest.raises(InvalidStep, match=r"^dpo 'd': reference r scores in float32, this run computes in bfloat16; "
                                          r"give reference_logprobs\(\.\.\., compute_dtype='bfloat16'\)$"):
        dpo("d", base, prefs, beta=0.1, compute_dtype="bfloat16", reference=reference_logprobs("r", base, prefs))
    with pytest.raises(InvalidStep, match=r"^story_preferences 'p': num_pairs must be an int >= 2, got 1$"):
        story_preferences("p", num_pairs=1)
    wide = train_lm("checkpoints/wide", "v1", dataclasses.replace(TINY, hidden_dim=32), AdamConfig(), {data: 1.0}, 4, 32, 20)
    with pytest.raises(InvalidStep, match=r"^merge_checkpoints 'm': checkpoints from runs of different shapes: "
                                          r"checkpoints/tiny and checkpoints/wide differ in hidden_dim 16 != 32$"):
        merge_checkpoints("m", [checkpoint(base, step=10), checkpoint(wide)])
    with pytest.raises(InvalidStep, match=r"^merge_checkpoints 'm': last=5, but checkpoints/tiny keeps 2 checkpoints"):
        merge_checkpoints("m", base, last=5)
    with pytest.raises(InvalidStep, match=r"^merge_checkpoints 'm': give steps=\[\.\.\.\] or last=N"):
        merge_checkpoints("m", base)
    with pytest.raises(InvalidStep, match=r"^merge_checkpoints 'm': checkpoint 5 is never written"):
        merge_checkpoints("m", base, steps=[5, 10])
    with pytest.raises(InvalidStep, match=r"^merge_checkpoints 'm': weights must give one weight per checkpoint \(2\)"):
        merge_checkpoints("m", base, steps=[10, 20], weights=[1.0])
    with pytest.raises(InvalidStep, match=r"^merge_lora 'l': checkpoints/tiny trains no LoRA adapters"):
        merge_lora("l", base)
    with pytest.raises(ValueError, match=r"^evaluate 'e': ema=True, but checkpoints/tiny trains without ema="):
        evaluate("e", base, {"tiny": data}, ema=True)


@pytest.fixture(scope="module")
def built(trained_prefix: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One DPO run from reference log-probs, a LoRA-DPO run (its base its reference) with its merge,
    a merge of two checkpoints of the 20-step tiny model, their evaluations and an export."""
    root = tmp_path_factory.mktemp("posttrain")
    prefix = copy_prefix(trained_prefix, root / "store")
    prefs = preference_chat("tokenized/prefs", _jsonl(root / "prefs.jsonl", _rows(48)), tokenizer, max_seq_len=48,
                            validation_fraction=0.2)
    base = tiny_model(steps=20)
    settings = dict(batch_size=4, num_train_steps=3, eval_batches=2, eval_every=3,
                    optimizer=AdamConfig(learning_rate=3e-3, warmup=0, weight_decay=0.0))
    full = dpo("checkpoints/dpo-0.1", base, prefs, beta=0.1, ema=0.5, **settings)
    lora = dpo("checkpoints/dpo-lora", base, prefs, beta=0.1, lora=LoraConfig(rank=4, alpha=8.0), **settings)
    folded = merge_lora("checkpoints/dpo-lora-merged", lora)
    merged = merge_checkpoints("checkpoints/tiny-merge", base, steps=[10, 20], weights=[1.0, 3.0])
    evals = {label: evaluate(f"evals/{label}", model, {"tiny": data})
             for label, model in (("lora", lora), ("folded", folded), ("merged", merged), ("full", full))}
    evals["full-ema"] = evaluate("evals/full-ema", full, {"tiny": data}, ema=True)
    # Trained as the tiny models are (their optimizer, so their compiled training step), from the merge.
    further = tiny_model("checkpoints/from-merge", steps=2, save_every=2, keep_every=None,
                         initialize_from=checkpoint(merged))
    exports = [export_hf("hf/dpo-lora", lora), export_hf("hf/tiny-merge", merged)]
    result = runner(prefix).run([*evals.values(), *exports, further])
    assert result.ok, [(s.name, s.error) for s in result.failed]
    return {"prefix": prefix, "result": result, "prefs": prefs, "base": base, "settings": settings}


def _loss(result, name: str) -> float:
    return json.loads(fs.read_text(fs.join(result.by_name(name).output_path, "eval_results.json")))["results"]["tiny"]["loss"]


def test_a_beta_sweep_scores_the_reference_once_and_a_new_beta_scores_nothing_again(built: dict) -> None:
    result, prefs, base = built["result"], built["prefs"], built["base"]
    names = [s.name for s in result.steps]
    # The DPO run without a reference read the reference step every run from this model and data shares.
    assert names.count("tokenized/prefs/reference/checkpoints/tiny") == 1
    assert "reference/" not in " ".join(n for n in names if n.startswith("checkpoints/dpo-lora"))
    sweep = [dpo(f"checkpoints/dpo-{beta}", base, prefs, beta=beta, ema=0.5, **built["settings"])
             for beta in (0.1, 0.2, 0.3, 0.5)]
    plan = runner(built["prefix"]).plan(sweep)
    actions = {p.name: p.action.value for p in plan.steps}
    assert [n for n in actions if "reference" in n] == ["tokenized/prefs/reference/checkpoints/tiny"]
    assert actions["tokenized/prefs/reference/checkpoints/tiny"] == "cached"
    assert {n: a for n, a in actions.items() if n.startswith("checkpoints/dpo-")} == {
        "checkpoints/dpo-0.1": "cached", "checkpoints/dpo-0.2": "run", "checkpoints/dpo-0.3": "run",
        "checkpoints/dpo-0.5": "run"}


def test_a_dpo_run_logs_its_preference_metrics_and_is_a_model(built: dict) -> None:
    out = built["result"].by_name("checkpoints/dpo-0.1").output_path
    rows = [json.loads(line) for line in fs.read_text(fs.join(out, "metrics.jsonl")).splitlines()]
    first = next(r for r in rows if r.get("step") == 0 and "val_reward_accuracy" in r)
    assert first["val_reward_accuracy"] == 0.0 and first["val_reward_margin"] == 0.0  # every pair a tie: 0, as TRL
    train = [r for r in rows if "reward_accuracy" in r]
    assert len(train) == 3 and {"chosen_reward", "rejected_reward", "reward_margin", "loss"} <= set(train[-1])
    summary = json.loads(fs.read_text(fs.join(out, "train_summary.json")))
    assert summary["initial_val_reward_accuracy"] == 0.0 and summary["steps"] == 3
    assert fs.exists(fs.join(out, "tokenizer.json")) and fs.exists(fs.join(out, "chat_template.json"))
    # Evaluated like any model, and so is the average of its parameters it kept (ema=0.5).
    assert np.isfinite(_loss(built["result"], "evals/full")) and np.isfinite(_loss(built["result"], "evals/full-ema"))
    assert _loss(built["result"], "evals/full") != _loss(built["result"], "evals/full-ema")
    assert fs.exists(fs.join(out, "final", "ema_params.npz"))
    # ... and sampled in the chat format it was trained in.
    from marin.experiment.training.sampling import sample_chat

    prompt, reply = sample_chat(out, "Mia had a ball. What did Mia have?", max_new_tokens=4)
    assert prompt.startswith("<|user|>\nMia had a ball.") and prompt.endswith("<|assistant|>\n") and isinstance(reply, str)


def test_a_lora_merge_scores_as_the_adapted_model_and_exports_folded(built: dict) -> None:
    result = built["result"]
    lora_out = result.by_name("checkpoints/dpo-lora").output_path
    assert fs.exists(fs.join(lora_out, "lora.json"))
    with np.load(fs.join(lora_out, "final", "params.npz")) as saved:
        assert {k.rsplit("/", 1)[-1] for k in saved.files} == {"lora_a", "lora_b"}
    assert _loss(result, "evals/lora") == pytest.approx(_loss(result, "evals/folded"), rel=1e-6)
    _, adapted = load_model(lora_out)
    _, folded = load_model(result.by_name("checkpoints/dpo-lora-merged").output_path)
    for module, names in adapted.items():
        for name, value in names.items():
            np.testing.assert_array_equal(np.asarray(folded[module][name]), np.asarray(value))
    from safetensors.numpy import load_file

    exported = load_file(str(Path(result.by_name("hf/dpo-lora").output_path) / "model.safetensors"))
    q = next(k for k in exported if k.endswith("layers.0.self_attn.q_proj.weight"))
    np.testing.assert_allclose(exported[q], np.asarray(folded["layers/attn/q_proj"]["w"][0]).T, rtol=0, atol=0)


def test_a_merge_is_the_weighted_mean_of_the_checkpoints_and_a_model(built: dict) -> None:
    from levanter.checkpoint import read_checkpoint_params

    result = built["result"]
    base_out = result.by_name("checkpoints/tiny").output_path if any(
        s.name == "checkpoints/tiny" for s in result.steps) else None
    out = result.by_name("checkpoints/tiny-merge").output_path
    merge = json.loads(fs.read_text(fs.join(out, "merge.json")))
    assert [(m["checkpoint"], m["weight"]) for m in merge["merged"]] == [(10, 0.25), ("final", 0.75)]
    source = merge["merged"][0]["model"]
    assert base_out is None or source == base_out
    at_10 = read_checkpoint_params(fs.join(source, "checkpoints"), 10)
    _, final = load_model(source)
    _, merged = load_model(out)
    for module, names in at_10.items():
        for name, value in names.items():
            expected = (0.25 * value.astype(np.float64) + 0.75 * np.asarray(final[module][name], np.float64))
            np.testing.assert_array_equal(np.asarray(merged[module][name]), expected.astype(np.float32))
    assert np.isfinite(_loss(result, "evals/merged"))
    # ... a model, that marin gc removes only when told (it holds final parameters, no checkpoint) ...
    from marin.execution.store.step_record import StepRecord
    from marin.execution.store.usage import build_size

    built_size = build_size(StepRecord(out))
    assert built_size is not None and built_size.model
    from marin.execution.store.gc import find_garbage
    from marin.execution.store.store import StepStore

    report = find_garbage(StepStore(str(built["prefix"])), set(), leftovers=False)
    found = {e.folder.rsplit("-", 1)[0]: e.model for e in report.entries}
    assert {name: found[name] for name in ("checkpoints/tiny-merge", "checkpoints/dpo-lora-merged", "checkpoints/dpo-0.1",
                                           "tokenized/prefs")} == {"checkpoints/tiny-merge": True,
                                                                   "checkpoints/dpo-lora-merged": True,
                                                                   "checkpoints/dpo-0.1": True, "tokenized/prefs": False}
    # ... to export and to train further.
    assert (Path(result.by_name("hf/tiny-merge").output_path) / "model.safetensors").exists()
    summary = json.loads(fs.read_text(fs.join(result.by_name("checkpoints/from-merge").output_path, "train_summary.json")))
    assert summary["steps"] == 2
    # Deterministic: rebuilt (a new version), it writes the same model, so its evaluation is cut off.
    from marin.execution.run.outcome import Outcome

    again = merge_checkpoints("checkpoints/tiny-merge", built["base"], steps=[10, 20], weights=[1.0, 3.0], version="v2")
    rerun = runner(built["prefix"]).run([evaluate("evals/merged", again, {"tiny": data})])
    assert rerun.by_name("checkpoints/tiny-merge").outcome is Outcome.RAN
    assert rerun.by_name("evals/merged").outcome is Outcome.REUSED, rerun.by_name("evals/merged")


def test_the_steps_that_run_the_model_ask_for_the_accelerator(tmp_path: Path) -> None:
    from marin.execution.core.traits import uses_accelerator

    prefs = preference_chat("tokenized/prefs", _jsonl(tmp_path / "p.jsonl", _rows(4)), tokenizer)
    base = tiny_model(steps=20)
    run = dpo("d", base, prefs, beta=0.1)
    on_chip = {"dpo": run, "reference_logprobs": reference_logprobs("r", base, prefs)}
    off_chip = {"preference_chat": prefs, "merge_checkpoints": merge_checkpoints("m", base, steps=[10, 20]),
                "story_preferences": story_preferences("p")}
    assert {k: uses_accelerator(h.lower()) for k, h in on_chip.items()} == dict.fromkeys(on_chip, True)
    assert {k: uses_accelerator(h.lower()) for k, h in off_chip.items()} == dict.fromkeys(off_chip, False)
