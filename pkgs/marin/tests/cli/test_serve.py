"""``marin serve``: the tiny model (exported to a Hugging Face folder, its context widened to 256 so a long
completion can be cut short, a ChatML-style template in its ``tokenizer_config.json``) behind the OpenAI
API, answered by the official ``openai`` client, by ``curl``, and by 64 concurrent streaming clients;
chats rendered with the folder's own template as ``transformers`` renders it; log-probabilities with
the likeliest alternatives equal to a direct forward pass's; bad requests get OpenAI's 400 and the
server keeps serving; a client gone mid-stream frees its slot; a broken template is named at start; a
training step served by its name, behind an API key, ends cleanly on Ctrl-C; a decoder failure
answers what is in flight."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
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
# A template in the style of the Hub's ChatML models (written for this test): the tokenizer's
# bos_token first, a default system turn, indented blocks that trim_blocks/lstrip_blocks flatten,
# and a refusal through raise_exception.
HF_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] != 'system' %}
<|im_start|>system
You are a helpful assistant.<|im_end|>
{% endif %}
{% for message in messages %}
    {% if loop.first and message['role'] == 'assistant' %}
        {{ raise_exception('Conversations must start with a user or system turn.') }}
    {% endif %}
<|im_start|>{{ message['role'] }}
{{ message['content'] | trim }}<|im_end|>
{% endfor %}
{% if add_generation_prompt %}
<|im_start|>assistant
{% endif %}"""


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
    # The project's template too: the folder's own (Hugging Face's) one comes first.
    (folder / TEMPLATE_FILE).write_text(template_to_json(DEFAULT_CHAT_TEMPLATE))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|endoftext|>",
        "eos_token": {"__type": "AddedToken", "content": "<|endoftext|>", "special": True}, "chat_template": HF_TEMPLATE}))
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
        # Few enough tokens to finish well inside the server's 10 s graceful shutdown on a loaded machine.
        stream = client.completions.create(model=NAME, prompt="Once", max_tokens=24, temperature=1.0, stream=True)
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
    # Jitted: one program, not one per operation of the initialisation.
    params = jax.jit(wrong.build().init)(jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32))
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


def test_chat_renders_the_folders_own_template_as_transformers_does(server: Server, folder: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    reference = PreTrainedTokenizerFast.from_pretrained(str(folder))
    messages: list[Any] = [{"role": "user", "content": "Who is Tom? "}]
    rendered = reference.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered.startswith("<|endoftext|><|im_start|>system\nYou are") and rendered.endswith("assistant\n")
    client = server.client()
    chat = client.chat.completions.create(model=NAME, messages=messages, max_tokens=8, temperature=0)
    plain = client.completions.create(model=NAME, prompt=rendered, max_tokens=8, temperature=0)
    assert chat.usage.prompt_tokens == len(reference(rendered, add_special_tokens=False).input_ids)
    assert chat.choices[0].message.content == plain.choices[0].text
    with pytest.raises(openai.BadRequestError) as caught:  # the template's own refusal
        client.chat.completions.create(model=NAME, messages=[{"role": "assistant", "content": "Hi"}], max_tokens=2)
    assert "must start with a user or system turn" in caught.value.message


def test_a_broken_template_is_named_when_the_server_starts(folder: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from marin.cli.main import cli

    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    config = json.loads((broken / "tokenizer_config.json").read_text())
    (broken / "tokenizer_config.json").write_text(json.dumps(config | {"chat_template": "{% for m in messages %}"}))
    # On a port already taken: a command that did not check the template at start would end at
    # listening (another one-line error) rather than serve in this process for ever.
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = str(taken.getsockname()[1])
        result = CliRunner().invoke(cli, ["serve", str(broken), "--cpu", "--port", port])
    assert result.exit_code == 2, result.output
    first = result.output.strip().splitlines()[0]
    assert str(broken / "tokenizer_config.json") in first and "chat template line 1" in first, result.output
    assert "Traceback" not in result.output


def _forward_top(folder: Path, prompt: str, count: int, n: int) -> tuple[list[str], list[dict[str, float]]]:
    """The greedy continuation's tokens and each position's ``n`` likeliest (text -> log-probability),
    from the model's logits over the whole sequence on the CPU, apart from the decoder."""
    import jax
    import jax.numpy as jnp

    from levanter.generate import generate_by_recompute
    from marin.experiment.generation.model import load_generation_model

    loaded = load_generation_model(str(folder))
    prompt_ids = loaded.encode(prompt)
    ids = generate_by_recompute(loaded.config, loaded.params, prompt_ids, max_new_tokens=count)
    model = loaded.config.build()
    hidden = model.hidden(loaded.params, jnp.asarray([prompt_ids + ids]))[0]
    logp = np.asarray(jax.nn.log_softmax(jnp.dot(hidden, model.head(loaded.params)), axis=-1))
    tops = []
    for i in range(len(ids)):
        row = logp[len(prompt_ids) - 1 + i]
        top: dict[str, float] = {}
        for t in np.argsort(-row, kind="stable")[:n]:
            top.setdefault(loaded.decode([int(t)]), float(row[t]))
        tops.append(top)
    return [loaded.decode([t]) for t in ids], tops


def test_top_logprobs_are_the_models_likeliest_tokens(server: Server, folder: Path) -> None:
    client = server.client()
    tokens, tops = _forward_top(folder, "Once upon a time", 6, 3)
    got = client.completions.create(model=NAME, prompt="Once upon a time", max_tokens=6, temperature=0, logprobs=3)
    lp = got.choices[0].logprobs
    assert lp is not None and lp.tokens and lp.token_logprobs is not None and lp.top_logprobs is not None
    assert lp.tokens == tokens[:len(lp.tokens)]
    for chosen, value, top, expected in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, tops, strict=False):
        assert list(top) == list(expected)  # greedy: the chosen token is the likeliest, so among the three
        np.testing.assert_allclose(list(top.values()), list(expected.values()), rtol=1e-4, atol=1e-5)
        assert list(top)[0] == chosen and top[chosen] == value
    messages: list[Any] = [{"role": "user", "content": "Tell me a story."}]
    chat = client.chat.completions.create(model=NAME, messages=messages, max_tokens=6, temperature=0, logprobs=True,
                                          top_logprobs=4)
    assert chat.choices[0].logprobs is not None and chat.choices[0].logprobs.content is not None
    content = chat.choices[0].logprobs.content
    assert "".join(t.token for t in content) == chat.choices[0].message.content
    for entry in content:
        assert len(entry.top_logprobs) == 4 and entry.top_logprobs[0].token == entry.token
        assert entry.top_logprobs[0].logprob == entry.logprob and entry.bytes == list(entry.token.encode())
        assert [t.logprob for t in entry.top_logprobs] == sorted((t.logprob for t in entry.top_logprobs), reverse=True)
    # Streamed, the same tokens and alternatives arrive in the chunks.
    chunks = list(client.chat.completions.create(model=NAME, messages=messages, max_tokens=6, temperature=0,
                                                 logprobs=True, top_logprobs=4, stream=True))
    streamed = [e for c in chunks for e in (c.choices[0].logprobs and c.choices[0].logprobs.content) or []]
    assert [(e.token, [t.token for t in e.top_logprobs]) for e in streamed] == \
        [(e.token, [t.token for t in e.top_logprobs]) for e in content]
    # A sampled token outside the top one still has its own log-probability beside it.
    drawn = client.completions.create(model=NAME, prompt="The dog", max_tokens=8, temperature=1.0, seed=3, logprobs=1)
    lp = drawn.choices[0].logprobs
    assert lp is not None and lp.tokens and lp.token_logprobs is not None and lp.top_logprobs is not None
    for chosen, value, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert top[chosen] == value and 1 <= len(top) <= 2


def test_logprobs_up_to_20_and_a_400_past_them(server: Server) -> None:
    client = server.client()
    most = client.completions.create(model=NAME, prompt="hi", max_tokens=2, temperature=0, logprobs=20)
    assert most.choices[0].logprobs is not None and most.choices[0].logprobs.top_logprobs is not None
    # Up to 20 texts (two tokens of one text are one entry) and the chosen token's, were it not among them.
    assert all(0 < len(top) <= 21 for top in most.choices[0].logprobs.top_logprobs)
    chat = client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                          temperature=0, logprobs=True, top_logprobs=20)
    assert chat.choices[0].logprobs is not None and chat.choices[0].logprobs.content
    assert all(len(t.top_logprobs) == 20 for t in chat.choices[0].logprobs.content)
    bad: list[tuple[str, dict[str, Any], str]] = [
        ("/completions", {"logprobs": 21}, "logprobs"), ("/completions", {"logprobs": -1}, "logprobs"),
        ("/completions", {"logprobs": "3"}, "logprobs"), ("/completions", {"logprobs": True}, "logprobs"),
        ("/chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ("/chat/completions", {"logprobs": True, "top_logprobs": -2}, "top_logprobs"),
        ("/chat/completions", {"logprobs": True, "top_logprobs": 2.5}, "top_logprobs"),
        ("/chat/completions", {"top_logprobs": 2}, "top_logprobs=2 needs logprobs: true"),
        ("/chat/completions", {"logprobs": 1}, "logprobs")]
    for route, fields, message in bad:
        body: dict[str, Any] = {"model": NAME, "max_tokens": 2, **fields}
        body.update({"messages": [{"role": "user", "content": "hi"}]} if route.startswith("/chat") else {"prompt": "hi"})
        with pytest.raises(openai.BadRequestError) as caught:
            client.post(route, cast_to=object, body=body)
        assert caught.value.status_code == 400 and message in caught.value.message, (fields, caught.value.message)
        param = message.split("=")[0].split(" ")[0]
        assert isinstance(caught.value.body, dict) and caught.value.body["param"] == param, caught.value.body
