"""gcsfs with the store's request rules: every request bounded, retried by :mod:`rigging.store_requests`, counted.

gcsfs sends every request of a ``GCSFileSystem`` through its ``_request`` (listings, metadata,
downloads, uploads, deletes, copies: all but ``get`` to a local file). :class:`RetryingGCSFileSystem`
replaces that one method, so the rest of gcsfs is used as it is, and its own retry loop (six
tries, no ``Retry-After``, no timeout, no count) with :func:`rigging.store_requests.with_retries`:

* each attempt has a timeout (:class:`~rigging.store_requests.RequestPolicy`), each call a deadline;
* answers worth trying again (408, 429, 5xx, resets, timeouts) are retried with capped, jittered
  exponential backoff that honours ``Retry-After``;
* an answer that is not whole is retried, never handed on (:class:`~rigging.store_requests.TornAnswer`):
  a download must match the hash the store sends with it (``X-Goog-Hash``), a ranged one its
  ``Content-Range``, and a JSON answer must parse;
* a write refused by its precondition (412) after an attempt whose outcome was not known (its
  answer lost, a 5xx, a reset after the body) raises :class:`RetriedPreconditionFailed`: the
  object may be this call's own (:func:`rigging.gcs.write_object` then compares the object's
  content digest with what it sent);
* every attempt is counted by kind (:func:`request_kind`), every retry by kind and cause.

Imported only where gs:// is used (it imports gcsfs and aiohttp).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import aiohttp
from gcsfs.core import GCSFileSystem
from gcsfs.retry import ChecksumError, is_retriable, validate_response

from rigging.store_requests import RequestPolicy, RetryableAnswer, TornAnswer, retryable_status, with_retries

__all__ = ["RetriedPreconditionFailed", "RetryingGCSFileSystem", "describe_request", "request_kind"]

_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
"""A ``Content-Range`` header: of a ranged download's answer, or of a resumable upload's part."""


class RetriedPreconditionFailed(FileExistsError):
    """A write's precondition failed (412) on a retry after an attempt whose outcome was not known:
    the object there may be the one an earlier attempt of this call wrote."""


def request_kind(method: str, url: str, params: Mapping[str, Any]) -> str:
    """What a request is, for counting: ``read`` (a download), ``list``, ``stat`` (an object's or a
    bucket's metadata), ``create`` (an upload that must not replace: ``ifGenerationMatch=0``),
    ``write`` (any other single upload), ``upload`` (a resumable upload's session or part),
    ``delete``, ``copy`` (rewrite, copy, compose), ``other``."""
    if method == "GET":
        if params.get("alt") == "media" or "alt=media" in url:
            return "read"
        return "list" if url.split("?", 1)[0].rstrip("/").endswith("/o") else "stat"
    if method == "DELETE":
        return "delete"
    if "/rewriteTo/" in url or "/copyTo/" in url or url.split("?", 1)[0].endswith("/compose"):
        return "copy"
    if "/upload/" in url:
        if params.get("uploadType") == "resumable" or "upload_id=" in url:
            return "upload"
        return "create" if str(params.get("ifGenerationMatch")) == "0" else "write"
    return "other"


_UPLOAD_NAME = re.compile(rb'"name": ?("(?:[^"\\]|\\.)*")')


def describe_request(kind: str, url: str, params: Mapping[str, Any], data: Any = None) -> str:
    """A request in the words of the store: ``read gs://bucket/a/b``, ``list gs://bucket/a/`` ..."""
    path = unquote(urlsplit(url).path)
    bucket, _, rest = path.partition("/b/")[2].partition("/")
    if rest.startswith("o/"):
        name = rest[2:].split("/rewriteTo/", 1)[0]
    else:
        name = str(params.get("name") or parse_qs(urlsplit(url).query).get("name", [""])[0]
                   or params.get("prefix") or "")
    found = _UPLOAD_NAME.search(bytes(data[:4096])) if not name and isinstance(data, bytes | bytearray) else None
    if found:  # a multipart upload names its object in its body
        name = json.loads(found.group(1))
    return f"{kind} gs://{bucket}/{name}" if bucket else f"{kind} {url.split('?', 1)[0]}"


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """``Retry-After`` in seconds (a number of seconds or an HTTP date), or None."""
    raw = headers.get("Retry-After")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        import time

        return max(0.0, parsedate_to_datetime(raw).timestamp() - time.time())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def _md5_of_hash_header(value: str | None) -> str | None:
    for part in (value or "").split(","):
        name, _, digest = part.strip().partition("=")
        if name == "md5" and digest:
            return digest
    return None


def check_whole(url: str, params: Mapping[str, Any], headers: Mapping[str, str], contents: bytes) -> None:
    """Raise :class:`TornAnswer` unless a successful answer is whole (see the module docstring)."""
    download = params.get("alt") == "media" or "alt=media" in url
    if download:
        found = _CONTENT_RANGE.match(headers.get("Content-Range", ""))
        if found:
            want = int(found.group(2)) - int(found.group(1)) + 1
            if len(contents) != want:
                raise TornAnswer(f"{len(contents)} bytes of the {want} its Content-Range names")
            return
        if headers.get("X-Goog-Stored-Content-Encoding", "identity") != "identity":
            return  # served decompressed: the stored object's hash is not of these bytes
        md5 = _md5_of_hash_header(headers.get("X-Goog-Hash"))
        if md5 is not None and base64.b64encode(hashlib.md5(contents).digest()).decode() != md5:
            raise TornAnswer(f"{len(contents)} bytes whose MD5 is not the object's")
        stored = headers.get("X-Goog-Stored-Content-Length")
        if md5 is None and stored is not None and stored.isdigit() and int(stored) != len(contents):
            raise TornAnswer(f"{len(contents)} bytes of the object's {stored}")
        return
    if contents and "json" in headers.get("Content-Type", ""):
        try:
            json.loads(contents)
        except ValueError:
            raise TornAnswer(f"a JSON answer of {len(contents)} bytes that does not parse") from None


def _retryable(error: BaseException) -> bool:
    if isinstance(error, RetryableAnswer | TornAnswer | asyncio.TimeoutError | TimeoutError | ConnectionError
                  | aiohttp.ClientError | ChecksumError):
        return True
    if isinstance(error, FileNotFoundError | FileExistsError | PermissionError | ValueError):
        return False
    return is_retriable(error)


def _body_size(data: Any) -> int:
    if isinstance(data, bytes | bytearray | memoryview):
        return len(data)
    getbuffer = getattr(data, "getbuffer", None)
    return getbuffer().nbytes if getbuffer is not None else 0


class RetryingGCSFileSystem(GCSFileSystem):
    """``gcsfs.core.GCSFileSystem`` whose every request follows :mod:`rigging.store_requests`.

    Args:
        store_timeout_s: :class:`~rigging.store_requests.RequestPolicy`'s ``timeout_s`` (None: the
            environment's, else its default).
        store_deadline_s: its ``deadline_s``, likewise. Other arguments are gcsfs's.
    """

    def __init__(self, *args: Any, store_timeout_s: float | None = None, store_deadline_s: float | None = None,
                 **kwargs: Any):
        super().__init__(*args, **kwargs)
        # Made by fsspec for a library that opens gs:// itself (no settings given): the environment's.
        defaults = RequestPolicy.from_environ()
        self.policy = RequestPolicy(timeout_s=store_timeout_s or defaults.timeout_s,
                                    deadline_s=store_deadline_s or defaults.deadline_s)

    async def _request(self, method: str, path: str, *args: Any, headers: Any = None, json: Any = None,
                       data: Any = None, cache_type: Any = None, cache_source: Any = None, **kwargs: Any) -> Any:
        url = self._format_path(path, args)
        params = self._get_params(kwargs)
        kind = request_kind(method, url, params)
        policy = self.policy
        # A download may be big: it is bounded by its progress (no byte for timeout_s), not in total.
        client_timeout = aiohttp.ClientTimeout(total=None, sock_connect=policy.timeout_s, sock_read=policy.timeout_s)
        unknown: list[BaseException] = []  # failed attempts that may have been applied

        async def attempt(_limit: float) -> tuple[int, Any, Any, bytes]:
            session = await self._set_session()
            if hasattr(data, "seek"):
                data.seek(0)
            async with session.request(method=method, url=url, params=params, json=json, data=data,
                                            headers=self._get_headers(headers, cache_type=cache_type,
                                                                      cache_source=cache_source),
                                            timeout=client_timeout) as r:
                contents = await r.read()
                if retryable_status(r.status):
                    raise RetryableAnswer(r.status, r.reason or "", _retry_after(r.headers))
                if r.status < 300:
                    check_whole(url, params, r.headers, contents)
                validate_response(r.status, contents, path, args)
                return r.status, r.headers, r.request_info, contents

        def note(error: BaseException) -> None:
            if not isinstance(error, aiohttp.ClientConnectorError):  # never connected: nothing was sent
                unknown.append(error)

        try:
            return await with_retries(attempt, kind=kind, what=describe_request(kind, url, params, data), policy=policy,
                                      retryable=_retryable, body_bytes=_body_size(data), on_retry=note,
                                      hard_limit=kind != "read")
        except RetriedPreconditionFailed:
            raise
        except FileExistsError as e:
            if unknown and method != "GET":
                raise RetriedPreconditionFailed(str(e)) from e
            raise
        except FileNotFoundError:
            # A resumable upload's last part sent again after its answer was lost: the session is
            # over (the object written), and the store no longer knows it.
            if not (unknown and kind == "upload"):
                raise
            written = await self._uploaded(url, headers)
            if written is None:
                raise
            return 200, {}, None, written

    async def _uploaded(self, url: str, headers: Any) -> bytes | None:
        """The metadata (JSON) of the object a resumable upload session at ``url`` wrote, when it is
        there with the size the request's ``Content-Range`` names; None otherwise."""
        query = parse_qs(urlsplit(url).query)
        found = _CONTENT_RANGE.match(str((headers or {}).get("Content-Range", "")))
        bucket = urlsplit(url).path.split("/b/", 1)[-1].split("/", 1)[0]
        if "name" not in query or found is None or found.group(3) == "*":
            return None
        try:
            there: Any = await self._call("GET", "b/{}/o/{}", bucket, query["name"][0], json_out=True)
        except FileNotFoundError:
            return None
        return json.dumps(there).encode() if int(there.get("size", -1)) == int(found.group(3)) else None
