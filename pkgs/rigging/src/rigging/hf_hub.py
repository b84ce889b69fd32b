"""Where the Hugging Face hub cache is, whether only it may be read, which Hub to ask (the hub's own
variables), and what a Hub id looks like.

Read when called, never at import (huggingface_hub reads them once, when it is imported): a
process may set ``HF_HOME`` after that, and tests point it at a folder of their own.
"""

from __future__ import annotations

import os
import re

__all__ = ["hub_cache_dir", "hub_endpoint", "hub_offline", "is_hf_id"]

# A Hub repository id as the Hub spells them: ``owner/name``.
_HF_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


def is_hf_id(value: str) -> bool:
    """True for ``owner/name`` strings that are not an existing local path."""
    return bool(_HF_ID.match(value)) and not os.path.exists(value)


def hub_cache_dir() -> str:
    """The hub cache folder: ``HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``.

    ``HF_HOME`` itself defaults to ``$XDG_CACHE_HOME/huggingface`` where ``XDG_CACHE_HOME`` is set.
    """
    if os.environ.get("HF_HUB_CACHE"):
        return os.path.expanduser(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
    return os.path.join(os.path.expanduser(home), "hub")


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` asks for the cache only."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def hub_endpoint() -> str | None:
    """The Hub to ask: ``HF_ENDPOINT`` when set, else None (huggingface_hub's default, huggingface.co)."""
    return os.environ.get("HF_ENDPOINT") or None
