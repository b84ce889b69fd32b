"""The OpenAI-compatible routes: ``/v1/models``, ``/v1/completions``, ``/v1/chat/completions``
(streamed as server-sent events when asked), and ``/health`` (requests in flight, taken, cancelled).

Every choice of every request is one request to the decoder (:class:`~marin.serve.engine_loop.EngineLoop`),
batched with everything else in flight. Choice ``k`` of prompt ``p`` draws with seed
``completion_seed(seed, p, k)``: the rule of ``generations(...)`` steps, so a request with a ``seed``
gets what a generations step with that seed writes. Without a ``seed`` each request draws a fresh one.

Log-probabilities come in OpenAI's two shapes: ``/v1/completions`` with ``logprobs: n`` gives
``{tokens, token_logprobs, top_logprobs, text_offset}``, each ``top_logprobs`` entry the ``n``
likeliest tokens' text and log-probability plus the chosen token's (``null`` for ``n`` = 0);
``/v1/chat/completions`` with ``logprobs: true`` (and ``top_logprobs: n``) gives ``content``, one
``{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}`` per token. The decoder selects
the alternatives on the device (:mod:`levanter.inference.engine`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from levanter.inference.sampling import SamplingParams
from marin.experiment.generation.model import GenerationModel
from marin.experiment.generation.steps import completion_seed
from marin.serve.api import ApiError, ChatRequest, CompletionRequest, parse_body
from marin.serve.engine_loop import FAILED, EngineLoop, Progress

__all__ = ["create_app"]


@dataclasses.dataclass
class _Job:
    """One HTTP request's decoder requests: ``(prompt index, sampling)`` per choice, and the
    alternatives each keeps at a token (``top``)."""

    prompts: list[list[int]]
    choices: list[tuple[int, SamplingParams]]
    top: int = 0


class _Server:
    def __init__(self, model: GenerationModel, engine: EngineLoop, name: str, api_key: str | None):
        self.model, self.engine, self.name, self.api_key = model, engine, name, api_key
        self.created = int(time.time())

    # ---- requests ------------------------------------------------------------------------------
    def authorize(self, request: Request) -> None:
        if self.api_key is not None and request.headers.get("authorization") != f"Bearer {self.api_key}":
            raise ApiError("invalid or missing API key (Authorization: Bearer <key>)", code="invalid_api_key",
                           status=401)

    def job(self, body: Any, prompts: list[list[int]], chat: bool) -> _Job:
        if body.model != self.name:
            raise ApiError(f"model {body.model!r} is not served here (this server serves {self.name!r})",
                           param="model", code="model_not_found")
        room, most = self.engine.engine.max_len, self.engine.engine.top_logprobs
        top = body.top_count()
        if top > most:
            raise ApiError(f"{'top_logprobs' if chat else 'logprobs'}={top} exceeds the {most} alternatives this "
                           "server keeps", param="top_logprobs" if chat else "logprobs")
        stops = body.stop_strings()
        base = secrets.randbits(32) if body.seed is None else body.seed
        choices = []
        for p, ids in enumerate(prompts):
            if len(ids) >= room:
                raise ApiError(f"the prompt's {len(ids)} tokens leave no room in the context of {room} tokens",
                               param="messages" if chat else "prompt", code="context_length_exceeded")
            max_tokens = body.max_tokens or (room - len(ids) if chat else 16)
            for k in range(body.n):
                sampling = SamplingParams(max_tokens=max_tokens, temperature=body.temperature, top_p=body.top_p,
                                          seed=completion_seed(base, p, k), stop_token_ids=self.model.end_ids,
                                          stop=stops)
                try:
                    self.engine.check(ids, sampling, top)
                except ValueError as e:
                    raise ApiError(str(e), param="max_tokens", code="context_length_exceeded") from None
                choices.append((p, sampling))
        return _Job(prompts, choices, top)

    def completion_prompts(self, body: CompletionRequest) -> list[list[int]]:
        vocab = self.model.config.vocab_size
        out = []
        for prompt in body.prompts():
            ids = self.model.encode(prompt) if isinstance(prompt, str) else prompt
            if not ids or any(not 0 <= t < vocab for t in ids):
                raise ApiError(f"a prompt must hold at least one token, each in [0, {vocab})", param="prompt")
            out.append(ids)
        return out

    def chat_prompt(self, body: ChatRequest) -> list[list[int]]:
        from marin.experiment.chat import Message, Role
        from marin.experiment.chat.template import TemplateError

        if self.model.chat_template is None:
            raise ApiError(f"{self.name} has no chat template (fine-tune it on tokenized_chat data); use "
                           "/v1/completions", param="messages")
        try:
            text = self.model.chat_template.render([Message(Role(m.role), m.content) for m in body.messages],
                                                   add_generation_prompt=True)
        except TemplateError as e:
            raise ApiError(f"messages: {e}", param="messages") from None
        return [self.model.encode(text)]

    # ---- answers -------------------------------------------------------------------------------
    def visible(self, progress: Progress) -> tuple[list[int], list[float], list[Any], str]:
        """The tokens, log-probs, alternatives and text a client sees: the end token left out."""
        ids, logprobs, tops = list(progress.token_ids), list(progress.logprobs), list(progress.top_logprobs)
        if progress.finish_reason == "stop" and ids and ids[-1] in self.model.end_ids:
            return ids[:-1], logprobs[:-1], tops[:len(ids) - 1], self.model.decode(ids[:-1])
        return ids, logprobs, tops, progress.text

    def logprobs(self, ids: list[int], values: list[float], tops: list[Any] | None, chat: bool,
                 offset: int = 0) -> dict[str, Any]:
        """OpenAI's ``logprobs`` of these tokens (``tops``: their alternatives, None when not asked)."""
        tokens = [self.model.decode([t]) for t in ids]
        alternatives: list[Any] = tops if tops is not None else [[]] * len(ids)
        if chat:
            return {"content": [_token_entry(t, v) | {"top_logprobs": [_token_entry(self.model.decode([a]), lp)
                                                                        for a, lp in top]}
                                for t, v, top in zip(tokens, values, alternatives, strict=True)]}
        offsets, at = [], offset
        for t in tokens:
            offsets.append(at)
            at += len(t)
        top_logprobs = None if tops is None else [
            _top_entry([(self.model.decode([a]), lp) for a, lp in top], (t, v))
            for t, v, top in zip(tokens, values, tops, strict=True)]
        return {"tokens": tokens, "token_logprobs": values, "top_logprobs": top_logprobs, "text_offset": offsets}

    def header(self, chat: bool, stream: bool) -> dict[str, Any]:
        kind = ("chat.completion.chunk" if stream else "chat.completion") if chat else "text_completion"
        return {"id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}", "object": kind,
                "created": int(time.time()), "model": self.name}

    def start(self, job: _Job) -> tuple[list[Any], asyncio.Queue[tuple[int, Progress]]]:
        """Submit every choice of ``job``; raises ApiError (503) when the decoder takes no more."""
        queue: asyncio.Queue[tuple[int, Progress]] = asyncio.Queue()
        requests: list[Any] = []
        try:
            for i, (p, sampling) in enumerate(job.choices):
                requests.append(self.engine.submit(job.prompts[p], sampling, queue, i, top_logprobs=job.top))
        except RuntimeError as e:  # shutting down, or the decoder failed
            for request in requests:
                self.engine.cancel(request)
            raise ApiError(str(e), kind="server_error", status=503) from None
        return requests, queue

    async def run(self, job: _Job, wants_logprobs: bool, chat: bool) -> dict[str, Any]:
        requests, queue = self.start(job)
        final: dict[int, Progress] = {}
        try:
            while len(final) < len(requests):
                tag, progress = await queue.get()
                if progress.finish_reason is not None:
                    final[tag] = progress
        finally:
            for i, request in enumerate(requests):
                if i not in final:
                    self.engine.cancel(request)
        if any(p.finish_reason == FAILED for p in final.values()):
            raise ApiError("the decoder failed (see the server's log)", kind="server_error", status=500)
        choices = []
        for i in range(len(requests)):
            ids, values, tops, text = self.visible(final[i])
            choice: dict[str, Any] = {"index": i, "finish_reason": final[i].finish_reason, "logprobs": (
                self.logprobs(ids, values, tops if job.top else None, chat) if wants_logprobs else None)}
            choice.update({"message": {"role": "assistant", "content": text}} if chat else {"text": text})
            choices.append(choice)
        completion_tokens = sum(len(p.token_ids) for p in final.values())
        prompt_tokens = sum(len(ids) for ids in job.prompts)
        return {**self.header(chat, False), "choices": choices,
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_tokens + completion_tokens}}

    async def stream(self, job: _Job, started: tuple[list[Any], asyncio.Queue[tuple[int, Progress]]], wants_logprobs: bool,
                     chat: bool, request: Request) -> AsyncIterator[bytes]:
        from marin.serve.streaming import held_back

        requests, queue = started
        header = self.header(chat, True)
        sent_text, sent_tokens, done = [0] * len(requests), [0] * len(requests), set()
        watcher = asyncio.ensure_future(_until_disconnect(request))
        try:
            if chat:
                for i in range(len(requests)):
                    yield _event({**header, "choices": [{"index": i, "delta": {"role": "assistant", "content": ""},
                                                         "logprobs": None, "finish_reason": None}]})
            while len(done) < len(requests):
                getter = asyncio.ensure_future(queue.get())
                finished, _ = await asyncio.wait({getter, watcher}, return_when=asyncio.FIRST_COMPLETED)
                if watcher in finished:
                    getter.cancel()
                    return
                i, progress = getter.result()
                if progress.finish_reason == FAILED:
                    done.update(range(len(requests)))
                    yield _event(ApiError("the decoder failed (see the server's log)", kind="server_error",
                                          status=500).body())
                    return
                ids, values, tops, text = self.visible(progress)
                end = len(text) if progress.finish_reason else held_back(text, job.choices[i][1].stop)
                delta, new_ids = text[sent_text[i]:end], ids[sent_tokens[i]:]
                if not delta and not new_ids and progress.finish_reason is None:
                    continue
                new_tops = tops[sent_tokens[i]:] if job.top else None
                choice: dict[str, Any] = {"index": i, "finish_reason": progress.finish_reason, "logprobs": (
                    self.logprobs(new_ids, values[sent_tokens[i]:], new_tops, chat, sent_text[i])
                    if wants_logprobs else None)}
                choice.update({"delta": {"content": delta}} if chat else {"text": delta})
                sent_text[i], sent_tokens[i] = max(end, sent_text[i]), len(ids)
                if progress.finish_reason is not None:
                    done.add(i)
                yield _event({**header, "choices": [choice]})
            yield b"data: [DONE]\n\n"
        finally:
            watcher.cancel()
            for i, r in enumerate(requests):
                if i not in done:
                    self.engine.cancel(r)  # the client went away: free its slots


async def _until_disconnect(request: Request) -> None:
    """Return when the client closes the connection (the body is already read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _token_entry(token: str, logprob: float) -> dict[str, Any]:
    """A token of a chat answer's ``logprobs.content`` (and of its ``top_logprobs``)."""
    return {"token": token, "logprob": logprob, "bytes": list(token.encode())}


def _top_entry(alternatives: list[tuple[str, float]], chosen: tuple[str, float]) -> dict[str, float]:
    """A ``top_logprobs`` entry of a completion: text -> log-probability of the alternatives,
    likeliest first (of two with one text, the likelier kept), then the chosen token's when it is not
    among them (up to n + 1 entries, as OpenAI's)."""
    entry: dict[str, float] = {}
    for text, logprob in [*alternatives, chosen]:
        entry.setdefault(text, logprob)
    return entry


def _event(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data, ensure_ascii=False).encode() + b"\n\n"


def create_app(model: GenerationModel, engine: EngineLoop, *, name: str, api_key: str | None = None) -> FastAPI:
    """The ASGI app serving ``model`` (as ``name``) through ``engine`` (a started :class:`EngineLoop`)."""
    server = _Server(model, engine, name, api_key)
    app = FastAPI(title="marin serve", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(ApiError)
    async def refused(_request: Request, error: ApiError) -> Response:
        return JSONResponse(error.body(), status_code=error.status)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"in_flight": engine.in_flight, "submitted": engine.submitted, "cancelled": engine.cancelled}

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        server.authorize(request)
        return {"object": "list", "data": [{"id": name, "object": "model", "created": server.created,
                                             "owned_by": "marin", "max_model_len": engine.engine.max_len}]}

    async def answer(request: Request, chat: bool) -> Response:
        server.authorize(request)
        body = parse_body(await request.body(), ChatRequest if chat else CompletionRequest)
        prompts = server.chat_prompt(body) if chat else server.completion_prompts(body)
        job = server.job(body, prompts, chat)
        wants_logprobs = bool(body.logprobs) if chat else body.logprobs is not None
        if body.stream:
            return StreamingResponse(server.stream(job, server.start(job), wants_logprobs, chat, request),
                                     media_type="text/event-stream")
        return JSONResponse(await server.run(job, wants_logprobs, chat))

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await answer(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await answer(request, chat=True)

    return app
