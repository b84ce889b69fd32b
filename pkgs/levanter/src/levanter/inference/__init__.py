"""Generation: a key/value-cache decoder with continuous batching on the device
(:class:`Engine`), and the sampling a request asks for (:class:`SamplingParams`).

Names load from their modules on first use: a config that names its ``SamplingParams`` (a
``generations(...)`` step's) is planned without importing JAX."""

from typing import TYPE_CHECKING

from rigging.lazy import lazy_getattr

if TYPE_CHECKING:
    from levanter.inference.engine import Completion, Engine, Request
    from levanter.inference.sampling import SamplingParams, sample_tokens

__all__ = ["Completion", "Engine", "Request", "SamplingParams", "sample_tokens"]

__getattr__ = lazy_getattr(__name__, {"Completion": "levanter.inference.engine", "Engine": "levanter.inference.engine",
                                      "Request": "levanter.inference.engine",
                                      "SamplingParams": "levanter.inference.sampling",
                                      "sample_tokens": "levanter.inference.sampling"})
