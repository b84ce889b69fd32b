"""``marin serve``: the tiny model (exported to a Hugging Face folder, its context widened to 256 so a long
completion can be cut short) behind the OpenAI API, answered by the official ``openai`` client, by
``curl``, and by 64 concurrent streaming clients; bad requests get OpenAI's 400 and the server keeps
serving; a client gone mid-stream frees its slot; a training step served by its name, behind an API
key, ends cleanly on Ctrl-C; a decoder failure answers what is in flight."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from levanter.compat.hf_checkpoint import save_hf_model
from levanter.generate import load_model
from marin.execution.core.lazy import lower
from marin.experiment.chat.template import DEFAULT_CHAT_TEMPLATE
from marin.experiment.chat.tokenize import TEMPLATE_FILE, template_to_json
from testsupport.lm_graph import tiny_model

CONTEXT = 256
NAME = "tiny"


@dataclasses.dataclass
class Server:
    proc: subprocess.Popen
    url: str
    log: Path

    def client(self, **kwargs: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=kwargs.pop("api_key", "unused"), max_retries=0,
                             timeout=120, **kwargs)

    def health(self) -> dict[str, int]:
        return httpx.get(self.url + "/health", timeout=30).json()


def _folder(trained_prefix: Path, root: Path) -> Path:
    model = lower(tiny_model(steps=10))
    run = trained_prefix / f"{model.name}-{model.hash[:16]}"
    config, params = load_model(str(run))
    folder = root / "tiny-hf"
    folder.mkdir()
    save_hf_model(str(folder), dataclasses.replace(config, max_seq_len=CONTEXT), params)
    shutil.copy(run / "tokenizer.json", folder / "tokenizer.json")
    (folder / TEMPLATE_FILE).write_text(template_to_json(DEFAULT_CHAT_TEMPLATE))
    return folder


def _start(model: Path | str, root: Path, *args: str) -> Server:
    log = root / f"serve-{time.monotonic_ns()}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARIN_")}
    env.update(JAX_PLATFORMS="cpu", MARIN_ACCELERATOR="none")
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "marin.cli.main", "serve", str(model), "--name", NAME,
                                 "--port", "0", "--slots", "8", "--steps-per-sync", "4", *args],
                                stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=root)
    deadline = time.monotonic() + 180
    while "serving" not in log.read_text():
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    line = next(line for line in log.read_text().splitlines() if line.startswith("serving"))
    return Server(proc, line.split(" at ")[1].split("/v1")[0], log)


@pytest.fixture(scope="module")
def folder(trained_prefix: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _folder(trained_prefix, tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def server(folder: Path):
    running = _start(folder, folder.parent)
    yield running
    running.proc.send_signal(signal.SIGINT)
    running.proc.wait(60)


def test_models_completions_chat_and_n_through_the_openai_client(server: Server) -> None:
    client = server.client()
    assert [m.id for m in client.models.list().data] == [NAME]
    greedy = [client.completions.create(model=NAME, prompt="Once upon a time", max_tokens=12, temperature=0)
              for _ in range(2)]
    assert greedy[0].choices[0].text == greedy[1].choices[0].text and greedy[0].choices[0].text
    assert greedy[0].choices[0].finish_reason in ("stop", "length") and greedy[0].usage.completion_tokens <= 12
    drawn = client.completions.create(model=NAME, prompt="Once upon a time", max_tokens=12, temperature=1.0, seed=5,
                                      n=3, logprobs=0)
    assert [c.index for c in drawn.choices] == [0, 1, 2]
    again = client.completions.create(model=NAME, prompt="Once upon a time", max_tokens=12, temperature=1.0, seed=5,
                                      n=3)
    assert [c.text for c in again.choices] == [c.text for c in drawn.choices]  # a seed reproduces every choice
    assert len({c.text for c in drawn.choices}) > 1  # ... and each choice draws with its own
    lp = drawn.choices[0].logprobs
    assert "".join(lp.tokens) == drawn.choices[0].text and all(v <= 0 for v in lp.token_logprobs)
    chat = client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Who is Tom?"}],
                                          max_tokens=10, temperature=0, logprobs=True)
    message = chat.choices[0]
    assert message.message.role == "assistant" and message.finish_reason in ("stop", "length")
    assert "".join(t.token for t in message.logprobs.content) == message.message.content


def test_streams_are_the_same_text_in_chunks(server: Server) -> None:
    client = server.client()
    whole = client.completions.create(model=NAME, prompt="The dog", max_tokens=40, temperature=0.8, seed=9)
    chunks = list(client.completions.create(model=NAME, prompt="The dog", max_tokens=40, temperature=0.8, seed=9,
                                            stream=True))
    assert len(chunks) > 2 and "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    # A stop string cuts the text where it starts (greedy: the text without it is known), streamed or not.
    plain = client.completions.create(model=NAME, prompt="The cat", max_tokens=30, temperature=0).choices[0].text
    stop = plain.strip()[4:7]
    assert len(stop) == 3 and stop in plain, plain
    cut = client.completions.create(model=NAME, prompt="The cat", max_tokens=30, temperature=0, stop=[stop, "@@"])
    assert cut.choices[0].text == plain[:plain.index(stop)] and cut.choices[0].finish_reason == "stop"
    pieces = client.completions.create(model=NAME, prompt="The cat", max_tokens=30, temperature=0, stop=stop,
                                       stream=True)
    assert "".join(c.choices[0].text for c in pieces) == cut.choices[0].text
    messages = [{"role": "user", "content": "Tell me a story."}]
    chat = client.chat.completions.create(model=NAME, messages=messages, max_tokens=20, temperature=0)
    streamed = list(client.chat.completions.create(model=NAME, messages=messages, max_tokens=20, temperature=0,
                                                   stream=True, n=2))
    for i in (0, 1):
        deltas = [c.choices[0].delta.content or "" for c in streamed if c.choices[0].index == i]
        assert "".join(deltas) == chat.choices[0].message.content


def test_each_bad_request_gets_a_400_and_the_server_keeps_serving(server: Server) -> None:
    client = server.client()
    bad: list[tuple[dict[str, Any], str]] = [
        ({"model": "gpt-4", "prompt": "hi"}, "model 'gpt-4' is not served here"),
        ({"model": NAME, "prompt": "word " * 400}, "leave no room in the context of 256"),
        ({"model": NAME, "prompt": "hi", "max_tokens": 500}, "exceed the context of 256"),
        ({"model": NAME, "prompt": "hi", "max_tokens": "5"}, "max_tokens"),
        ({"model": NAME, "prompt": "hi", "temperature": "hot"}, "temperature"),
        ({"model": NAME}, "prompt"),
    ]
    for body, message in bad:
        with pytest.raises(openai.BadRequestError) as caught:
            # The client's own request path: its typed methods would refuse a wrong type before sending.
            client.post("/completions", cast_to=object, body=body)
        assert caught.value.status_code == 400 and message in caught.value.message, (body, caught.value.message)
        assert caught.value.body["type"] == "invalid_request_error"
    raw = httpx.post(server.url + "/v1/chat/completions", content=b'{"model": "tiny", "messages": [', timeout=30,
                     headers={"content-type": "application/json"})
    assert raw.status_code == 400 and "not valid JSON" in raw.json()["error"]["message"]
    assert client.completions.create(model=NAME, prompt="Once", max_tokens=3, temperature=0).choices[0].text


def test_a_client_gone_mid_stream_frees_its_slot(server: Server) -> None:
    before = server.health()["cancelled"]
    body = {"model": NAME, "prompt": "Once", "max_tokens": CONTEXT - 8, "temperature": 1.0, "stream": True}
    with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=60) as response:
        next(response.iter_lines())  # the first chunk came: it decodes
    deadline = time.monotonic() + 60
    while server.health()["in_flight"] or server.health()["cancelled"] == before:
        assert time.monotonic() < deadline, server.health()
        time.sleep(0.05)
    assert server.health()["cancelled"] == before + 1


def test_curl_gets_a_completion_and_a_stream(server: Server) -> None:
    curl = shutil.which("curl")
    assert curl is not None, "curl is not installed (apt-get install -y curl)"
    body = json.dumps({"model": NAME, "prompt": "Once", "max_tokens": 5, "temperature": 0})
    out = subprocess.run([curl, "-sS", server.url + "/v1/completions", "-H", "Content-Type: application/json",
                          "-d", body], capture_output=True, text=True, check=True, timeout=60).stdout
    assert json.loads(out)["choices"][0]["text"]
    stream = json.dumps({"model": NAME, "prompt": "Once", "max_tokens": 5, "temperature": 0, "stream": True})
    events = subprocess.run([curl, "-sSN", server.url + "/v1/completions", "-H", "Content-Type: application/json",
                             "-d", stream], capture_output=True, text=True, check=True, timeout=60).stdout
    data = [line[len("data: "):] for line in events.splitlines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    assert "".join(json.loads(d)["choices"][0]["text"] for d in data[:-1]) == json.loads(out)["choices"][0]["text"]


def test_64_concurrent_streaming_clients_are_all_answered(server: Server) -> None:
    before = server.health()["submitted"]
    client = server.client()

    def one(i: int) -> str | None:
        chunks = list(client.completions.create(model=NAME, prompt=f"Story {i}:", max_tokens=16, temperature=1.0,
                                                seed=i, stream=True))
        return chunks[-1].choices[0].finish_reason

    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        reasons = list(pool.map(one, range(64)))
    assert len(reasons) == 64 and all(r in ("stop", "length") for r in reasons)
    assert server.health()["submitted"] - before == 64


def test_a_step_by_name_an_api_key_and_ctrl_c_finishing_what_is_in_flight(trained_prefix: Path, tmp_path: Path) -> None:
    # The training step by its name under the prefix (its newest build), as `marin run` names it.
    server = _start("checkpoints/tiny", tmp_path, "--api-key", "s3cret", "--prefix", str(trained_prefix))
    try:
        with pytest.raises(openai.AuthenticationError):
            server.client(api_key="wrong").models.list()
        client = server.client(api_key="s3cret")
        assert [m.id for m in client.models.list().data] == [NAME]
        assert client.models.list().data[0].max_model_len == 64  # the tiny model's own context
        stream = client.completions.create(model=NAME, prompt="Once", max_tokens=56, temperature=1.0, stream=True)
        first = next(iter(stream))
        server.proc.send_signal(signal.SIGINT)
        rest = list(stream)
        assert (rest or [first])[-1].choices[0].finish_reason in ("stop", "length")  # finished, not cut
        assert server.proc.wait(60) == 0, server.log.read_text()
        assert "stopped: " in server.log.read_text() and "Traceback" not in server.log.read_text()
    finally:
        if server.proc.poll() is None:
            os.kill(server.proc.pid, signal.SIGKILL)
            server.proc.wait()


def test_a_decoder_failure_answers_every_request_in_flight_with_a_server_error() -> None:
    # The app in this process, on a model whose parameters do not fit its shape: the first decode
    # raises on the engine's thread, and the request waiting on it gets a 500 (streamed: an error
    # event) instead of waiting for ever; later requests get a 503.
    import jax
    import jax.numpy as jnp
    from fastapi.testclient import TestClient
    from tokenizers import Tokenizer, models, pre_tokenizers

    from levanter.models.llama import LlamaConfig
    from marin.experiment.generation.model import GenerationModel
    from marin.serve.app import create_app
    from marin.serve.engine_loop import EngineLoop

    config = LlamaConfig(vocab_size=8, hidden_dim=8, intermediate_dim=16, num_heads=2, num_kv_heads=2, num_layers=1,
                         max_seq_len=16)
    wrong = dataclasses.replace(config, hidden_dim=16, intermediate_dim=32)
    params = wrong.build().init(jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32))
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate("abcdefg") } | {"[UNK]": 7}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    model = GenerationModel("broken", config, params, tokenizer, ())
    engine = EngineLoop(model.engine(slots=2))
    engine.start()
    try:
        with TestClient(create_app(model, engine, name="broken")) as client:
            answer = client.post("/v1/completions", json={"model": "broken", "prompt": "a b c", "max_tokens": 3})
            assert answer.status_code == 500 and answer.json()["error"]["type"] == "server_error", answer.text
            later = client.post("/v1/completions", json={"model": "broken", "prompt": "a b", "max_tokens": 3,
                                                         "stream": True})
            assert later.status_code == 503 and "the decoder failed" in later.json()["error"]["message"]
    finally:
        engine.stop()
