"""End-to-end tokenization (read, tokenize, write ArrayRecord) beside bare ``encode_batch``.

Every number comes from this one run, on the bundled corpus (default size) and on one
``SCALE`` times larger, with the same number of cores for both sides:

* bare: all documents already in memory, one ``Tokenizer.encode_batch`` call using every core
  (Rayon threads) on a freshly loaded tokenizer, timed alone: the issue's baseline. Beside it,
  the same with ``encode_batch_fast`` (the same ids without character offsets), which is the
  call the pipeline makes: end to end against it is the pipeline's own overhead.
* end to end: ``tokenize_to_shards`` in a fresh process (as the tokenize step runs) from
  JSON-lines files to train/validation ArrayRecord shards, index and checksums, one shard per
  input file; below 16 MB of input in that process, above it one worker process per core
  (process start-up included).
* as a step: the ``tokenized`` step built by a ``StepRunner`` (in a fresh process, as ``marin
  run``), its ``run`` timed: once forked from a warm worker (``warm_workers=True``, the default),
  once in a fresh interpreter (``warm_workers=False``), side by side.
* each side runs ``REPEATS`` times, interleaved, and the best time of each is reported.
* peak memory: the largest resident set of any tokenizing process (the step's own process, which
  tokenizes a small corpus itself, or a worker), sampled five times a second
  while the run goes. Both corpora have files of the same size, the larger ten times as many, so
  shards are the same size; workers stream documents in batches, and an ArrayRecord writer
  holds only its index of record offsets (about 80 bytes a record) until its shard closes, so
  memory follows the shard size, not the corpus size.

Goal (issue 3): end to end at least 80% of the bare ``encode_batch`` throughput; flat worker memory.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass

SCALE = 10
# The default corpus takes about a second a round, and its timings vary more: more rounds.
REPEATS = {"default": 5, f"x{SCALE}": 2}
# Sampling /proc costs CPU the run needs; five times a second is plenty for a peak.
_SAMPLE_SECONDS = 0.2


@dataclass(frozen=True)
class _Measure:
    """One corpus size measured both ways."""

    label: str
    megabytes: float
    documents: int
    tokens: int
    bare_seconds: float
    bare_fast_seconds: float
    e2e_seconds: float
    warm_seconds: float
    fresh_seconds: float
    worker_peak_rss_mb: float
    workers_seen: int

    @property
    def ratio(self) -> float:
        return self.bare_seconds / self.e2e_seconds

    @property
    def ratio_fast(self) -> float:
        return self.bare_fast_seconds / self.e2e_seconds


class _RssSampler:
    """Samples the resident memory of this process's descendants on a thread."""

    def __init__(self) -> None:
        import psutil

        self._me = psutil.Process()
        self._stop = threading.Event()
        self.peak_bytes = 0
        self.pids: set[int] = set()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        import psutil

        own_cmdline = self._me.cmdline()
        while not self._stop.is_set():
            for child in self._me.children(recursive=True):
                try:
                    # A child caught between fork and exec still counts this process's pages.
                    if child.cmdline() == own_cmdline:
                        continue
                    rss = child.memory_info().rss
                except psutil.Error:
                    continue  # it exited between listing and reading
                self.pids.add(child.pid)
                self.peak_bytes = max(self.peak_bytes, rss)
            time.sleep(_SAMPLE_SECONDS)

    def __enter__(self) -> _RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _load_texts(folder: str) -> list[str]:
    from zephyr import read_documents

    return list(read_documents(folder))


def _bare_once(tokenizer_path: str, texts: list[str], method: str) -> tuple[float, int]:
    from tokenizers import Tokenizer

    # A fresh tokenizer each time: workers start with a cold word cache too.
    tok = Tokenizer.from_file(tokenizer_path)
    start = time.perf_counter()
    encodings = getattr(tok, method)(texts, add_special_tokens=False)
    seconds = time.perf_counter() - start
    return seconds, sum(len(e.ids) for e in encodings)


def _e2e_child(corpus: str, tokenizer_path: str, out: str, cores: int) -> None:
    """In a fresh process (as the tokenize step runs): tokenize, print seconds and tokens as JSON."""
    from marin.experiment.data.tokenize import tokenize_to_shards

    start = time.perf_counter()
    summary = tokenize_to_shards(corpus, tokenizer_path, out, max_parallel=cores, validation_fraction=0.01)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "tokens": summary["train_tokens"] + summary["validation_tokens"]}))


def _e2e_once(corpus: str, tokenizer_path: str, out: str, cores: int) -> tuple[float, int, _RssSampler]:
    import subprocess
    import sys

    # The step's own process is measured too: small corpora are tokenized in it, not in workers.
    # As a user's shell runs it: bytecode caching on (some sandboxes turn it off).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with _RssSampler() as sampler:
        done = subprocess.run([sys.executable, "-m", "benchmarks.bench_tokenize", "--e2e", corpus, tokenizer_path,
                               out, str(cores)], capture_output=True, text=True, check=True, env=env)
    shutil.rmtree(out)  # else the next repeat would find every shard committed
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    return facts["seconds"], facts["tokens"], sampler


def _step_child(corpus: str, tokenizer_path: str, prefix: str, warm: bool) -> None:
    """In a fresh process (as ``marin run``): build the tokenize step; print seconds and tokens as JSON."""
    from benchmarks.bench_scale import _Silent
    from marin.execution.core.lazy import lower
    from marin.execution.run.runner import StepRunner
    from marin.experiment.data import tokenized
    from rigging import filesystem as fs

    step = lower(tokenized("bench/tokenized", corpus, tokenizer_path, validation_fraction=0.01))
    runner = StepRunner(prefix=prefix, max_parallel=1, strict_env=False, warm_workers=warm, reporter=_Silent())
    try:
        start = time.perf_counter()
        result = runner.run([step])
        seconds = time.perf_counter() - start
    finally:
        runner.close()
    if not result.ok:
        raise RuntimeError(f"the tokenize step failed: {result.failed[0].error}")
    index = json.loads(fs.read_text(fs.join(result.by_name("bench/tokenized").output_path, "index.json")))
    print(json.dumps({"seconds": seconds, "tokens": sum(s["tokens"] for s in index["splits"].values())}))


def _in_fresh_process(*args: str) -> dict:
    """Run this module with ``args`` in a fresh interpreter; the JSON its last line printed."""
    import subprocess
    import sys

    # As a user's shell runs it: bytecode caching on (some sandboxes turn it off).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run([sys.executable, "-m", "benchmarks.bench_tokenize", *args], capture_output=True, text=True,
                          env=env)
    if done.returncode != 0:
        raise RuntimeError(f"bench_tokenize {args[0]} failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _step_once(corpus: str, tokenizer_path: str, prefix: str, warm: bool) -> tuple[float, int]:
    facts = _in_fresh_process("--step", corpus, tokenizer_path, prefix, "warm" if warm else "fresh")
    shutil.rmtree(prefix)
    return facts["seconds"], facts["tokens"]


def _measure(label: str, corpus: str, tokenizer_path: str, work: str, cores: int) -> _Measure:
    texts = _load_texts(corpus)
    megabytes = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    bare = bare_fast = e2e = warm = fresh = float("inf")
    peak = 0
    workers: set[int] = set()
    # Interleaved repeats, best of each: other load on the machine hits every side alike.
    for r in range(REPEATS[label]):
        seconds, tokens = _bare_once(tokenizer_path, texts, "encode_batch")
        bare = min(bare, seconds)
        seconds, fast_tokens = _bare_once(tokenizer_path, texts, "encode_batch_fast")
        bare_fast = min(bare_fast, seconds)
        if fast_tokens != tokens:
            raise RuntimeError(f"encode_batch_fast made {fast_tokens} tokens, encode_batch {tokens}")
        seconds, written, sampler = _e2e_once(corpus, tokenizer_path, os.path.join(work, f"tokens-{label}"), cores)
        e2e = min(e2e, seconds)
        peak = max(peak, sampler.peak_bytes)
        workers |= sampler.pids
        if written != tokens:
            raise RuntimeError(f"end to end wrote {written} tokens, bare encode_batch made {tokens}")
        # Warm first in odd rounds, fresh first in even ones: neither always follows the bare run.
        for is_warm in (True, False) if r % 2 == 0 else (False, True):
            seconds, written = _step_once(corpus, tokenizer_path, os.path.join(work, f"store-{label}"), is_warm)
            if written != tokens:
                raise RuntimeError(f"the tokenize step wrote {written} tokens, bare encode_batch made {tokens}")
            if is_warm:
                warm = min(warm, seconds)
            else:
                fresh = min(fresh, seconds)
    return _Measure(label, megabytes, len(texts), tokens, bare, bare_fast, e2e, warm, fresh, peak / 2**20,
                    len(workers))


def run(work: str) -> list[_Measure]:
    """Generate both corpora and a tokenizer under ``work``; measure both sizes."""
    from marin.experiment.data.corpus import DEFAULT_NUM_STORIES, generate_corpus
    from marin.experiment.data.tokenizer import train_bpe_tokenizer

    cores = os.cpu_count() or 1
    small = os.path.join(work, "corpus-default")
    large = os.path.join(work, f"corpus-x{SCALE}")
    generate_corpus(small, num_stories=DEFAULT_NUM_STORIES, seed=0, num_shards=8)
    generate_corpus(large, num_stories=DEFAULT_NUM_STORIES * SCALE, seed=1, num_shards=8 * SCALE)
    tokenizer_path = train_bpe_tokenizer(small, os.path.join(work, "tokenizer"), vocab_size=8192)
    return [_measure("default", small, tokenizer_path, work, cores),
            _measure(f"x{SCALE}", large, tokenizer_path, work, cores)]


def main() -> None:
    """Print the side-by-side report (and its JSON on the last line)."""
    cores = os.cpu_count() or 1
    work = tempfile.mkdtemp(prefix="bench-tokenize-")
    try:
        started = time.perf_counter()
        results = run(work)
        total = time.perf_counter() - started
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"tokenize: end to end (read, tokenize, write ArrayRecord) vs bare encode_batch, {cores} cores")
    print("  bare = encode_batch on the texts in memory (the goal's baseline); fast = encode_batch_fast "
          "(same ids, no offsets: the call the pipeline makes)")
    print("  step warm / step fresh = the tokenize step run by StepRunner, forked from a warm worker / in a "
          "fresh interpreter (warm_workers=True / False), against bare")
    print(f"{'corpus':>8} {'MB':>7} {'docs':>8} {'tokens':>10} {'bare MB/s':>10} {'fast MB/s':>10} "
          f"{'e2e MB/s':>9} {'e2e/bare':>8} {'e2e/fast':>8} {'peak RSS':>9} {'step warm':>10} {'step fresh':>10}")
    for m in results:
        print(f"{m.label:>8} {m.megabytes:7.1f} {m.documents:8d} {m.tokens:10d} {m.megabytes / m.bare_seconds:10.2f} "
              f"{m.megabytes / m.bare_fast_seconds:10.2f} {m.megabytes / m.e2e_seconds:9.2f} {m.ratio:8.0%} "
              f"{m.ratio_fast:8.0%} {m.worker_peak_rss_mb:6.0f} MB {m.bare_seconds / m.warm_seconds:10.0%} "
              f"{m.bare_seconds / m.fresh_seconds:10.0%}")
    growth = results[1].worker_peak_rss_mb / results[0].worker_peak_rss_mb
    print(f"peak RSS of any tokenizing process, x{SCALE} corpus / default: {growth:.2f}  (goal: flat); "
          f"e2e/bare goal >= 80%; bench took {total:.0f} s")
    print(json.dumps({"cores": cores, "results": [{**m.__dict__, "ratio": m.ratio, "ratio_fast": m.ratio_fast}
                                                  for m in results], "rss_growth": growth}))


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--e2e"]:
        _e2e_child(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    elif sys.argv[1:2] == ["--step"]:
        _step_child(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] == "warm")
    else:
        main()
