"""The browser's two pages: the step graph (the report of the store, with links into the browser)
and a step's page (its documents, attributes, clusters, comparisons, curves and samples), each one
HTML document with its data, style and script inline."""

from __future__ import annotations

import html
from typing import Any

from marin.report.collect import ReportData
from marin.report.render import embed_json, page_script, render_html, static_text

__all__ = ["graph_page", "step_page"]

BROWSE_SCRIPTS = ("dom.js", "charts.js", "browse.js")

_STEP_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="marin browse">
<title>{title} · marin browse</title>
<style>
{css}
</style>
</head>
<body class="browse">
<header class="top">
  <div class="top-line">
    <h1><a href="./" class="home" title="the step graph">marin browse</a> / <span id="step-name">{title}</span></h1>
    <span class="badge kind" id="step-kind">{kind}</span>
  </div>
  <div class="meta">prefix <code>{prefix}</code> &middot; output <code>{output}</code></div>
</header>
<nav id="tabs" class="tabs" aria-label="views"></nav>
<main id="view" class="browse-main" aria-live="polite"></main>
<script type="application/json" id="browse-step">{data}</script>
<script>
{js}
</script>
</body>
</html>
"""


def graph_page(report: ReportData) -> str:
    """The report of the store, its panel linking each finished step to its page in the browser."""
    return render_html(report, extra=f'<script type="application/json" id="browse-data">{embed_json({"step": "step?ref="})}</script>\n')


def step_page(step: dict[str, Any], prefix: str) -> str:
    """The page of one step (``step``: :meth:`~marin.report.browse.store_view.StepView.to_json` and what the browser adds to it)."""
    return _STEP_PAGE.format(title=html.escape(step["name"]), kind=html.escape(step["kind"]), prefix=html.escape(prefix),
                             output=html.escape(step["output"]), css=static_text("report.css") + "\n" + static_text("browse.css"),
                             data=embed_json(step), js=page_script(BROWSE_SCRIPTS))
