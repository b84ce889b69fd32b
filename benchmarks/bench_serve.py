"""``marin serve`` under load: ``python -m benchmarks.bench_serve``.

A llama_nano-size model (random parameters, a BPE trained on the bundled corpus) exported to a Hugging
Face folder and served by ``marin serve`` in its own process on 127.0.0.1 (CPU unless the host has an
accelerator). One streaming client asks 16 completions one after another; then 64 clients at once ask
2 each (128, bounded), each of up to 64 new tokens at temperature 1 with its own seed (tokens are
counted from the chunks' log-probs). Printed: completion tokens/s for each and the ratio (issue 58's
goal: >= 8x one client's), and that every request was answered (none dropped).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

NEW_TOKENS = 64
CLIENTS = 64


def _folder(root: Path) -> Path:
    import jax
    import jax.numpy as jnp

    from levanter.compat.hf_checkpoint import save_hf_model
    from levanter.models.llama import LlamaConfig
    from marin.experiment.data.corpus import generate_corpus
    from marin.experiment.data.tokenizer import train_bpe_tokenizer

    generate_corpus(str(root / "corpus"), num_stories=500, num_shards=1)
    tokenizer = train_bpe_tokenizer(str(root / "corpus"), str(root / "tok"), vocab_size=1024)
    config = LlamaConfig(vocab_size=1024, hidden_dim=32, intermediate_dim=128, num_heads=2, num_kv_heads=2,
                         num_layers=2, max_seq_len=512)
    params = config.build().init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))
    folder = root / "model"
    folder.mkdir()
    save_hf_model(str(folder), config, params)
    (folder / "tokenizer.json").write_bytes(Path(tokenizer).read_bytes())
    return folder


def _ask(url: str, i: int) -> int:
    """One streamed completion; returns its token count."""
    body = {"model": "bench", "prompt": f"Story {i}: once upon a time", "max_tokens": NEW_TOKENS,
            "temperature": 1.0, "seed": i, "stream": True, "logprobs": 0}
    tokens, finished = 0, False
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=600) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choice = json.loads(line[len("data: "):])["choices"][0]
            tokens += len((choice["logprobs"] or {}).get("tokens", []))
            finished = finished or choice["finish_reason"] is not None
    assert finished, f"request {i} ended without a finish reason"
    return tokens


def main() -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    folder = _folder(root)
    log = root / "serve.log"
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "marin.cli.main", "serve", str(folder), "--name", "bench",
                                 "--port", "0", "--slots", str(CLIENTS), "--steps-per-sync", "8"],
                                stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, "MARIN_ACCELERATOR": "none",
                                                                            "JAX_PLATFORMS": "cpu"})
    try:
        while "serving" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            time.sleep(0.1)
        url = log.read_text().split(" at ", 1)[1].split("/v1", 1)[0]
        _ask(url, 0)  # compiles
        start = time.perf_counter()
        one = sum(_ask(url, i) for i in range(16))
        one_rate = one / (time.perf_counter() - start)
        start = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
            counts = list(pool.map(lambda i: _ask(url, i), range(2 * CLIENTS)))
        many_rate = sum(counts) / (time.perf_counter() - start)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
        shutil.rmtree(root)
    print(f"\nmarin serve, llama_nano-size model on the CPU, streamed completions of {NEW_TOKENS} tokens")
    print(f"  1 client, 16 requests in turn:     {one_rate:8.1f} tokens/s")
    print(f"  {CLIENTS} clients, {2 * CLIENTS} requests at once: {many_rate:8.1f} tokens/s "
          f"({many_rate / one_rate:.1f}x; goal >= 8x); answered {len(counts)}/{2 * CLIENTS}")
    return {"one_client_tokens_per_s": one_rate, "many_clients_tokens_per_s": many_rate,
            "answered": len(counts)}


if __name__ == "__main__":
    main()
