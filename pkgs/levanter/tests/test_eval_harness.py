"""A levanter Llama through the real lm-evaluation-harness: its answers against direct forward passes
(ours, unpacked, and transformers' Flax Llama on the exported model), and a multiple-choice task run
by the harness's own evaluator, its metrics recomputed by hand from the samples it logged."""

from __future__ import annotations

import dataclasses
import functools
import importlib.abc
import json
import os
import subprocess
import sys
from importlib.metadata import version

import jax
import numpy as np
import pytest
import scipy.special
from lm_eval.api.instance import Instance
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from tokenizers import Tokenizer

from levanter.eval_harness import (
    HarnessConfig,
    LevanterLM,
    TaskRunConfig,
    TaskScores,
    UnknownTask,
    evaluate_model,
    flat_metrics,
    run_tasks,
    samples_file,
    task_scores,
)
from levanter.eval_harness.packing import plan_rows
from levanter.generate import generate_by_recompute
from levanter.models.llama import LlamaConfig, transformed_llama
from testsupport.levanter_data import byte_level_tokenizer, cpu_device_env, random_params

CONFIG = LlamaConfig(vocab_size=320, hidden_dim=32, intermediate_dim=64, num_heads=4, num_kv_heads=2,
                     num_layers=2, max_seq_len=256)
SEQ_LEN = 48
WORDS = "the fox dog cat ran sat saw a red blue ball box home park little big happy sad friend".split()


def _texts(n: int, seed: int, max_words: int = 29) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(4, max_words + 1)))).capitalize() + "." for _ in range(n)]


# The generation tests' prompts: at most 16 tokens, the decoder's smallest prefill bucket, so that
# they share one prefill program.
PROMPT_WORDS = 11


@pytest.fixture(scope="module")
def tokenizer_json() -> str:
    return byte_level_tokenizer(_texts(300, 0), vocab_size=CONFIG.vocab_size)


@pytest.fixture(scope="module")
def params() -> dict:
    return random_params(CONFIG, seed=4)


@pytest.fixture(scope="module")
def lm(params, tokenizer_json) -> LevanterLM:
    return LevanterLM(CONFIG, params, tokenizer_json, HarnessConfig(batch_size=2, seq_len=SEQ_LEN, max_gen_toks=12))


def _request(kind: str, *args) -> Instance:
    return Instance(request_type=kind, doc={}, arguments=args, idx=0)


@functools.cache
def _forward():
    return jax.jit(lambda params, tokens: transformed_llama(CONFIG).apply(params, None, tokens))


def _logits(params, tokens: list[int]) -> np.ndarray:
    """Logits of one unpacked sequence (right-padded to ``SEQ_LEN``, which causal attention ignores: one compile)."""
    assert len(tokens) <= SEQ_LEN
    padded = np.zeros((1, SEQ_LEN), np.int32)
    padded[0, :len(tokens)] = tokens
    return np.asarray(_forward()(params, padded))[0, :len(tokens)]


def _direct_logprobs(params, tokens: list[int]) -> np.ndarray:
    """``log p(tokens[i + 1] | tokens[:i + 1])`` from one unpacked forward pass (the softmax in numpy:
    no program per sequence length)."""
    logp = scipy.special.log_softmax(_logits(params, tokens[:-1]).astype(np.float64), axis=-1)
    return logp[np.arange(len(tokens) - 1), tokens[1:]]


def _direct(params, context: list[int], continuation: list[int]) -> float:
    whole = (context + continuation)[-(SEQ_LEN + 1):]
    return float(_direct_logprobs(params, whole)[-len(continuation):].sum())


def _pairs(tok: Tokenizer, n: int = 23) -> list[tuple[str, str]]:
    texts = _texts(n, 7)
    # One context longer than the whole window: the harness cuts it on the left.
    texts[3] = " ".join(texts[:8])
    return [(t.rsplit(" ", 1)[0], " " + t.rsplit(" ", 1)[1]) for t in texts]


# --------------------------------------------------------------------------- the adapter

def test_loglikelihoods_equal_direct_forward_passes_packed_several_to_a_row(lm, params, tokenizer_json):
    tok = Tokenizer.from_str(tokenizer_json)
    pairs = _pairs(tok)
    answers = lm.loglikelihood([_request("loglikelihood", c, x) for c, x in pairs])
    stats = lm.pack_stats["loglikelihood"]
    assert stats.sequences == len(pairs) and stats.batches * 2 < len(pairs)  # several requests share a row
    for (context, continuation), (logprob, greedy) in zip(pairs, answers, strict=True):
        ctx = tok.encode(context).ids
        cont = tok.encode(context + continuation).ids[len(ctx):]
        expected = _direct(params, ctx, cont)
        assert logprob == pytest.approx(expected, rel=1e-5, abs=1e-4), (context, continuation)
        whole = (ctx + cont)[-(SEQ_LEN + 1):]
        assert greedy == bool((_logits(params, whole[:-1]).argmax(-1)[-len(cont):] == cont).all())
    # Another batch shape packs differently; every answer stays the same.
    wide = LevanterLM(CONFIG, params, tokenizer_json, HarnessConfig(batch_size=5, seq_len=SEQ_LEN))
    again = wide.loglikelihood([_request("loglikelihood", c, x) for c, x in pairs])
    np.testing.assert_allclose([a for a, _ in again], [a for a, _ in answers], rtol=1e-5, atol=1e-5)
    # Same order, same bytes.
    assert lm.loglikelihood([_request("loglikelihood", c, x) for c, x in pairs]) == answers


def test_a_trailing_space_of_the_context_moves_to_the_continuation(lm, params, tokenizer_json):
    tok = Tokenizer.from_str(tokenizer_json)
    context, continuation = lm._encode_pair("The fox ", "ran")
    assert context == tok.encode("The fox").ids
    assert tok.decode(continuation) == " ran" and continuation == tok.encode("The fox ran").ids[len(context):]
    # Scored that way, not as the space-ended context's tokens followed by "ran" alone.
    [(logprob, _)] = lm.loglikelihood([_request("loglikelihood", "The fox ", "ran")])
    assert logprob == pytest.approx(_direct(params, context, continuation), rel=1e-5, abs=1e-4)
    naive = _direct(params, tok.encode("The fox ").ids, tok.encode("ran").ids)
    assert abs(logprob - naive) > 1e-2
    # An empty context is the end-of-document token (documents follow it in training).
    [(empty, _)] = lm.loglikelihood([_request("loglikelihood", "", "The dog")])
    assert empty == pytest.approx(_direct(params, [lm.eot_token_id], tok.encode("The dog").ids), rel=1e-5)


def test_rolling_loglikelihood_sums_every_token_of_the_document_once(lm, params, tokenizer_json):
    tok = Tokenizer.from_str(tokenizer_json)
    short, long = _texts(1, 11)[0], " ".join(_texts(12, 12))
    ids = tok.encode(long).ids
    assert len(ids) > 2 * SEQ_LEN
    got = lm.loglikelihood_rolling([_request("loglikelihood_rolling", short), _request("loglikelihood_rolling", long)])
    # Shorter than the window: one forward pass over the end token and the document.
    assert got[0] == pytest.approx(_direct_logprobs(params, [lm.eot_token_id] + tok.encode(short).ids).sum(), rel=1e-5)
    # Longer: the harness's windows, each scoring tokens no earlier one did, every token once.
    windows = list(map(make_disjoint_window, get_rolling_token_windows(ids, lm.eot_token_id, SEQ_LEN, 1)))
    assert sum(len(c) for _, c in windows) == len(ids)
    assert got[1] == pytest.approx(sum(_direct(params, c, x) for c, x in windows), rel=1e-5)


def test_generate_until_is_greedy_and_stops_at_a_stop_sequence(lm, params, tokenizer_json):
    tok = Tokenizer.from_str(tokenizer_json)
    prompts = _texts(3, 21, PROMPT_WORDS)
    # The reference recomputes the whole buffer per token; one buffer length for all prompts is one
    # compilation (greedy: the first 12 new tokens do not depend on how many more may follow).
    width = max(len(tok.encode(p).ids) for p in prompts) + 12
    expected = [tok.decode(generate_by_recompute(CONFIG, params, ids, max_new_tokens=width - len(ids),
                                                 eos_id=lm.eot_token_id)[:12])
                for ids in (tok.encode(p).ids for p in prompts)]
    got = lm.generate_until([_request("generate_until", p, {"until": [], "max_gen_toks": 12}) for p in prompts])
    assert got == expected and len(set(got)) > 1
    # Cut at the first stop sequence, taken from what the model says anyway.
    stop = expected[0][len(expected[0]) // 2:][:2]
    [cut] = lm.generate_until([_request("generate_until", prompts[0], {"until": [stop], "max_gen_toks": 12})])
    assert cut == expected[0].split(stop)[0]


def test_generate_until_samples_reproducibly_with_a_seed_per_request(lm):
    prompts = _texts(4, 5, PROMPT_WORDS)
    settings = {"until": [], "max_gen_toks": 10, "do_sample": True, "temperature": 1.5, "top_p": 0.95}

    def requests(order: list[int], repeats: int = 1) -> list[Instance]:
        made = [Instance(request_type="generate_until", doc={}, arguments=(prompts[i], settings), idx=0,
                         metadata=("t", i, repeats)) for i in order]
        return [r for r in made for _ in range(repeats)]

    first = lm.generate_until(requests([0, 1, 2, 3]))
    # The same requests in another order (so in other slots, beside other rows) draw the same text.
    assert lm.generate_until(requests([3, 2, 1, 0])) == first[::-1]
    greedy = lm.generate_until([_request("generate_until", p, {"until": [], "max_gen_toks": 10}) for p in prompts])
    assert first != greedy
    # A task's repeats of one request draw apart; a seed of the request's own decides its draw.
    repeated = lm.generate_until(requests([0], repeats=4))
    assert repeated[0] == first[0] and len(set(repeated)) > 1
    seeded = {**settings, "seed": 7}
    again = lm.generate_until([_request("generate_until", prompts[0], seeded) for _ in range(2)])
    assert again[0] == again[1]
    with pytest.raises(ValueError, match="top_p"):
        lm.generate_until([_request("generate_until", "A", {**settings, "top_p": 0.0})])


def test_packing_is_best_fit_longest_first_with_a_small_pad_fraction():
    rng = np.random.default_rng(0)
    lengths = rng.integers(10, 60, size=400).tolist()
    layout = plan_rows(lengths, seq_len=256, batch_size=4)
    segments = layout.segment_ids()
    for i in range(len(lengths)):
        assert (layout.gather(segments, i) == layout.gather(segments, i)[0]).all()
    # No two sequences overlap: every sequence's columns hold one segment of its own.
    assert int((segments > 0).sum()) == sum(lengths)
    # Best fit wastes at most one row here; only the last batch's empty rows are padding besides.
    used = int(layout.row.max()) + 1
    assert used <= -(-sum(lengths) // 256) + 1 and layout.num_rows == -(-used // 4) * 4
    assert plan_rows(lengths, 256, 4).row.tolist() == layout.row.tolist()
    with pytest.raises(ValueError, match="sequence 1 has 300 tokens; each must have 1 to seq_len=256"):
        plan_rows([3, 300], 256, 4)


def test_transformers_flax_llama_on_the_exported_model_gives_the_same_loglikelihoods(lm, params, tokenizer_json,
                                                                                     tmp_path):
    from levanter.compat.hf_checkpoint import save_hf_model
    from testsupport.hf_flax import flax_llama

    save_hf_model(str(tmp_path), CONFIG, params, eos_token_id=lm.eot_token_id)
    hf = flax_llama(str(tmp_path))
    pairs = _pairs(Tokenizer.from_str(tokenizer_json), n=6)
    ours = lm.loglikelihood([_request("loglikelihood", c, x) for c, x in pairs])
    wholes = [(lambda c, x: (c + x)[-(SEQ_LEN + 1):])(*lm._encode_pair(c, x)) for c, x in pairs]
    # One right-padded batch (causal attention ignores the padding): one compilation.
    batch = np.zeros((len(pairs), SEQ_LEN), np.int32)
    for row, whole in zip(batch, wholes, strict=True):
        row[:len(whole) - 1] = whole[:-1]
    # The forward pass jitted: compiled once as a whole, not op by op.
    logits = jax.jit(lambda p, tokens: hf(tokens, params=p).logits)(hf.params, batch)
    logp = scipy.special.log_softmax(np.asarray(logits, np.float64), axis=-1)
    for (context, continuation), (logprob, _), whole, rows in zip(pairs, ours, wholes, logp, strict=True):
        n = len(lm._encode_pair(context, continuation)[1])
        theirs = rows[np.arange(len(whole) - 1), whole[1:]][-n:].sum()
        assert logprob == pytest.approx(theirs, rel=1e-5, abs=1e-4)


def test_sharded_over_a_two_device_mesh_the_answers_are_the_same(lm, params, tokenizer_json, tmp_path):
    pairs = _pairs(Tokenizer.from_str(tokenizer_json), n=9)
    expected = lm.loglikelihood([_request("loglikelihood", c, x) for c, x in pairs])
    np.savez(tmp_path / "params.npz", **{f"{m}|{n}": v for m, sub in params.items() for n, v in sub.items()})
    (tmp_path / "tokenizer.json").write_text(tokenizer_json)
    (tmp_path / "pairs.json").write_text(json.dumps(pairs))
    env = cpu_device_env(2)
    proc = subprocess.run([sys.executable, "-c", _MESH_SCRIPT, str(tmp_path), json.dumps(dataclasses.asdict(CONFIG)),
                           str(SEQ_LEN)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["devices"] == 2 and result["param_spec"] == [None, "fsdp", None]
    np.testing.assert_allclose([a for a, _ in result["answers"]], [a for a, _ in expected], rtol=1e-5, atol=1e-5)
    assert [g for _, g in result["answers"]] == [g for _, g in expected]


_MESH_SCRIPT = """
import json, sys
import numpy as np
import jax
from lm_eval.api.instance import Instance
from levanter.eval_harness import HarnessConfig, LevanterLM
from levanter.models.llama import LlamaConfig
from levanter.sharding import MeshConfig, make_mesh
folder, config, seq_len = sys.argv[1], LlamaConfig(**json.loads(sys.argv[2])), int(sys.argv[3])
params = {}
with np.load(folder + "/params.npz") as f:
    for key in f.files:
        module, name = key.split("|")
        params.setdefault(module, {})[name] = f[key]
mesh = make_mesh(MeshConfig(data=1, fsdp=2))
lm = LevanterLM(config, params, open(folder + "/tokenizer.json").read(), HarnessConfig(batch_size=2, seq_len=seq_len),
                mesh=mesh)
pairs = json.load(open(folder + "/pairs.json"))
answers = lm.loglikelihood([Instance("loglikelihood", {}, tuple(p), 0) for p in pairs])
spec = list(lm._model.params["layers/attn/q_proj"]["w"].sharding.spec)
print(json.dumps({"devices": len(jax.devices()), "param_spec": spec, "answers": answers}))
"""


# --------------------------------------------------------------------------- through the harness

_MC_YAML = """task: toy_arc
dataset_path: json
dataset_kwargs:
  data_files:
    test: toy_arc.jsonl
output_type: multiple_choice
test_split: test
doc_to_text: "Question: {{question}}\\nAnswer:"
doc_to_target: "{{choices.label.index(answerKey)}}"
doc_to_choice: "{{choices.text}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


def _write_mc_task(folder) -> str:
    rng = np.random.default_rng(5)
    with open(os.path.join(folder, "toy_arc.jsonl"), "w") as f:
        for i in range(24):
            texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 5)))) for _ in range(4)]
            f.write(json.dumps({"question": f"What did the {WORDS[i % len(WORDS)]} see?",
                                "choices": {"text": texts, "label": list("ABCD")},
                                "answerKey": "ABCD"[i % 4]}) + "\n")
    path = os.path.join(folder, "toy_arc.yaml")
    with open(path, "w") as f:
        f.write(_MC_YAML)
    return path


class _RefuseTransformers(importlib.abc.MetaPathFinder):
    """An import finder that fails any import of transformers (put first on ``sys.meta_path``)."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "transformers":
            raise ImportError(f"{name} was imported")
        return None


def test_a_multiple_choice_task_through_the_harness_scores_as_recomputed_by_hand(lm, params, tokenizer_json, tmp_path,
                                                                                 monkeypatch):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    yaml_path = _write_mc_task(str(tasks))
    monkeypatch.chdir(tmp_path)  # the data file is found beside the YAML, not in the working directory
    # Running tasks never imports transformers (1.5 s here): the harness's version stamp comes from metadata.
    monkeypatch.delitem(sys.modules, "transformers", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_RefuseTransformers(), *sys.meta_path])
    results = run_tasks(lm, TaskRunConfig(tasks=(yaml_path,), limit=20), str(tmp_path / "out"))
    written = json.loads((tmp_path / "out" / "results.json").read_text())
    assert written["results"] == results["results"]
    assert (written["transformers_version"], written["lm_eval_version"]) == (version("transformers"), version("lm_eval"))
    assert written["config"]["model"] == "levanter" and written["config"]["model_config"]["hidden_dim"] == 32
    assert written["n-shot"] == {"toy_arc": 0} and written["versions"] == {"toy_arc": 1.0}
    assert written["configs"]["toy_arc"]["output_type"] == "multiple_choice"
    assert written["config"]["pack_stats"]["loglikelihood"]["sequences"] >= 80

    lines = (tmp_path / "out" / samples_file("toy_arc")).read_text().splitlines()
    samples = [json.loads(line) for line in lines]
    assert [s["doc_id"] for s in samples] == list(range(20))
    acc, acc_norm = [], []
    for s in samples:
        logprobs = np.array([float(r[0][0]) for r in s["resps"]])
        assert [float(r[0]) for r in s["filtered_resps"]] == logprobs.tolist()
        lengths = np.array([len(t) for t in s["doc"]["choices"]["text"]], dtype=float)
        assert s["arguments"]["gen_args_0"]["arg_0"] == f"Question: {s['doc']['question']}\nAnswer:"
        gold = int(s["target"])
        acc.append(float(np.argmax(logprobs) == gold))
        acc_norm.append(float(np.argmax(logprobs / lengths) == gold))
        assert (s["acc"], s["acc_norm"]) == (acc[-1], acc_norm[-1])
    task = results["results"]["toy_arc"]
    assert task["acc,none"] == pytest.approx(np.mean(acc)) and task["acc_norm,none"] == pytest.approx(np.mean(acc_norm))
    assert task["acc_stderr,none"] == pytest.approx(np.std(acc, ddof=1) / np.sqrt(len(acc)))
    assert acc != acc_norm  # the normalisation mattered somewhere, so both are really checked
    # Read back by metric: the harness's numbers under their own names, standard errors apart.
    scores = task_scores(written)["toy_arc"]
    assert scores.metrics == {"acc": task["acc,none"], "acc_norm": task["acc_norm,none"]}
    assert scores.stderr == {"acc": task["acc_stderr,none"], "acc_norm": task["acc_norm_stderr,none"]}
    assert (scores.samples, scores.num_fewshot, scores.version) == (20, 0, 1.0)
    assert scores.higher_is_better == {"acc": True, "acc_norm": True}
    assert TaskScores.from_json(json.loads(json.dumps(scores.to_json()))) == scores

    # The same run again, from the parameters in hand (what a trainer's hook calls), writes the same
    # samples byte for byte and returns the same scores.
    again = evaluate_model(CONFIG, params, tokenizer_json, TaskRunConfig(tasks=(yaml_path,), limit=20), lm.harness_config,
                           output_dir=str(tmp_path / "again"))
    assert (tmp_path / "again" / samples_file("toy_arc")).read_text().splitlines() == lines
    assert again == {"toy_arc": scores} and flat_metrics(again) == {"toy_arc.acc": task["acc,none"],
                                                                    "toy_arc.acc_norm": task["acc_norm,none"]}


def test_task_scores_name_filtered_metrics_and_groups_and_skip_what_is_no_number():
    results = {"results": {"gsm": {"alias": "gsm", "exact_match,strict-match": 0.25, "exact_match_stderr,strict-match": 0.1,
                                   "exact_match,none": 0.5, "exact_match_stderr,none": "N/A", "sample_len": 4}},
               "groups": {"maths": {"alias": "maths", "exact_match,none": 0.5, "exact_match_stderr,none": 0.2}},
               "n-samples": {"gsm": {"original": 8, "effective": 4}}, "n-shot": {"gsm": 5}, "versions": {"gsm": 3}}
    scores = task_scores(results)
    assert scores["gsm"] == TaskScores(metrics={"exact_match,strict-match": 0.25, "exact_match": 0.5},
                                       stderr={"exact_match,strict-match": 0.1}, samples=4, num_fewshot=5, version=3)
    assert scores["maths"].metrics == {"exact_match": 0.5} and scores["maths"].stderr == {"exact_match": 0.2}
    with pytest.raises(ValueError, match="not lm-eval results"):
        task_scores({"configs": {}})


def test_unknown_tasks_and_bad_settings_are_named(lm, tokenizer_json, tmp_path):
    with pytest.raises(UnknownTask, match=r"task YAML file '.*nope\.yaml' does not exist"):
        run_tasks(lm, TaskRunConfig(tasks=(str(tmp_path / "nope.yaml"),)))
    with pytest.raises(UnknownTask, match="task include path .* is not a folder"):
        run_tasks(lm, TaskRunConfig(tasks=("x",), include_paths=(str(tmp_path / "missing"),)))
    with pytest.raises(ValueError, match="limit must be a count > 0, a share in \\(0, 1\\) or None, got 0"):
        TaskRunConfig(tasks=("x",), limit=0)
    with pytest.raises(ValueError, match="tasks must be a sequence of task names or YAML paths, got the string"):
        TaskRunConfig(tasks="arc_easy")
    with pytest.raises(ValueError, match="batch_size must be a positive int, got 0"):
        HarnessConfig(batch_size=0)
    with pytest.raises(ValueError, match="the tokenizer has no end token '<eos>'"):
        LevanterLM(CONFIG, {}, tokenizer_json, HarnessConfig(eos_token="<eos>"))
