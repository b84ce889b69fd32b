"""Turn :class:`ReportData` into one self-contained HTML page, and write reports to disk or the store."""

from __future__ import annotations

import html
import json
import os
import time
from importlib import resources
from typing import Any

from marin.report.collect import ReportData
from marin.report.views import render_views
from rigging import filesystem as fs

__all__ = ["REPORT_SCRIPTS", "embed_json", "page_script", "render_html", "static_text", "write_report"]

# Reports of runs live under the prefix here; never a step output folder (no ``.marin/`` inside).

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="marin report">
<title>{title}</title>
<style>
{css}
</style>
</head>
<body>
<header class="top">
  <div class="top-line">
    <h1>{title}</h1>
    <div id="summary" class="summary" aria-label="steps by state"></div>
  </div>
  <div class="meta">prefix <code>{prefix}</code> &middot; {count} steps &middot; generated {generated}</div>
</header>
<main>
  <section class="graph-card card" aria-label="step graph">
    <div class="card-head">
      <h2>Step graph</h2>
      <div class="graph-tools">
        <span class="hint">drag to pan &middot; Ctrl+wheel to zoom &middot; click a folder to open it</span>
        <button type="button" data-zoom="out" title="zoom out">&minus;</button>
        <button type="button" data-zoom="in" title="zoom in">+</button>
        <button type="button" data-zoom="fit" title="fit the whole graph">fit</button>
      </div>
    </div>
    <div id="graph" class="graph-box"></div>
  </section>
  <div id="columns" class="columns">
  <aside id="panel" class="panel card" aria-live="polite">
    <p class="hint">Click a step in the graph or the table to see its provenance.</p>
  </aside>
  <section id="training" class="card wide" hidden>
    <h2>Training curves</h2>
    <div id="training-list" class="training-list"></div>
  </section>
  <section id="curation" class="card wide" aria-label="data curation" hidden>
    <h2>Data curation</h2>
    <div id="curation-list" class="curation-list"></div>
  </section>
  <section id="compare" class="card wide" aria-label="compared runs" hidden>
    <h2>Compared runs</h2>
    <div id="compare-curves" class="charts"></div>
    <div class="table-scroll"><table id="compare-table" class="steps"></table></div>
    <div id="evals" hidden>
      <h3>Evaluations (bits per byte; loss in the tooltip)</h3>
      <div class="table-scroll"><table id="eval-table" class="steps"></table></div>
    </div>
    <div id="task-scores" hidden>
      <h3>Benchmark tasks (&plusmn; standard error; &uarr; more is better, &darr; less; the best run in bold)</h3>
      <div class="table-scroll"><table id="task-table" class="steps"></table></div>
    </div>
  </section>
  {views}
  </div>
  <section class="card" aria-label="all steps">
    <h2>Steps</h2>
    <div class="table-scroll"><table id="steps-table" class="steps"></table></div>
  </section>
</main>
<noscript><p class="hint">This report draws its graph and charts with JavaScript; the data is in the
<code>report-data</code> script element of this file.</p></noscript>
{extra}<script type="application/json" id="report-data">{data}</script>
<script>
{js}
</script>
</body>
</html>
"""


def embed_json(data: Any) -> str:
    """``data`` as JSON that is safe inside a ``<script>`` element (no ``<``, ``>`` or ``&``)."""
    text = json.dumps(data, sort_keys=False, allow_nan=False, default=str)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def static_text(name: str) -> str:
    """The text of ``static/<name>`` (the pages' scripts and styles, shipped with the package)."""
    return resources.files("marin.report").joinpath("static", name).read_text(encoding="utf-8")


REPORT_SCRIPTS = ("dom.js", "charts.js", "graph.js", "report.js")
"""The report page's scripts, run in this order inside one function (they share its names)."""


def page_script(names: tuple[str, ...]) -> str:
    """The static scripts ``names`` as one, each after the other inside one strict-mode function."""
    return "(function () {\n  \"use strict\";\n" + "\n".join(static_text(n) for n in names) + "\n})();"


def render_html(report: ReportData, *, extra: str = "") -> str:
    """The report as one HTML page with every script, style and datum inline; ``extra``: HTML put
    before the page's data and script (``marin browse`` adds its own data this way)."""
    generated = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(report.generated_at))
    return _PAGE.format(
        title=html.escape(report.title),
        prefix=html.escape(report.prefix),
        count=len(report.steps),
        generated=html.escape(generated),
        css=static_text("report.css"),
        js=page_script(REPORT_SCRIPTS),
        extra=extra,
        data=embed_json(report.to_json()),
        views=render_views(report.views),
    )


def write_report(report: ReportData, path: str) -> str:
    """Write ``report`` to ``path`` (a local file or a store URL) atomically; returns the path."""
    if fs.is_local(path):
        path = os.path.abspath(fs.strip_protocol(path))
        os.makedirs(os.path.dirname(path), exist_ok=True)
    fs.atomic_write(path, render_html(report))
    return path
