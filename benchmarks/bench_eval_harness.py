"""Benchmark-task evaluation through the harness adapter, beside a bare jitted forward pass:
``python -m benchmarks.bench_eval_harness``.

The requests are the harness's own for a generated HellaSwag-shaped task (``story_ending``: 200
stories, four endings each, 800 ``loglikelihood`` requests). Rows (medians over interleaved
repetitions, after one warm-up that compiles):

  * the adapter (``LevanterLM.loglikelihood``: tokenizing as lm-eval's HF model does, packing,
    scoring, reading back, summing) in requests/s and scored tokens/s;
  * a bare jitted forward pass (logits only) over the very same packed batches, already on the
    device: the ceiling; adapter / bare throughput, goal >= 0.8;
  * the share of the batches' token slots that held padding, goal <= 15%;
  * the whole harness run of the task (building requests, the adapter, metrics), for scale.
"""

from __future__ import annotations

import logging
import os
import statistics
import tempfile
import time

import jax
import jax.numpy as jnp

from levanter.eval_harness import HarnessConfig, LevanterLM, TaskRunConfig, load_tasks, run_tasks
from levanter.eval_harness.packing import plan_rows
from levanter.models.llama import LlamaConfig, transformed_llama
from marin.experiment.data.corpus import generate_corpus
from marin.experiment.data.tokenizer import train_bpe_tokenizer
from marin.experiment.tasks.story import StoryTask, StoryTasksConfig, write_story_tasks

REPS = 3
VOCAB = 2048
MODEL = LlamaConfig(vocab_size=VOCAB, hidden_dim=128, intermediate_dim=512, num_heads=4, num_kv_heads=2,
                    num_layers=4, max_seq_len=512)
HARNESS = HarnessConfig(batch_size=8, seq_len=512)
TASK = StoryTask.ENDING


def _bare_forward(params, batches: list[tuple[jax.Array, jax.Array]]) -> float:
    """Seconds for a jitted forward pass (logits) over every batch, inputs already on the device."""
    model = transformed_llama(MODEL)
    forward = jax.jit(lambda p, t, s: model.apply(p, None, t, segment_ids=s))
    forward(params, *batches[0]).block_until_ready()
    start = time.perf_counter()
    outs = [forward(params, tokens, segments) for tokens, segments in batches]
    jax.block_until_ready(outs)
    return time.perf_counter() - start


def main() -> dict[str, float]:
    """Run the benchmark and return the medians (also printed as a table)."""
    logging.getLogger("absl").setLevel(logging.ERROR)
    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    os.environ.setdefault("TQDM_DISABLE", "1")
    tmp = tempfile.mkdtemp(prefix="bench-eval-harness-")
    generate_corpus(os.path.join(tmp, "corpus"), num_stories=2000, num_shards=1)
    tokenizer_json = open(train_bpe_tokenizer(os.path.join(tmp, "corpus"), os.path.join(tmp, "tok"),
                                              vocab_size=VOCAB)).read()
    yaml_path = write_story_tasks(os.path.join(tmp, "tasks"), StoryTasksConfig(tasks=(TASK,)))[TASK.value]
    _, [task] = load_tasks([yaml_path])
    task.build_all_requests()
    requests = task.instances

    params = transformed_llama(MODEL).init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))
    lm = LevanterLM(MODEL, params, tokenizer_json, HARNESS)
    lm.loglikelihood(requests)  # compiles
    stats = lm.pack_stats["loglikelihood"]
    # The same packed batches the adapter ran, rebuilt from the same tokens, placed before timing.
    pairs = [lm._encode_pair(*r.args) for r in requests]
    inputs = [(c + x)[-(HARNESS.seq_len + 1):][:-1] for c, x in pairs]
    layout = plan_rows([len(i) for i in inputs], HARNESS.seq_len, HARNESS.batch_size)
    tokens, segments = layout.scatter(inputs), layout.segment_ids()
    batches = [(jnp.asarray(tokens[layout.rows_of(b)]), jnp.asarray(segments[layout.rows_of(b)]))
               for b in range(layout.num_batches)]
    scored_tokens = int(layout.length.sum())

    adapter_s, bare_s = [], []
    for _ in range(REPS):
        start = time.perf_counter()
        lm.loglikelihood(requests)
        adapter_s.append(time.perf_counter() - start)
        bare_s.append(_bare_forward(lm._model.params, batches))
    start = time.perf_counter()
    run_tasks(lm, TaskRunConfig(tasks=(yaml_path,)))
    harness_s = time.perf_counter() - start

    med = statistics.median
    res = {
        "requests": len(requests),
        "adapter_requests_per_s": len(requests) / med(adapter_s),
        "adapter_tokens_per_s": scored_tokens / med(adapter_s),
        "bare_tokens_per_s": scored_tokens / med(bare_s),
        "adapter_over_bare": med(bare_s) / med(adapter_s),
        "pad_fraction": stats.pad_fraction,
        "batches": stats.batches,
        "harness_run_s": harness_s,
    }
    lines = [
        f"harness adapter benchmark on {jax.devices()[0].device_kind} x{jax.device_count()}: {TASK.value}, "
        f"{len(requests)} loglikelihood requests, {scored_tokens:,} tokens, {stats.batches} batches of "
        f"{HARNESS.batch_size}x{HARNESS.seq_len}, {MODEL.num_params():,} params, {REPS} interleaved reps",
        f"{'measure':<44}{'value':>14}{'goal':>12}",
        f"{'adapter requests/s (median)':<44}{res['adapter_requests_per_s']:>14,.0f}{'':>12}",
        f"{'adapter scored tokens/s (median)':<44}{res['adapter_tokens_per_s']:>14,.0f}{'':>12}",
        f"{'bare jitted forward tokens/s (median)':<44}{res['bare_tokens_per_s']:>14,.0f}{'':>12}",
        f"{'  adapter / bare throughput':<44}{res['adapter_over_bare']:>14.3f}{'>= 0.8':>12}",
        f"{'pad fraction of the batches':<44}{res['pad_fraction']:>14.2%}{'<= 15%':>12}",
        f"{'whole harness run of the task':<44}{harness_s:>13.2f}s{'':>12}",
    ]
    print("\n".join(lines))
    return res


if __name__ == "__main__":
    main()
