"""``marin browse``: a local, read-only web server over a step store.

Its pages: the step graph (the report, drawn live from the store), and for a step its documents
page by page (JSON lines, Parquet, tokenized shards decoded back to text), its attributes as
histograms, a duplicate cluster with the words that differ marked, two steps' documents side by
side joined by id, and a training step's curves and its evaluations' samples.

Every path a request names is found through the store (:meth:`~marin.execution.store.store.StepStore.resolve`) and read only
when it is inside the prefix and listed in the step's manifest: a request for anything else is
refused (HTTP 403). The server binds 127.0.0.1 unless told otherwise and opens no browser.
"""

from __future__ import annotations

from rigging.lazy import lazy_getattr

__all__ = ["BrowseError", "StepView", "make_server", "open_step"]

_WHERE = {
    "BrowseError": "marin.report.browse.store_view",
    "StepView": "marin.report.browse.store_view",
    "open_step": "marin.report.browse.store_view",
    "make_server": "marin.report.browse.server",
}

__getattr__ = lazy_getattr(__name__, _WHERE)
