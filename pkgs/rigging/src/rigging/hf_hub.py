"""Where the Hugging Face hub cache is, and whether only it may be read: the hub's own variables.

Read when called, never at import (huggingface_hub reads them once, when it is imported): a
process may set ``HF_HOME`` after that, and tests point it at a folder of their own.
"""

from __future__ import annotations

import os

__all__ = ["hub_cache_dir", "hub_offline"]


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
