"""Repositories of the Hugging Face Hub through its local cache (``HF_HOME``; ``HF_HUB_OFFLINE=1``: the cache only).

One lookup for every kind of repository levanter reads (model checkpoints, benchmark datasets);
each caller words its own error from the reason it gets.
"""

from __future__ import annotations

from collections.abc import Sequence

from rigging.hf_hub import hub_cache_dir, hub_offline

__all__ = ["HubIdInvalid", "HubSnapshotMissing", "hub_snapshot"]


class HubIdInvalid(ValueError):
    """A string that is not a Hugging Face Hub repository id."""


class HubSnapshotMissing(FileNotFoundError):
    """A Hub repository neither in the hub cache nor downloadable now."""

    def __init__(self, state: str, cache: str):
        super().__init__(f"{state}; cache: {cache}")
        self.state = state
        """Why, in words: not in the hub cache (offline), or not cached and not downloadable (the error)."""
        self.cache = cache
        """The hub cache folder looked in."""


def hub_snapshot(repo: str, *, repo_type: str, revision: str | None = None,
                 allow_patterns: Sequence[str] | None = None) -> str:
    """The snapshot folder of Hub repository ``repo`` (``model`` or ``dataset``) in the hub cache.

    With ``HF_HUB_OFFLINE=1`` only the cache is read; otherwise the Hub is asked first (files it
    has that the cache lacks are downloaded) and the cache used when it cannot be reached.

    Raises:
        HubIdInvalid: ``repo`` is not a repository id.
        HubSnapshotMissing: not cached (offline), or not cached and not downloadable.
    """
    # Imported here: huggingface_hub's API takes about a second to import (loaded machine), paid only by a lookup.
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError, RepositoryNotFoundError

    offline, cache = hub_offline(), hub_cache_dir()
    try:
        return snapshot_download(repo, repo_type=repo_type, revision=revision, allow_patterns=allow_patterns,
                                 cache_dir=cache, local_files_only=offline)
    except HFValidationError:
        raise HubIdInvalid(f"{repo!r} is not a Hugging Face Hub id (org/name)") from None
    except (LocalEntryNotFoundError, RepositoryNotFoundError, OSError) as e:
        why = (str(e).splitlines() or [type(e).__name__])[0]
        state = "not in the hub cache (HF_HUB_OFFLINE=1)" if offline else f"not cached and not downloadable ({why})"
        raise HubSnapshotMissing(state, cache) from None
