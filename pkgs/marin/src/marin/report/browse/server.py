"""The browser's web server: the standard library's threading HTTP server, GET only, JSON answers.

Routes: ``/`` (the step graph), ``/step?ref=`` (a step's page), and under ``/api/``: ``steps``,
``step``, ``records``, ``stats``, ``clusters``, ``cluster``, ``join`` and ``training`` (see
:class:`BrowseApp`). A refused or bad request is answered with its status and one line.
"""

from __future__ import annotations

import ipaddress
import json
import sys
import traceback
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from marin.execution.store.done_index import read_index
from marin.execution.store.store import StepStore
from marin.report.browse.store_view import BrowseError, StepView, open_step
from marin.report.model import ReportData
from zephyr import DataError

__all__ = ["BrowseApp", "make_server"]

_JSON = "application/json; charset=utf-8"
_HTML = "text/html; charset=utf-8"
_TEXT = "text/plain; charset=utf-8"


def _int(query: dict[str, str], key: str, default: int) -> int:
    raw = query.get(key)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise BrowseError(400, f"{key} must be a whole number, got {raw!r}") from None


class BrowseApp:
    """What the server answers, apart from HTTP: ``(status, content type, body)`` for a path and
    its query.

    Args:
        store: the store browsed.
        graph: makes the report the graph page draws (all finished steps, or a plan of targets).
    """

    def __init__(self, store: StepStore, graph: Callable[[], ReportData]):
        self.store = store
        self.graph = graph

    def step(self, query: dict[str, str], key: str = "ref") -> StepView:
        return open_step(self.store, query.get(key, ""))

    def _suggestions(self, step: StepView) -> list[str]:
        """Steps to put beside ``step``: what it read (before a filter), and other steps reading the
        same input (another extractor of the same pages)."""
        found = []
        upstream = step.input_of("input")
        if upstream is not None:
            found.append(upstream[0].output_name)
        source = step.config_path("input")
        for name in sorted(read_index(self.store.prefix)):
            if name == step.output_name or source is None:
                continue
            try:
                other = open_step(self.store, name)
            except BrowseError:
                continue
            if other.config_path("input") == source and other.provenance.fn == step.provenance.fn:
                found.append(other.output_name)
        return found

    def step_json(self, query: dict[str, str]) -> dict[str, Any]:
        step = self.step(query)
        return {**step.to_json(), "compare_with": self._suggestions(step)}

    def api(self, name: str, query: dict[str, str]) -> Any:
        """The answer of ``/api/<name>``."""
        # Imported per route: the graph page never pays for the readers of documents.
        if name == "steps":
            return {"steps": sorted(read_index(self.store.prefix))}
        if name == "step":
            return self.step_json(query)
        if name == "records":
            from marin.report.browse.records import page_of

            return page_of(self.step(query), query.get("file", ""), _int(query, "page", 0), _int(query, "per", 20))
        if name == "stats":
            from marin.report.browse.stats import step_stats

            return step_stats(self.step(query), query.get("folder") or None)
        if name in ("clusters", "cluster"):
            from marin.report.browse.compare import cluster, clusters

            step = self.step(query)
            return clusters(step) if name == "clusters" else cluster(step, query.get("cluster", ""))
        if name == "join":
            from marin.report.browse.compare import join

            return join(self.step(query, "a"), self.step(query, "b"), a_folder=query.get("a_folder", ""),
                        b_folder=query.get("b_folder", ""), only=query.get("only", "all"),
                        page=_int(query, "page", 0), per=_int(query, "per", 20))
        if name == "training":
            from marin.report.browse.training import training_view

            return training_view(self.step(query))
        raise BrowseError(404, f"no such API: /api/{name}")

    def answer(self, path: str, query: dict[str, str]) -> tuple[int, str, bytes]:
        """``(status, content type, body)`` of a GET of ``path``."""
        is_api = path.startswith("/api/")
        try:
            if path == "/":
                from marin.report.browse.pages import graph_page

                return 200, _HTML, graph_page(self.graph()).encode()
            if path == "/favicon.ico":
                return 204, _TEXT, b""
            if path == "/step":
                from marin.report.browse.pages import step_page

                return 200, _HTML, step_page(self.step_json(query), self.store.prefix).encode()
            if is_api:
                return 200, _JSON, json.dumps(self.api(path[5:], query), default=str).encode()
            raise BrowseError(404, f"no page {path}")
        except BrowseError as e:
            status, message = e.status, str(e)
        except (DataError, ValueError, OSError) as e:
            status, message = 422, f"cannot read it: {e}"
        if is_api:
            return status, _JSON, json.dumps({"error": message}).encode()
        return status, _TEXT, (message + "\n").encode()


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class _Handler(BaseHTTPRequestHandler):
    server_version = "marin-browse"

    def _send(self, status: int, kind: str, body: bytes, head: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _get(self, head: bool) -> None:
        url = urllib.parse.urlsplit(self.path)
        host = (self.headers.get("Host") or "").rpartition(":")[0].strip("[]") or self.headers.get("Host", "")
        if self.server.loopback_only and not _is_loopback(host):  # type: ignore[attr-defined]
            # A page elsewhere whose name was pointed at this machine (DNS rebinding) is not let in.
            self._send(403, _TEXT, b"refused: this server answers only to localhost and 127.0.0.1\n", head)
            return
        query = {k: v[0] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        try:
            status, kind, body = self.server.app.answer(url.path, query)  # type: ignore[attr-defined]
        except Exception as e:  # noqa: BLE001 - one request's bug must not stop the server
            traceback.print_exc(file=sys.stderr)
            status, kind, body = 500, _TEXT, f"internal error: {type(e).__name__}: {e}\n".encode()
        self._send(status, kind, body, head)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._get(head=False)

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
        self._get(head=True)

    def _read_only(self) -> None:
        self._send(405, _TEXT, b"refused: marin browse is read-only (GET only)\n")

    do_POST = do_PUT = do_DELETE = do_PATCH = _read_only  # noqa: N815 - http.server's names

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        if self.server.verbose:  # type: ignore[attr-defined]
            super().log_message(format, *args)


def make_server(store: StepStore, graph: Callable[[], ReportData], *, host: str = "127.0.0.1", port: int = 0,
                verbose: bool = False) -> ThreadingHTTPServer:
    """A server (not yet serving: call ``serve_forever``) browsing ``store`` on ``host:port``
    (port 0: any free port; ``server.server_address`` says which)."""
    server = ThreadingHTTPServer((host, port), _Handler)
    server.daemon_threads = True
    server.app = BrowseApp(store, graph)  # type: ignore[attr-defined]
    server.verbose = verbose  # type: ignore[attr-defined]
    server.loopback_only = _is_loopback(host)  # type: ignore[attr-defined]
    return server
