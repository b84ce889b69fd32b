"""A levanter Llama as an lm-evaluation-harness language model (``lm_eval.api.model.TemplateLM``).

Requests are tokenized as the harness's Hugging Face model tokenizes them (``TemplateLM``'s own
``loglikelihood`` and ``_encode_pair``: trailing spaces of a context move to the continuation;
special tokens only where the tokenizer adds them), then packed many to a row of ``seq_len``
tokens, each request its own attention segment with its own positions (``packing``), and scored
a batch of rows at a time (``scoring``). Results come back in the harness's order; the same
requests in the same order give the same numbers, bit for bit.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
from lm_eval.api.model import TemplateLM
from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs, postprocess_generated_text
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from tokenizers import Tokenizer

from levanter.eval_harness.config import HarnessConfig
from levanter.eval_harness.packing import Layout, PackStats, plan_rows
from levanter.eval_harness.scoring import PackedModel
from levanter.inference import Engine, SamplingParams
from levanter.inference.sampling import derived_seed
from levanter.models.llama import LlamaConfig, transformed_llama

__all__ = ["LevanterLM"]

# Batches queued on the device before the oldest is read back: enough to hide the host's work.
_IN_FLIGHT = 3
# Generation comes back to the host (stop strings, requests joining) every this many tokens.
_STOP_CHECK_EVERY = 8


class LevanterLM(TemplateLM):
    """An lm-eval ``LM`` over a levanter Llama: ``loglikelihood``, ``loglikelihood_rolling``, ``generate_until``.

    Args:
        model_config: the model's shape.
        params: its parameters (a Haiku params tree, possibly sharded on ``mesh``).
        tokenizer_json: the text of the model's ``tokenizer.json``.
        config: batch shape, generation default, end token and precision.
        mesh: the ``jax.sharding.Mesh`` to run on (levanter's axes; None: the default device).
        name: how results name the model (``config.model`` of the results file).

    Raises:
        ValueError: the tokenizer has no ``config.eos_token`` or more ids than the model.
    """

    def __init__(self, model_config: LlamaConfig, params: Any, tokenizer_json: str,
                 config: HarnessConfig = HarnessConfig(), *, mesh: Any = None, name: str = "levanter"):
        super().__init__()
        self.harness_config, self.model_config, self.name = config, model_config, name
        self._tokenizer = Tokenizer.from_str(tokenizer_json)
        self._tokenizer_digest = hashlib.sha256(tokenizer_json.encode()).hexdigest()[:16]
        eos = self._tokenizer.token_to_id(config.eos_token)
        if eos is None:
            raise ValueError(f"the tokenizer has no end token {config.eos_token!r}; set HarnessConfig.eos_token "
                             "to one of its special tokens")
        vocab = self._tokenizer.get_vocab_size(with_added_tokens=True)
        if vocab > model_config.vocab_size:
            raise ValueError(f"the tokenizer has {vocab} ids but the model only {model_config.vocab_size}: "
                             "not the model's tokenizer")
        self._eos_id = int(eos)
        self._eos_text = config.eos_token
        self._model = PackedModel(model_config, params, batch_size=config.batch_size, seq_len=config.seq_len,
                                  compute_dtype=config.compute_dtype.jnp, mesh=mesh)
        self._decoder: Engine | None = None
        self.pack_stats: dict[str, PackStats] = {}
        """Packing of every batch scored so far, per request type (``loglikelihood``; generation is not packed)."""

    # ------------------------------------------------------------------ what the harness reads

    @property
    def eot_token_id(self) -> int:
        return self._eos_id

    @property
    def max_length(self) -> int:
        return self.harness_config.seq_len

    @property
    def max_gen_toks(self) -> int:
        return self.harness_config.max_gen_toks

    @property
    def tokenizer_name(self) -> str:
        return f"levanter-tokenizer-{self._tokenizer_digest}"

    def get_model_info(self) -> dict[str, Any]:
        """The model's description, merged into the ``config`` of the harness's results."""
        harness = dataclasses.asdict(self.harness_config)
        harness["compute_dtype"] = self.harness_config.compute_dtype.value
        return {
            "model": self.name,
            "model_config": dataclasses.asdict(self.model_config),
            "model_num_parameters": self.model_config.num_params(),
            "harness": harness,
            "tokenizer": {"sha256_prefix": self._tokenizer_digest, "eot_token_id": self._eos_id,
                          "vocab_size": self._tokenizer.get_vocab_size(with_added_tokens=True)},
            "pack_stats": {kind: stats.to_json() for kind, stats in sorted(self.pack_stats.items())},
        }

    # ------------------------------------------------------------------ tokens

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
        """Token ids of ``string``; special tokens (a BOS) only where the tokenizer's post-processor adds
        them and the string does not already start with the prefix token, as lm-eval's HF model does."""
        if add_special_tokens is None:
            add_special_tokens = not string.startswith(self._eos_text)
        return self._tokenizer.encode(string, add_special_tokens=add_special_tokens).ids

    def tok_decode(self, tokens: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self._tokenizer.decode(list(tokens), skip_special_tokens=skip_special_tokens)

    # ------------------------------------------------------------------ scoring

    def _record(self, kind: str, layout: Layout) -> None:
        self.pack_stats[kind] = self.pack_stats.get(kind, PackStats()) + layout.stats()

    def _loglikelihood_tokens(self, requests: list[tuple[Any, list[int], list[int]]],
                              disable_tqdm: bool = False, **kwargs: Any) -> list[tuple[float, bool]]:
        """``(sum of log p(continuation), every continuation token is the argmax)`` per ``(key, context, continuation)``.

        A request longer than ``seq_len + 1`` tokens loses tokens on the left, as the HF model's do.
        """
        if not requests:
            return []
        seq_len = self.max_length
        inputs, targets, scored = [], [], []
        for key, context, continuation in requests:
            if not context or not continuation:
                raise ValueError(f"request {key!r}: context and continuation must each hold a token, got "
                                 f"{len(context)} and {len(continuation)}")
            whole = (list(context) + list(continuation))[-(seq_len + 1):]
            inputs.append(whole[:-1])
            targets.append(whole[1:])
            scored.append(min(len(continuation), seq_len))
        logprob, greedy, layout = self._score(inputs, targets)
        out = []
        for i, (key, _, _) in enumerate(requests):
            n = scored[i]
            answer = (float(layout.gather(logprob, i)[-n:].sum(dtype=np.float64)), bool(layout.gather(greedy, i)[-n:].all()))
            out.append(answer)
            if key is not None:
                self.cache_hook.add_partial("loglikelihood", key, answer)
        return out

    def _score(self, inputs: list[list[int]], targets: list[list[int]]) -> tuple[np.ndarray, np.ndarray, Layout]:
        """Per position log-probabilities and argmax hits of ``targets`` after ``inputs``, packed."""
        layout = plan_rows([len(x) for x in inputs], self.max_length, self.harness_config.batch_size)
        tokens, target_rows, segments = layout.scatter(inputs), layout.scatter(targets), layout.segment_ids()
        logprob = np.empty(tokens.shape, dtype=np.float32)
        greedy = np.empty(tokens.shape, dtype=bool)
        queued: collections.deque[tuple[slice, Any]] = collections.deque()

        def read_oldest() -> None:
            rows, (lp, hit) = queued.popleft()
            logprob[rows], greedy[rows] = np.asarray(lp), np.asarray(hit)

        for b in range(layout.num_batches):
            rows = layout.rows_of(b)
            queued.append((rows, self._model.score(tokens[rows], segments[rows], target_rows[rows])))
            if len(queued) > _IN_FLIGHT:
                read_oldest()
        while queued:
            read_oldest()
        self._record("loglikelihood", layout)
        return logprob, greedy, layout

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        """Log-likelihood of each whole string, in windows of ``seq_len`` predicted tokens (the harness's
        rolling windows, each scoring only tokens no earlier window scored), after the end token."""
        windows: list[tuple[Any, list[int], list[int]]] = []
        owner: list[int] = []
        for i, request in enumerate(requests):
            (string,) = request.args
            pairs = get_rolling_token_windows(token_list=self.tok_encode(string), prefix_token=self.prefix_token_id,
                                              max_seq_len=self.max_length, context_len=1)
            for context, continuation in map(make_disjoint_window, pairs):
                windows.append((None, context, continuation))
                owner.append(i)
        totals = [0.0] * len(requests)
        for i, (logprob, _) in zip(owner, self._loglikelihood_tokens(windows) if windows else [], strict=True):
            totals[i] += logprob
        for request, total in zip(requests, totals, strict=True):
            self.cache_hook.add_partial("loglikelihood_rolling", request.args, total)
        return totals

    # ------------------------------------------------------------------ generation

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        """Continuations by the key/value-cache decoder (``levanter.inference``), cut at the first stop
        sequence (the end token is always one): greedy, or sampled where a task's generation settings
        ask for it (``do_sample``, ``temperature``, ``top_k``, ``top_p``, ``seed``), ``batch_size``
        requests decoding at once.

        A sampled request without a ``seed`` of its own draws with one made from the harness's
        ``seed``, its task, document and request index, and which repeat it is: the same requests
        give the same text whatever their order or batch.

        Raises:
            ValueError: a request asks for ``seq_len`` or more new tokens, or for settings out of range.
        """
        prompts, settings, untils = [], [], []
        repeat: collections.Counter[int] = collections.Counter()
        for request in requests:
            context, gen_kwargs = request.args
            kwargs = normalize_gen_kwargs(dict(gen_kwargs), self.max_gen_toks)
            max_gen = int(kwargs["max_gen_toks"])
            if not 0 < max_gen < self.max_length:
                raise ValueError(f"generate_until: max_gen_toks must be in [1, seq_len={self.max_length}), got {max_gen}")
            until = handle_stop_sequences(kwargs.get("until"), eos=self._eos_text)
            repeat[id(request)] += 1
            prompts.append(self.tok_encode(context)[-(self.max_length - max_gen):] or [self.prefix_token_id])
            settings.append(self._sampling(request, kwargs, max_gen, until, repeat[id(request)]))
            untils.append(until)
        completions = self._engine().generate(prompts, settings)
        out = []
        for request, done, until in zip(requests, completions, untils, strict=True):
            text = postprocess_generated_text(done.text or "", until, None)
            out.append(text)
            self.cache_hook.add_partial("generate_until", request.args, text)
        return out

    def _sampling(self, request: Any, kwargs: dict[str, Any], max_gen: int, until: list[str],
                  repeat: int) -> SamplingParams:
        """The decoder's settings for one request (greedy unless it samples)."""
        sample = bool(kwargs.get("do_sample")) and float(kwargs.get("temperature", 1.0)) > 0
        seed = kwargs.get("seed")
        if seed is None:
            seed = derived_seed(self.harness_config.seed, request.task_name, request.doc_id, request.idx, repeat)
        def given(name: str, default: float) -> Any:
            value = kwargs.get(name)
            return default if value is None or not sample else value

        try:
            return SamplingParams(max_tokens=max_gen, temperature=float(given("temperature", 1.0)) if sample else 0.0,
                                  top_k=int(given("top_k", 0)), top_p=float(given("top_p", 1.0)), seed=int(seed),
                                  stop_token_ids=(self._eos_id,), stop=tuple(u for u in until if u))
        except ValueError as e:
            raise ValueError(f"generate_until: {e} (generation settings {dict(request.args[1])})") from None

    def _engine(self) -> Engine:
        """The decoder, made at the first generation: ``batch_size`` slots of ``seq_len`` positions."""
        if self._decoder is None:
            model = transformed_llama(self.model_config, self.harness_config.compute_dtype.jnp)
            self._decoder = Engine(model, self._model.params, slots=self.harness_config.batch_size,
                                   max_len=self.max_length, steps_per_sync=_STOP_CHECK_EVERY, decode_text=self.tok_decode)
        return self._decoder
