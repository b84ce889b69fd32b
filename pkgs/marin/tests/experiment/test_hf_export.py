"""Models out to and in from the Hugging Face layout, through real steps, transformers and the hub cache.

One small graph (the session's shared corpus, BPE and shards (``lm_data_prefix``) -> a 4-step GQA
Llama -> two exports) is built once for the module, every step in this process; every test reads it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import jax
import numpy as np
import pytest
from click.testing import CliRunner

from levanter.checkpoint import CheckpointConfig, read_checkpoint_params
from levanter.compat.hf_checkpoint import HfCheckpointNotFound, load_hf_params, resolve_hf_folder
from levanter.generate import load_final_model
from levanter.models.llama import LlamaConfig
from levanter.optim import AdamConfig
from marin.cli.main import cli
from marin.execution.core.errors import InvalidStep
from marin.execution.core.lazy import lower
from marin.experiment.hf import export_hf, hf_checkpoint
from marin.experiment.training.train import train_lm
from testsupport.hf_flax import flax_llama
from testsupport.lm_graph import copy_prefix, data, runner

MODEL = LlamaConfig(vocab_size=320, hidden_dim=32, intermediate_dim=64, num_heads=4, num_kv_heads=2,
                    num_layers=2, max_seq_len=64)
TEXTS = ["Once upon a time, a little fox found a red ball.", "The end.\n\nA   new day began!", "zebra-quokka 42"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, lm_data_prefix: Path) -> dict[str, str]:
    prefix = str(copy_prefix(lm_data_prefix, tmp_path_factory.mktemp("hf") / "store"))
    model = train_lm(name="checkpoints/hf-nano", version="v1", model=MODEL, optimizer=AdamConfig(learning_rate=3e-3),
                     datasets={data: 1.0}, batch_size=4, seq_len=32, num_train_steps=4, eval_every=0,
                     eval_batches=1, checkpoint=CheckpointConfig(save_every=2, keep_last=2))
    final = export_hf("hf/nano", model)
    at_two = export_hf("hf/nano-step2", model, checkpoint=2)
    result = runner(prefix).run([final, at_two])
    assert result.ok, [(f.name, f.error) for f in result.failed]
    return {"prefix": prefix, "data": data, **{s.name: s.output_path for s in result.steps}}


@pytest.fixture(scope="module")
def flax_export(built):
    """transformers' Flax Llama on the final export, loaded once for the module (loading initialises
    a random model first: a cost worth paying once)."""
    return flax_llama(built["hf/nano"])


def test_transformers_loads_the_export_and_gives_our_logits(built, flax_export):
    import jax.numpy as jnp
    from transformers import AutoConfig

    from levanter.models.llama import transformed_llama

    folder = built["hf/nano"]
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "special_tokens_map.json"} <= set(os.listdir(folder))
    config, params = load_final_model(built["checkpoints/hf-nano"])
    hf_config = AutoConfig.from_pretrained(folder)
    assert (hf_config.vocab_size, hf_config.num_key_value_heads, hf_config.tie_word_embeddings) == (320, 2, False)

    hf = flax_export
    tokens = np.random.default_rng(0).integers(0, config.vocab_size, (2, 32)).astype(np.int32)
    # Both forward passes jitted: each compiles as one program, not one per operation.
    apply = jax.jit(transformed_llama(config).apply)
    ours = np.asarray(apply(params, None, jnp.asarray(tokens)))
    theirs = np.asarray(jax.jit(lambda p, t: hf(t, params=p).logits)(hf.params, tokens))
    np.testing.assert_allclose(theirs, ours, rtol=1e-5, atol=1e-5)
    # The tolerance has teeth: the same model with q and k rows in the interleaved-pairs rotary
    # layout (the permutation a model rotating interleaved pairs would need) is far off.
    swapped = {m: dict(v) for m, v in params.items()}
    for proj in ("q_proj", "k_proj"):  # every layer's at once: the layer weights are stacked
        w = np.asarray(swapped[f"layers/attn/{proj}"]["w"])
        heads = w.reshape(*w.shape[:2], -1, config.head_dim // 2, 2)
        swapped[f"layers/attn/{proj}"]["w"] = heads.transpose(0, 1, 2, 4, 3).reshape(w.shape)
    permuted = np.asarray(apply(swapped, None, jnp.asarray(tokens)))
    assert np.abs(permuted - theirs).max() > 100 * 1e-5


def test_auto_tokenizer_encodes_like_ours(built):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    ours = Tokenizer.from_file(os.path.join(built["checkpoints/hf-nano"], "tokenizer.json"))
    theirs = AutoTokenizer.from_pretrained(built["hf/nano"])
    eos = ours.token_to_id("<|endoftext|>")
    assert theirs.eos_token == "<|endoftext|>" and theirs.eos_token_id == eos
    for text in TEXTS:
        ids = ours.encode(text, add_special_tokens=False).ids
        assert theirs(text)["input_ids"] == ids, text
        assert theirs.decode(ids) == ours.decode(ids)


def test_export_of_a_kept_checkpoint_holds_that_steps_weights(built):
    model = LlamaConfig(**{**MODEL.__dict__})  # vocabulary already 320, the data's
    exported = load_hf_params(built["hf/nano-step2"], model)
    expected = read_checkpoint_params(os.path.join(built["checkpoints/hf-nano"], "checkpoints"), 2)
    final = load_hf_params(built["hf/nano"], model)
    for module in expected:
        for name in expected[module]:
            np.testing.assert_array_equal(exported[module][name], expected[module][name])
    assert not np.array_equal(final["layers/attn/q_proj"]["w"], exported["layers/attn/q_proj"]["w"])


def test_cli_export_by_path_and_by_step_name(built, tmp_path):
    runner = CliRunner()
    out = tmp_path / "nano-hf"
    done = runner.invoke(cli, ["export-hf", built["checkpoints/hf-nano"], "-o", str(out)])
    assert done.exit_code == 0, done.output
    for file in ("model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (out / file).read_bytes() == Path(built["hf/nano"], file).read_bytes(), file

    missing = runner.invoke(cli, ["export-hf", "checkpoints/hf-nano", "-o", str(tmp_path / "x"),
                                  "--checkpoint", "3", "--prefix", built["prefix"]])
    assert missing.exit_code == 2
    assert "no committed checkpoint of step 3 (committed: [2, 4])" in missing.output
    assert "INFO" not in missing.output  # Orbax's narration of the restore is not shown
    unknown = runner.invoke(cli, ["export-hf", "checkpoints/nope", "-o", str(tmp_path / "y"), "--prefix",
                                  built["prefix"]])
    assert unknown.exit_code == 2 and "'checkpoints/nope' is not an output folder, nor an output or step name" \
        in unknown.output
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
    # The form `marin run` prints (the output name under the prefix) names the same build, for
    # export-hf as for show.
    output_name = os.path.relpath(built["checkpoints/hf-nano"], built["prefix"])
    by_output_name = runner.invoke(cli, ["export-hf", output_name, "-o", str(tmp_path / "z"), "--prefix", built["prefix"]])
    assert by_output_name.exit_code == 0, by_output_name.output
    assert (tmp_path / "z" / "model.safetensors").read_bytes() == (out / "model.safetensors").read_bytes()
    shown = runner.invoke(cli, ["show", output_name, "--prefix", built["prefix"], "--json"])
    assert shown.exit_code == 0 and json.loads(shown.stdout)["output_path"] == built["checkpoints/hf-nano"]


def _hub_with_export(built, tmp_path: Path, monkeypatch, repo: str) -> str:
    """An offline hub cache under ``tmp_path`` holding the final export as ``repo``; its snapshot folder."""
    hf_home = tmp_path / "hf_home"
    exported = tmp_path / "exported"
    shutil.copytree(built["hf/nano"], exported, ignore=shutil.ignore_patterns(".marin"))
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    return _into_hub_cache(hf_home, repo, str(exported))


def _into_hub_cache(hf_home: Path, repo: str, folder: str) -> str:
    """Put ``folder``'s files in the hub cache's own layout (blobs by digest, snapshot links, a ref)."""
    commit = hashlib.sha1(repo.encode()).hexdigest()
    root = hf_home / "hub" / ("models--" + repo.replace("/", "--"))
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(commit)
    snapshot = root / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (root / "blobs").mkdir()
    for name in os.listdir(folder):
        data = Path(folder, name).read_bytes()
        blob = root / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snapshot / name).symlink_to(os.path.relpath(blob, snapshot))
    return str(snapshot)


def test_hf_checkpoint_resolves_from_the_hub_cache_offline(built, tmp_path, monkeypatch):
    snapshot = _hub_with_export(built, tmp_path, monkeypatch, "someone/nano-llama")
    hf_home = tmp_path / "hf_home"

    folder = resolve_hf_folder("someone/nano-llama")
    assert os.path.realpath(folder) == os.path.realpath(snapshot)
    params = load_hf_params(folder, MODEL)
    _, final = load_final_model(built["checkpoints/hf-nano"])
    for module in final:
        for name in final[module]:
            np.testing.assert_array_equal(params[module][name], np.asarray(final[module][name]))

    with pytest.raises(HfCheckpointNotFound) as info:
        resolve_hf_folder("someone/absent-llama", revision="v3")
    message = str(info.value)
    assert "'someone/absent-llama' at revision 'v3' is not in the hub cache (HF_HUB_OFFLINE=1)" in message
    assert str(hf_home / "hub") in message and "\n" not in message
    with pytest.raises(HfCheckpointNotFound, match="does not exist"):
        resolve_hf_folder(str(tmp_path / "no-such-folder"))


def test_hf_checkpoint_and_export_validation(tmp_path):
    assert hf_checkpoint("org/name") == hf_checkpoint("org/name")
    assert hf_checkpoint("org/name", revision="v2") != hf_checkpoint("org/name")
    with pytest.raises(ValueError, match="revision applies to Hub model ids only"):
        hf_checkpoint(str(tmp_path), revision="main")
    with pytest.raises(ValueError, match="checkpoint must be 'final' or a positive step number, got 0"):
        export_hf("x", model=None, checkpoint=0)


def test_train_lm_starts_from_a_hub_checkpoint(built, tmp_path, monkeypatch):
    _hub_with_export(built, tmp_path, monkeypatch, "someone/nano-llama")
    # One step of learning rate 1e-30 moves no float32 weight of this size, so the step's final
    # parameters are exactly the ones it started from: export -> import gives them back unchanged.
    start = hf_checkpoint("someone/nano-llama")
    model = train_lm(name="checkpoints/from-hf", version="v1", model=MODEL, optimizer=AdamConfig(learning_rate=1e-30),
                     datasets={built["data"]: 1.0}, batch_size=4, seq_len=32, num_train_steps=1, seed=9,
                     eval_every=0, eval_batches=0, initialize_from=start)
    result = runner(built["prefix"]).run([model])
    assert result.ok, [(f.name, f.error) for f in result.failed]
    _, started = load_final_model(result.by_name("checkpoints/from-hf").output_path)
    _, source = load_final_model(built["checkpoints/hf-nano"])
    for module in source:
        for name in source[module]:
            np.testing.assert_array_equal(np.asarray(started[module][name]), np.asarray(source[module][name]))

    # The starting point is part of the training step's identity.
    def step_hash(initialize_from) -> str:
        return lower(train_lm(name="checkpoints/from-hf", version="v1", model=MODEL,
                              optimizer=AdamConfig(learning_rate=1e-30), datasets={built["data"]: 1.0},
                              batch_size=4, seq_len=32, num_train_steps=1, seed=9, eval_every=0, eval_batches=0,
                              initialize_from=initialize_from)).hash

    assert step_hash(start) == lower(model).hash
    assert len({step_hash(start), step_hash(hf_checkpoint("someone/nano-llama", revision="v2")),
                step_hash(hf_checkpoint("someone/other")), step_hash(None)}) == 4
    with pytest.raises(InvalidStep, match=r"initialize_from must be one of \['CheckpointStart', 'HfCheckpoint', 'TrainedModel'\] or None, got str"):
        step_hash("someone/nano-llama")


def test_greedy_generation_equals_transformers_flax_llama_on_the_export(built, flax_export):
    # The key/value-cache decoder on the exported folder (read back as `marin serve` reads it) against
    # transformers' own greedy search, 64 prompts, token for token (both stop at the end token).
    from levanter.inference import SamplingParams
    from marin.experiment.generation import load_generation_model

    folder, new = built["hf/nano"], 24
    model = load_generation_model(folder)
    prompts = np.random.default_rng(1).integers(0, model.config.vocab_size, (64, 8)).astype(np.int32)
    ours = model.engine(slots=16, max_len=32).generate(prompts.tolist(), SamplingParams(max_tokens=new,
                                                                                         stop_token_ids=model.end_ids))
    hf = flax_export
    [eos] = model.end_ids
    # Jitted whole (transformers' generate is jittable): one program, not one per operation.
    search = jax.jit(lambda p, x: hf.generate(x, params=p, max_new_tokens=new, do_sample=False, eos_token_id=eos,
                                              pad_token_id=eos).sequences)
    theirs = np.asarray(search(hf.params, prompts))[:, prompts.shape[1]:]
    for mine, row in zip(ours, theirs, strict=True):
        assert mine.token_ids == row[:len(mine.token_ids)].tolist()
        assert len(mine.token_ids) == new or mine.token_ids[-1] == eos
    assert sum(len(c.token_ids) for c in ours) > 64 * 4  # not all ended at once
