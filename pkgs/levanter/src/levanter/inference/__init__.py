"""Generation: a key/value-cache decoder with continuous batching on the device
(:class:`Engine`), and the sampling a request asks for (:class:`SamplingParams`)."""

from levanter.inference.engine import Completion, Engine, Request
from levanter.inference.sampling import SamplingParams, sample_tokens

__all__ = ["Completion", "Engine", "Request", "SamplingParams", "sample_tokens"]
