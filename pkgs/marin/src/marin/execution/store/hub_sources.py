"""Which commit a Hugging Face dataset's revision is at: asked of the Hub, or read from the hub
cache's ``refs/`` offline (``HF_HUB_OFFLINE=1``) or when the Hub cannot be reached.

Only a missing network (no connection, a timeout, a server that cannot answer now) leaves the
answer to the cache, and then a warning names the commit used and how old the cache's record of
it is: a step must not be taken for cached on an old commit without a word. Every answer of the
Hub itself is its answer: a dataset it does not have, or a token it refuses (401, 403), is an
error naming the id.
"""

from __future__ import annotations

import logging
import os
import re
import time

from rigging.durations import format_age
from rigging.hf_hub import hub_cache_dir, hub_endpoint, hub_offline

__all__ = ["HubLookupError", "hub_commit"]

logger = logging.getLogger(__name__)

_COMMIT = re.compile(r"[0-9a-fA-F]{40}")
_HUB_TIMEOUT_S = 10.0


class HubLookupError(ValueError):
    """A dataset's revision that cannot be resolved; the message (one line) names the id and why."""


def _hub_repo_folder(repo_id: str) -> str:
    return os.path.join(hub_cache_dir(), "datasets--" + repo_id.replace("/", "--"))


def _cached_commit(repo_id: str, revision: str, hub_error: str | None) -> str:
    """The commit the hub cache's ``refs/<revision>`` names for dataset ``repo_id``; with
    ``hub_error`` (why the Hub could not be reached) a warning names the commit and its age."""
    folder = _hub_repo_folder(repo_id)
    ref = os.path.join(folder, "refs", revision)
    try:
        with open(ref, encoding="utf-8") as f:
            commit = f.read().strip()
        age = time.time() - os.stat(ref).st_mtime
    except OSError:
        why = f"the Hub could not be asked ({hub_error})" if hub_error else "the Hub is not used (HF_HUB_OFFLINE=1)"
        raise HubLookupError(
            f"source {repo_id!r} is a Hugging Face dataset id whose revision {revision!r} is not in the hub cache "
            f"({folder} has no refs/{revision}) and {why}; download it where there is network "
            f"(`hf download {repo_id} --repo-type dataset` with the same HF_HOME)") from None
    if not _COMMIT.fullmatch(commit):
        raise HubLookupError(f"source {repo_id!r}: {ref} names no commit ({commit[:60]!r})")
    if hub_error is not None:
        logger.warning("source %r: the Hugging Face Hub could not be reached (%s); using commit %s of revision %r "
                       "from the hub cache, written %s ago (%s)", repo_id, hub_error, commit.lower(), revision,
                       format_age(age), ref)
    return commit.lower()


_HUB_AUTH_STATUSES = (401, 403)
_HUB_UNAVAILABLE_STATUSES = (408, 429, 500, 502, 503, 504)
"""Answers that say the Hub cannot answer now (a timeout, too many requests, a server error):
like a network error, the hub cache answers. Every other answer of the Hub is its answer."""


def _network_error(error: BaseException) -> bool:
    """True for an error that says the Hub could not be reached (no connection, a timeout, a
    reset), as opposed to an answer from it."""
    # Imported here, as huggingface_hub is: requests comes with it.
    import requests

    return isinstance(error, requests.ConnectionError | requests.Timeout | ConnectionError | TimeoutError)


def _hub_refusal(repo_id: str, revision: str, error: BaseException) -> str | None:
    """Why the Hub's answer to a lookup of ``repo_id`` is an error (one line naming it), or None
    when the lookup failed for want of a network (the hub cache answers then)."""
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    if isinstance(error, RepositoryNotFoundError | RevisionNotFoundError):
        return (f"source {repo_id!r}: the Hugging Face Hub has no dataset {repo_id!r} at revision {revision!r} "
                f"(or it is private): {type(error).__name__}")
    status = getattr(getattr(error, "response", None), "status_code", None)
    if isinstance(error, HfHubHTTPError) and status in _HUB_AUTH_STATUSES:
        return (f"source {repo_id!r}: the Hugging Face Hub refused to say which commit revision {revision!r} is "
                f"({status} {'Unauthorized' if status == 401 else 'Forbidden'}): the token (HF_TOKEN, or `hf auth "
                "login`) is missing, expired or not allowed to read it; fix it, or set HF_HUB_OFFLINE=1 to use the "
                "hub cache's commit")
    if status in _HUB_UNAVAILABLE_STATUSES or (status is None and _network_error(error)):
        return None
    first = (str(error).strip().splitlines() or [""])[0]
    return (f"source {repo_id!r}: asking the Hugging Face Hub which commit revision {revision!r} is failed "
            f"({type(error).__name__}{f' {status}' if status else ''}: {first[:200]}); set HF_HUB_OFFLINE=1 to "
            "use the hub cache's commit")


def hub_commit(repo_id: str, revision: str) -> str:
    """The commit ``revision`` of dataset ``repo_id`` is at: asked of the Hub, else read from the cache.

    Only a Hub that cannot be reached (no network, a timeout, a server error) leaves the answer to
    the hub cache, with a warning naming the commit used and its age; any other failure (a token
    the Hub refuses: 401, 403) is an error naming the id.
    """
    if _COMMIT.fullmatch(revision):
        return revision.lower()
    hub_error = None
    if not hub_offline():
        # Imported here: huggingface_hub takes about a second to import, paid only by an online lookup.
        from huggingface_hub import HfApi

        try:
            sha = HfApi(endpoint=hub_endpoint()).dataset_info(repo_id, revision=revision, timeout=_HUB_TIMEOUT_S).sha
        except Exception as e:  # noqa: BLE001 - sorted below: the Hub's answers are errors, a missing network is not
            refused = _hub_refusal(repo_id, revision, e)
            if refused is not None:
                raise HubLookupError(refused) from None
            hub_error = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
        else:
            if not sha:
                raise HubLookupError(f"source {repo_id!r}: the Hugging Face Hub named no commit for revision "
                                     f"{revision!r}")
            return sha.lower()
    return _cached_commit(repo_id, revision, hub_error)
