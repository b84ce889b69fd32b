"""Where text and tokenizers come from: local or fsspec paths, step outputs, Hugging Face ids."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Sequence
from typing import Any

from marin.execution.core.identity import keep_identities
from marin.execution.core.sources import Source, SourceKey, set_fingerprinter, source
from rigging import filesystem as fs
from rigging.hf_hub import is_hf_id

__all__ = [
    "DataSourceError", "as_source", "hf_reachable", "source", "is_hf_id", "normalize_path", "resolve_corpus", "resolve_source",
    "resolve_tokenizer",
]

class DataSourceError(ValueError):
    """A source or tokenizer cannot be used; the message names it and what to do instead."""


def normalize_path(value: Any) -> Any:
    """Make a relative local path absolute (at handle creation: workers run elsewhere).

    Hugging Face ids, URLs, step handles and absolute paths pass unchanged. Absolute paths inside
    the workspace are hashed relative to it, so identities do not depend on the checkout's folder.
    """
    if isinstance(value, str) and "://" not in value and not os.path.isabs(value) and os.path.exists(value):
        return os.path.abspath(value)
    return value


def _fingerprint(sources: Sequence[Source]) -> dict[SourceKey, str]:
    # Imported when a source is first hashed (``handle.hash`` before any plan), not with the
    # handles: an experiment file that is only imported never pays for it.
    from marin.execution.store.sources import fingerprint_digests

    return fingerprint_digests(sources)


set_fingerprinter(_fingerprint)


def as_source(value: Any, *, hub: bool = True) -> Any:
    """``value`` as a handle's config holds what it reads: a path, URL, glob or (with ``hub``) a
    Hugging Face dataset id becomes a fingerprinted :func:`~marin.execution.core.sources.source`
    (a relative local path made absolute); a step, handle or placeholder passes unchanged. With
    ``hub=False`` an ``org/name`` id that is no local path stays a plain string (a Hub *model*,
    such as a tokenizer, is not a dataset source).
    """
    if isinstance(value, Source):
        return value
    if isinstance(value, str) and value.strip():
        if not hub and "://" not in value and not os.path.isabs(value) and not os.path.exists(value):
            return value
        return source(value)
    return value


def hf_reachable(timeout: float = 2.0) -> bool:
    """Whether the Hugging Face Hub answers (False when offline or told to stay offline)."""
    from marin.experiment.data.hub import hub_offline

    if hub_offline():
        return False
    try:
        with socket.create_connection(("huggingface.co", 443), timeout=timeout):
            return True
    except OSError:
        return False


def resolve_corpus(source: str) -> tuple[str | list[str], list[str]]:
    """Like :func:`resolve_source`, with the corpus's own validation files: a Hugging Face dataset's
    validation split (empty for every other source)."""
    if "://" not in source and not os.path.isabs(source) and not os.path.exists(source) and is_hf_id(source):
        from marin.experiment.data.hub import HfDatasetUnavailable, resolve_hf_dataset

        try:
            files = resolve_hf_dataset(source, online=hf_reachable())
        except HfDatasetUnavailable as e:
            raise DataSourceError(f"{e}, or use marin.experiment.data.bundled_corpus()") from None
        return list(files.train), list(files.validation)
    return resolve_source(source), []


def resolve_source(source: str, revision: str | None = None) -> str | list[str]:
    """The fsspec path, URL or files to read a corpus from; raises :class:`DataSourceError` if unusable.

    A Hugging Face dataset id resolves to the train split's files in the hub cache at ``revision``
    (a branch, tag or commit; None: ``main``), downloaded into it first when the Hub can be reached
    and ``HF_HUB_OFFLINE`` is not set; see :mod:`marin.experiment.data.hub` (and
    :func:`resolve_corpus` for its validation files). A revision of anything else is refused.
    """
    if revision is not None and not ("://" not in source and not os.path.isabs(source) and not os.path.exists(source)
                                     and is_hf_id(source)):
        raise DataSourceError(f"source {source!r}: revision={revision!r} applies to Hugging Face dataset ids only")
    if "://" in source or os.path.isabs(source) or os.path.exists(source):
        if not fs.is_local(source) or os.path.exists(fs.strip_protocol(source)) or any(c in source for c in "*?["):
            return source
        raise DataSourceError(f"source {source!r} does not exist")
    if is_hf_id(source):
        from marin.experiment.data.hub import HfDatasetUnavailable, resolve_hf_dataset

        try:
            return list(resolve_hf_dataset(source, online=hf_reachable(), revision=revision).train)
        except HfDatasetUnavailable as e:
            raise DataSourceError(f"{e}, or use marin.experiment.data.bundled_corpus()") from None
    raise DataSourceError(f"source {source!r} is neither an existing path, a URL, nor a Hugging Face id")


def resolve_tokenizer(spec: str, scratch: str) -> str:
    """A local path of a ``tokenizer.json`` for ``spec`` (a file, a folder holding one, a URL or an HF id)."""
    if "://" in spec and not fs.is_local(spec):
        target = spec if spec.endswith(".json") else fs.join(spec, "tokenizer.json")
        if not fs.exists(target):
            raise DataSourceError(f"tokenizer {spec!r}: {target} does not exist")
        local = os.path.join(scratch, "tokenizer.json")
        with open(local, "wb") as f:
            f.write(fs.read_bytes(target))
        return local
    local_spec = fs.strip_protocol(spec)
    if os.path.isdir(local_spec):
        local_spec = os.path.join(local_spec, "tokenizer.json")
    if os.path.isfile(local_spec):
        return local_spec
    if is_hf_id(spec) or re.match(r"^[A-Za-z0-9_.-]+$", spec):
        from marin.experiment.data.hub import HfDatasetUnavailable, resolve_hf_tokenizer

        try:
            return resolve_hf_tokenizer(spec, online=hf_reachable())
        except HfDatasetUnavailable as e:
            raise DataSourceError(
                f"tokenizer {spec!r} is a Hugging Face id: {e}; alternatives: a path to a tokenizer.json, or a "
                "trained tokenizer step (trained_tokenizer(...), e.g. experiments.marin_tokenizer.marin_tokenizer)"
            ) from None
    raise DataSourceError(f"tokenizer {spec!r} does not exist (expected a tokenizer.json, a folder holding one, or an HF id)")


# Moved from sources.py: what it defines keeps that name in every hash (and for workers and pickle).
keep_identities(globals(), "marin.experiment.sources")
