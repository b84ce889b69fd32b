"""``generations(...)`` steps: completions of the tiny model as a content-hashed dataset; built, killed after
its first shards, resumed from them, and equal to an unbroken build byte for byte."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from levanter.inference import SamplingParams
from marin.execution.core.errors import InvalidStep
from marin.execution.core.lazy import lower
from marin.execution.store.step_record import StepRecord
from marin.experiment.generation import generations, load_generation_model
from marin.experiment.generation.steps import (
    SUMMARY_FILE,
    GenerationsConfig,
    completion_seed,
    generations_step,
    read_prompts,
    shard_name,
)
from rigging import filesystem as fs
from testsupport.lm_graph import copy_prefix, runner, tiny_model

PROMPTS = [f"Once upon a time {who} went" for who in ("Tom", "Sue", "a cat", "the dog", "Lily", "Ben", "a bird",
                                                         "the king", "Mia", "a fox", "the sun", "Max")]
SAMPLING = SamplingParams(max_tokens=8, temperature=0.9, top_p=0.95, seed=3)
SHARDS = 6
# Every engine here decodes 2 completions at once, 8 tokens a trip (a generations step's trip, and
# `marin sample -n 8 --samples 2`'s): they share their compiled programs.
SLOTS = 2


def _step():
    return generations("generations/tiny", tiny_model(steps=10), PROMPTS, sampling=SAMPLING, n=2, prompts_per_shard=2,
                       slots=SLOTS)


def _shards(folder: str) -> dict[str, bytes]:
    return {name: fs.read_bytes(fs.join(folder, name)) for name in sorted(fs.listdir(folder))
            if name.startswith("part-")}


def _files(prefix: Path) -> str:
    [planned] = [p for p in runner(prefix).plan([_step()]).steps if p.name == "generations/tiny"]
    return StepRecord(planned.output_path).files_folder()


@pytest.fixture(scope="module")
def built(trained_prefix: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("generations")
    prefix = copy_prefix(trained_prefix, root / "store")
    result = runner(prefix).run([_step()])
    assert result.ok, [(s.name, s.error) for s in result.failed]
    return {"root": root, "prefix": prefix, "shards": _shards(_files(prefix)), "trained": trained_prefix}


def test_every_prompt_is_completed_n_times_with_its_own_seed(built: dict) -> None:
    shards = built["shards"]
    assert sorted(shards) == [shard_name(i) for i in range(SHARDS)]
    records = [json.loads(line) for data in shards.values() for line in data.decode().splitlines()]
    assert [(r["prompt_index"], r["sample"]) for r in records] == [(i, j) for i in range(len(PROMPTS)) for j in (0, 1)]
    assert [r["prompt"] for r in records[::2]] == PROMPTS
    model = load_generation_model(fs.join(str(built["prefix"]), lower(tiny_model(steps=10)).name + "-" +
                                          lower(tiny_model(steps=10)).hash[:16]))
    for r in records:
        assert 1 <= len(r["token_ids"]) <= SAMPLING.max_tokens and len(r["logprobs"]) == len(r["token_ids"])
        assert all(lp <= 0 for lp in r["logprobs"]) and r["finish_reason"] in ("stop", "length")
        ids = r["token_ids"][:-1] if r["finish_reason"] == "stop" else r["token_ids"]
        assert r["text"] == model.decode(ids)
    # The two samples of a prompt draw with different seeds, so (at T=0.9) they are not all equal.
    assert any(a["token_ids"] != b["token_ids"] for a, b in zip(records[::2], records[1::2], strict=True))
    assert completion_seed(3, 0, 0) != completion_seed(3, 0, 1) != completion_seed(3, 1, 0)


def test_a_killed_build_resumes_from_its_shards_and_writes_the_same_bytes(built: dict, tmp_path: Path,
                                                                          subprocess_env: dict[str, str]) -> None:
    prefix = copy_prefix(built["trained"], tmp_path / "store")
    files = _files(prefix)
    # Each shard is written for real; the child then pauses, so the kill lands between shards.
    script = ("import sys, time; import marin.processing.attributes as a; write = a.write_jsonl\n"
              "def slow(path, records):\n    n = write(path, records); time.sleep(0.3); return n\n"
              "a.write_jsonl = slow\n"
              "from pkgs.marin.tests.experiment.test_generations import _step\n"
              "from testsupport.lm_graph import runner\n"
              "runner(sys.argv[1]).run([_step()])\n")
    proc = subprocess.Popen([sys.executable, "-c", script, str(prefix)], env=subprocess_env, start_new_session=True)
    deadline = time.monotonic() + 180
    while len(fs.glob(fs.join(files, "part-*.jsonl"))) < 2:
        assert proc.poll() is None, "the build ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    kept = _shards(files)
    assert 2 <= len(kept) < SHARDS
    stamps = {name: os.stat(os.path.join(files, name)).st_mtime_ns for name in kept}

    result = runner(prefix).run([_step()])
    assert result.ok, [(s.name, s.error) for s in result.failed]
    after = _files(prefix)
    assert _shards(after) == built["shards"]  # the same bytes as the unbroken build
    summary = json.loads(fs.read_text(fs.join(after, SUMMARY_FILE)))
    assert summary["shards_reused"] == len(kept), summary
    if after == files:  # resumed in place: the completed shards were not written again
        assert {n: os.stat(os.path.join(files, n)).st_mtime_ns for n in kept} == stamps


def test_the_identity_holds_model_prompts_sampling_and_n(tmp_path: Path) -> None:
    model = tiny_model(steps=10)
    base = lower(generations("g", model, ["a", "b"], sampling=SamplingParams(seed=1), n=2)).hash
    assert lower(generations("g", model, ["a", "b"], sampling=SamplingParams(seed=1), n=2, slots=3)).hash == base
    changed = [generations("g", model, ["a", "c"], sampling=SamplingParams(seed=1), n=2),
               generations("g", model, ["a", "b"], sampling=SamplingParams(seed=2), n=2),
               generations("g", model, ["a", "b"], sampling=SamplingParams(seed=1, temperature=0.5), n=2),
               generations("g", model, ["a", "b"], sampling=SamplingParams(seed=1), n=3),
               generations("g", tiny_model(steps=20), ["a", "b"], sampling=SamplingParams(seed=1), n=2)]
    assert len({lower(g).hash for g in changed} | {base}) == len(changed) + 1
    # A prompt file enters by its content.
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"prompt": "a"}\n{"text": "b"}\n')
    from_file = lower(generations("g", model, str(path))).hash
    assert read_prompts(str(path)) == ["a", "b"]
    path.write_text('{"prompt": "a"}\n{"text": "c"}\n')
    assert lower(generations("g", model, str(path))).hash != from_file


def test_bad_arguments_are_named() -> None:
    model = tiny_model(steps=10)
    with pytest.raises(InvalidStep, match=r"^generations 'g': n must be an int >= 1, got 0"):
        generations("g", model, ["a"], n=0)
    with pytest.raises(InvalidStep, match=r"^generations 'g': prompts must be a non-empty list"):
        generations("g", model, [])
    with pytest.raises(InvalidStep, match=r"^generations 'g': model must be a train_lm"):
        generations("g", "not-a-model", ["a"])
    with pytest.raises(InvalidStep, match=r"^generations 'g': checkpoint 5 is never written"):
        generations("g", model, ["a"], checkpoint=5)


def test_marin_sample_draws_what_a_generations_step_with_its_seed_writes(built: dict) -> None:
    from click.testing import CliRunner

    from marin.cli.main import cli

    model = lower(tiny_model(steps=10))
    args = ["sample", model.name, "--prefix", str(built["prefix"]), "--prompt", PROMPTS[0], "-n", str(SAMPLING.max_tokens),
            "--temperature", "0.9", "--top-p", "0.95", "--seed", "3", "--samples", "2"]
    shown = CliRunner().invoke(cli, args)
    assert shown.exit_code == 0, shown.output
    records = [json.loads(line) for line in built["shards"][shard_name(0)].decode().splitlines()][:2]
    assert shown.output == "".join(f"--- sample {r['sample']}\n{PROMPTS[0]}{r['text']}\n" for r in records)


def test_chat_generations_are_conversations_and_a_build_is_a_prompt_source(built: dict, tmp_path: Path) -> None:
    import shutil

    from marin.experiment.chat import conversation_from_record
    from marin.experiment.chat.template import DEFAULT_CHAT_TEMPLATE
    from marin.experiment.chat.tokenize import TEMPLATE_FILE, template_to_json

    # Another step reads a build's folder as prompts: its records' prompts, the summary left out.
    assert read_prompts(_files(built["prefix"])) == [p for p in PROMPTS for _ in (0, 1)]
    # A copy of the model with a chat template beside it answers user turns in the template.
    model = lower(tiny_model(steps=10))
    run = tmp_path / "run"
    shutil.copytree(built["prefix"] / f"{model.name}-{model.hash[:16]}", run)
    (run / TEMPLATE_FILE).write_text(template_to_json(DEFAULT_CHAT_TEMPLATE))
    out = tmp_path / "out"
    generations_step(GenerationsConfig(model=str(run), prompts=("Who is Tom?", "Tell a story."), chat=True,
                                       sampling=SamplingParams(max_tokens=6), slots=SLOTS), str(out))
    records = [json.loads(line) for line in (out / shard_name(0)).read_text().splitlines()]
    assert [r["prompt"] for r in records] == ["Who is Tom?", "Tell a story."]
    for r in records:
        conversation = conversation_from_record(r)  # what tokenized_chat reads
        assert [m.content for m in conversation] == [r["prompt"], r["text"]]


def _longer(prompt: str, text: str) -> float:
    """A judge: longer completions are better."""
    return float(len(text))


def test_judged_pairs_feed_preference_chat(built: dict) -> None:
    from marin.experiment import preference_chat
    from marin.experiment.generation.judged import judged_pairs
    from testsupport.lm_graph import tokenizer

    pairs = judged_pairs("pairs/tiny", _step(), _longer)
    tokenized = preference_chat("tokenized/tiny-pairs", pairs, tokenizer, max_seq_len=48, validation_fraction=0.0)
    result = runner(built["prefix"]).run([tokenized])
    assert result.ok, [(s.name, s.error) for s in result.failed]
    rows = [json.loads(line) for line in
            fs.read_text(fs.join(result.by_name("pairs/tiny").output_path, shard_name(0))).splitlines()]
    records = [json.loads(line) for data in built["shards"].values() for line in data.decode().splitlines()]
    expected = [i for i in range(len(PROMPTS)) if len(records[2 * i]["text"]) != len(records[2 * i + 1]["text"])
                and records[2 * i]["text"] and records[2 * i + 1]["text"]]
    assert [r["id"] for r in rows] == expected and expected
    for r in rows:
        a, b = records[2 * r["id"]]["text"], records[2 * r["id"] + 1]["text"]
        assert (r["chosen"], r["rejected"]) == ((a, b) if len(a) > len(b) else (b, a))
    summary = json.loads(fs.read_text(fs.join(result.by_name("tokenized/tiny-pairs").output_path, "index.json")))
    assert summary["counters"]["pairs"] == len(rows), summary
    with pytest.raises(InvalidStep, match=r"makes 1 completion per prompt"):
        judged_pairs("p", generations("g", tiny_model(steps=10), ["a"]), _longer)
    with pytest.raises(InvalidStep, match=r"judge must be a module-level function"):
        judged_pairs("p", _step(), lambda p, t: 0.0)
