"""The decoder's host side: requests wait for a free slot, are prefilled into it, and then advance
with every other busy slot, ``steps_per_sync`` tokens per trip to the device (continuous batching:
a request that arrives while others decode joins at the next trip, a finished one frees its slot).

Stop tokens end a slot on the device; stop strings are found here, in the text decoded so far.
One thread runs :meth:`Engine.step`; :meth:`Engine.submit` and :meth:`Engine.cancel` may be called
from others (a server's) meanwhile.

A request may ask for the most likely alternatives at each of its tokens (``top_logprobs``, at most
the engine's own number): the device selects the engine's number for every slot in the steps where
a request in flight asks (one program, whatever each asks), and each request keeps its own first few.
"""

from __future__ import annotations

import dataclasses
import itertools
import queue
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from levanter.inference.device import Slots, decode_steps, empty_slots, prefill
from levanter.inference.sampling import MAX_STOP_IDS, SamplingParams

__all__ = ["Completion", "Engine", "FinishReason", "Request"]

FinishReason = str
"""``"stop"`` (a stop token or string), ``"length"`` (``max_tokens``) or ``"cancelled"``."""

_MIN_BUCKET = 16


@dataclasses.dataclass
class Completion:
    """What a request produced so far (final once ``finish_reason`` is set)."""

    prompt_ids: list[int]
    token_ids: list[int] = dataclasses.field(default_factory=list)
    """The new tokens (a stop token kept; tokens after a stop string's start dropped)."""
    logprobs: list[float] = dataclasses.field(default_factory=list)
    """Each new token's log-probability under the model (before temperature, top-k and top-p)."""
    top_logprobs: list[list[tuple[int, float]]] = dataclasses.field(default_factory=list)
    """At each new token, the request's ``top_logprobs`` most likely tokens there and their
    log-probabilities (as :attr:`logprobs`), likeliest first; empty when it asked for none."""
    text: str | None = None
    """The new tokens decoded (without a stop string or a final stop token), when the engine has a tokenizer."""
    finish_reason: FinishReason | None = None


@dataclasses.dataclass
class Request:
    """One prompt in the engine; ``listener(completion, new_tokens)`` is called (on the engine's
    thread) each time tokens arrive and once when it finishes."""

    prompt_ids: list[int]
    sampling: SamplingParams
    listener: Callable[[Completion, int], None] | None = None
    id: int = 0
    top_logprobs: int = 0
    """Alternatives kept at each new token (:attr:`Completion.top_logprobs`)."""
    cancelled: bool = False
    """Set by :meth:`Engine.cancel` (from any thread); the engine ends the request at its next step."""
    completion: Completion = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.completion = Completion(list(self.prompt_ids))


class Engine:
    """A model's decoder with ``slots`` rows of up to ``max_len`` positions each (the tokens in
    flight are bounded by ``slots * max_len``).

    Args:
        model: the built model (``config.build(compute_dtype)``): ``cached_hidden``, ``empty_cache``, ``head``.
        params: its parameters (stacked layout).
        slots: requests decoded at once.
        max_len: positions per slot (prompt and new tokens); at most the model's context.
        steps_per_sync: tokens made per trip to the device (a new request waits at most this many).
        decode_text: ids -> text, for stop strings and :attr:`Completion.text`.
        top_logprobs: the most alternatives a request may ask for at each token (0: none; a
            static size of the device's programs, so one number for the engine's life).
    """

    def __init__(self, model: Any, params: Any, *, slots: int = 8, max_len: int = 512, steps_per_sync: int = 16,
                 decode_text: Callable[[Sequence[int]], str] | None = None, top_logprobs: int = 0):
        context = model.config.max_seq_len
        if not 1 <= slots:
            raise ValueError(f"slots must be >= 1, got {slots}")
        if not 2 <= max_len <= context:
            raise ValueError(f"max_len must be in [2, {context}] (the model's context), got {max_len}")
        if steps_per_sync < 1:
            raise ValueError(f"steps_per_sync must be >= 1, got {steps_per_sync}")
        if not 0 <= top_logprobs <= model.config.vocab_size:
            raise ValueError(f"top_logprobs must be in [0, {model.config.vocab_size}] (the vocabulary), "
                             f"got {top_logprobs}")
        # Cast once to the compute dtype, as the model's getter would at every read: the same values,
        # and a decode step reads half the bytes of float32 weights in bfloat16.
        params = jax.tree.map(lambda x: x.astype(model.compute_dtype) if jnp.issubdtype(x.dtype, jnp.floating)
                              else x, params)
        self.model, self.params, self.max_len, self.steps = model, params, max_len, steps_per_sync
        self.decode_text, self.top_logprobs = decode_text, top_logprobs
        self._slots: Slots = empty_slots(model, slots, max_len)
        self._owner: list[Request | None] = [None] * slots
        self._waiting: queue.SimpleQueue[Request] = queue.SimpleQueue()
        self._ids = itertools.count(1)

    # ---- requests -----------------------------------------------------------------------------
    def check(self, prompt_ids: Sequence[int], sampling: SamplingParams, top_logprobs: int = 0) -> None:
        """Raise ``ValueError`` (one line, naming the limit) if the request cannot be served."""
        vocab = self.model.config.vocab_size
        if not prompt_ids:
            raise ValueError("the prompt must hold at least one token")
        if any(not 0 <= int(t) < vocab for t in prompt_ids):
            raise ValueError(f"prompt token ids must be in [0, {vocab})")
        if len(prompt_ids) + sampling.max_tokens > self.max_len:
            raise ValueError(f"the prompt's {len(prompt_ids)} tokens and max_tokens={sampling.max_tokens} exceed "
                             f"the context of {self.max_len} tokens")
        if sampling.stop and self.decode_text is None:
            raise ValueError("stop strings need a tokenizer to decode with")
        if isinstance(top_logprobs, bool) or not 0 <= top_logprobs <= self.top_logprobs:
            raise ValueError(f"top_logprobs must be in [0, {self.top_logprobs}] (this engine's most), "
                             f"got {top_logprobs!r}")

    def submit(self, prompt_ids: Sequence[int], sampling: SamplingParams,
               listener: Callable[[Completion, int], None] | None = None, *, top_logprobs: int = 0) -> Request:
        """Queue a request (checked first, see :meth:`check`); it joins at the next :meth:`step`."""
        self.check(prompt_ids, sampling, top_logprobs)
        request = Request([int(t) for t in prompt_ids], sampling, listener, next(self._ids), top_logprobs)
        self._waiting.put(request)
        return request

    def cancel(self, request: Request) -> None:
        """End ``request`` at the next step (``finish_reason`` "cancelled"), freeing its slot."""
        request.cancelled = True

    @property
    def busy(self) -> bool:
        """Whether a request waits or decodes."""
        return not self._waiting.empty() or any(r is not None for r in self._owner)

    # ---- the loop -----------------------------------------------------------------------------
    def step(self) -> None:
        """Admit waiting requests to free slots, then advance every busy slot by one trip."""
        for i, request in enumerate(self._owner):
            if request is not None and request.cancelled:
                self._finish(i, "cancelled")
        self._admit()
        if not any(r is not None for r in self._owner):
            return
        # A free slot may still be active on the device (its request ended by a stop string or a
        # cancel): it is stopped before the trip.
        free = np.array([r is None for r in self._owner])
        want = np.array([r is not None and r.top_logprobs > 0 for r in self._owner]) if self.top_logprobs else None
        self._slots, tokens, logprobs, top = decode_steps(self.model, self.params, self._slots, self.steps,
                                                          jnp.asarray(free), want, top_n=self.top_logprobs)
        active = np.asarray(self._slots.active)
        tokens, logprobs = np.asarray(tokens), np.asarray(logprobs)
        top_arrays = (np.asarray(top[0]), np.asarray(top[1])) if want is not None and want.any() else None
        for i, request in enumerate(self._owner):
            if request is None:
                continue
            made = tokens[:, i] >= 0
            n = request.top_logprobs
            tops = _pairs(*(a[made, i, :n] for a in top_arrays)) if n and top_arrays is not None else []
            self._extend(i, tokens[made, i].tolist(), logprobs[made, i].tolist(), tops, ended=not active[i])

    def run(self) -> None:
        """Step until no request waits or decodes."""
        while self.busy:
            self.step()

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams | Sequence[SamplingParams], *,
                 top_logprobs: int = 0) -> list[Completion]:
        """Complete every prompt (one ``sampling`` for all, or one each), each keeping ``top_logprobs``
        alternatives per token; in the prompts' order."""
        each = [sampling] * len(prompts) if isinstance(sampling, SamplingParams) else list(sampling)
        if len(each) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(each)} sampling settings")
        for prompt, params in zip(prompts, each, strict=True):
            self.check(prompt, params, top_logprobs)
        requests = [self.submit(prompt, params, top_logprobs=top_logprobs)
                    for prompt, params in zip(prompts, each, strict=True)]
        self.run()
        return [r.completion for r in requests]

    def _admit(self) -> None:
        for i in range(len(self._owner)):
            if self._owner[i] is not None:
                continue
            request = self._next_waiting()
            if request is None:
                return
            self._owner[i] = request
            self._prefill(i, request)

    def _next_waiting(self) -> Request | None:
        while True:
            try:
                request = self._waiting.get_nowait()
            except queue.Empty:
                return None
            if not request.cancelled:
                return request
            request.completion.finish_reason = "cancelled"
            if request.listener is not None:
                request.listener(request.completion, 0)

    def _prefill(self, i: int, request: Request) -> None:
        ids, s = request.prompt_ids, request.sampling
        bucket = min(max(_MIN_BUCKET, 1 << (len(ids) - 1).bit_length()), self.max_len)
        tokens = np.zeros((1, bucket), np.int32)
        tokens[0, :len(ids)] = ids
        stops = np.full(MAX_STOP_IDS, -1, np.int32)
        stops[:len(s.stop_token_ids)] = s.stop_token_ids
        sampling = (jnp.int32(s.max_tokens), jnp.uint32(s.seed), jnp.float32(s.temperature), jnp.int32(s.top_k),
                    jnp.float32(s.top_p), jnp.asarray(stops))
        self._slots, token, logprob, (top_ids, top_values) = prefill(
            self.model, self.params, self._slots, jnp.asarray(tokens), jnp.int32(len(ids)), jnp.int32(i), sampling,
            top_n=self.top_logprobs)
        n = request.top_logprobs
        tops = _pairs(np.asarray(top_ids)[None, :n], np.asarray(top_values)[None, :n]) if n else []
        ended = s.max_tokens <= 1 or int(token) in s.stop_token_ids
        self._extend(i, [int(token)], [float(logprob)], tops, ended=ended)

    def _extend(self, i: int, tokens: list[int], logprobs: list[float], tops: list[list[tuple[int, float]]], *,
                ended: bool) -> None:
        """Append a slot's new tokens (with their alternatives, when asked), look for a stop string,
        and end the request when it is done."""
        request = self._owner[i]
        assert request is not None
        done = request.completion
        done.token_ids += tokens
        done.logprobs += logprobs
        done.top_logprobs += tops
        reason: FinishReason | None = None
        if ended:
            last = done.token_ids[-1] if done.token_ids else None
            reason = "stop" if last in request.sampling.stop_token_ids else "length"
        if self.decode_text is not None:
            ids = done.token_ids
            # A stop token ends the tokens, not the text (as a stop string is left out of it).
            done.text = self.decode_text(ids[:-1] if ids and ids[-1] in request.sampling.stop_token_ids else ids)
            if self._cut_at_stop(request):
                reason = "stop"
        if reason is not None:
            self._finish(i, reason, new=len(tokens))
        elif request.listener is not None:
            request.listener(done, len(tokens))

    def _cut_at_stop(self, request: Request) -> bool:
        done = request.completion
        assert done.text is not None and self.decode_text is not None
        hits = [done.text.find(s) for s in request.sampling.stop]
        hits = [h for h in hits if h >= 0]
        if not hits:
            return False
        cut = min(hits)
        done.text = done.text[:cut]
        # Keep the tokens up to the one whose text reaches the stop string.
        keep = next(n for n in range(1, len(done.token_ids) + 1) if len(self.decode_text(done.token_ids[:n])) > cut)
        done.token_ids, done.logprobs, done.top_logprobs = (done.token_ids[:keep], done.logprobs[:keep],
                                                            done.top_logprobs[:keep])
        return True

    def _finish(self, i: int, reason: FinishReason, new: int = 0) -> None:
        request = self._owner[i]
        assert request is not None
        request.completion.finish_reason = reason
        self._owner[i] = None
        if request.listener is not None:
            request.listener(request.completion, new)


def _pairs(ids: np.ndarray, values: np.ndarray) -> list[list[tuple[int, float]]]:
    """``[(id, log-probability), ...]`` per token of ``[tokens, n]`` arrays."""
    return [list(zip(row_ids, row_values, strict=True)) for row_ids, row_values in zip(ids.tolist(), values.tolist(),
                                                                                          strict=True)]
