"""The report's training-science views, drawn here as static HTML: the leaderboard (quality against
model FLOPs, with its Pareto frontier) and the fits of IsoFLOP ladders (their plot and exponents).

Kept apart from the page's script: :func:`collect_views` gathers them from a plan and its
comparison, :func:`render_views` turns them into the sections the page shows below the comparison.
"""

from __future__ import annotations

import base64
import html
import math
from typing import Any

from marin.execution.plan.model import Plan
from marin.execution.store.step_record import StepRecord
from marin.experiment.results import read_json_object
from marin.report.compare import Comparison
from marin.report.leaderboard import leaderboard_of
from rigging import filesystem as fs

__all__ = ["collect_views", "render_views", "views_json"]


def _scaling_fits(plan: Plan) -> list[dict[str, Any]]:
    """The built fit steps of IsoFLOP ladders in ``plan``: their fit and plot (base64 PNG)."""
    from marin.experiment.scaling import FIT_FILE, PLOT_FILE, isoflop_fit_step

    fits = []
    for p in plan.steps:
        if p.step.fn is not isoflop_fit_step:
            continue
        at = StepRecord(p.output_path).files_folder()
        fit = read_json_object(fs.join(at, FIT_FILE))
        if fit is None:
            continue
        plot = fs.join(at, PLOT_FILE)
        png = base64.b64encode(fs.read_bytes(plot)).decode("ascii") if fs.exists(plot) else None
        fits.append({"name": p.name, "hash": p.hash, "fit": fit, "png": png})
    return fits


def collect_views(plan: Plan | None, comparison: Comparison | None) -> dict[str, Any] | None:
    """The leaderboard of the compared runs and the ladder fits of ``plan``; None when there is neither."""
    board = leaderboard_of(comparison) if comparison is not None and comparison.rows else None
    fits = _scaling_fits(plan) if plan is not None else []
    if board is None and not fits:
        return None
    return {"leaderboard": board.to_json() if board is not None else None, "scaling": fits}


def _fmt(value: Any, digits: int = 4) -> str:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "–"
    return f"{value:.{digits}g}"


def _chart(board: dict[str, Any]) -> str:
    """An SVG scatter of the entries (log model FLOPs across, the metric up), the frontier joined."""
    entries = board["entries"]
    width, height, pad = 640, 260, 48
    xs = [math.log10(e["model_flops"]) for e in entries if e["model_flops"] > 0]
    ys = [e["score"] for e in entries]
    if not xs or len(xs) != len(entries):
        return ""
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y0, y1 = min(ys), max(ys) if max(ys) > min(ys) else min(ys) + 1

    def at(x: float, y: float) -> tuple[float, float]:
        return (pad + (x - x0) / (x1 - x0) * (width - 2 * pad),
                height - pad + 10 - (y - y0) / (y1 - y0) * (height - 2 * pad))

    parts = [f'<svg class="leaderboard-chart" data-chart="leaderboard" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{html.escape(board["metric"])} against model FLOPs">',
             f'<line x1="{pad}" y1="{height - pad + 10}" x2="{width - pad}" y2="{height - pad + 10}" stroke="#9aa5b4"/>',
             f'<text x="{width / 2}" y="{height - 8}" text-anchor="middle" font-size="11">model FLOPs (log scale: '
             f'{10 ** x0:.2g} to {10 ** x1:.2g})</text>',
             f'<text x="12" y="18" font-size="11">{html.escape(board["metric"])} ({y0:.4g} to {y1:.4g}; lower is better)'
             '</text>']
    front = [at(x, e["score"]) for x, e in zip(xs, entries, strict=True) if e["frontier"]]
    if len(front) > 1:
        path = " ".join(f"{'M' if i == 0 else 'L'}{x:.1f},{y:.1f}" for i, (x, y) in enumerate(front))
        parts.append(f'<path class="frontier" d="{path}" fill="none" stroke="#d9480f" stroke-width="1.6"/>')
    for x, e in zip(xs, entries, strict=True):
        cx, cy = at(x, e["score"])
        parts.append(f'<circle class="run{" on-frontier" if e["frontier"] else ""}" cx="{cx:.1f}" cy="{cy:.1f}" r="4.5" '
                     f'fill="{"#d9480f" if e["frontier"] else "#4c6ef5"}"><title>{html.escape(e["label"])}: '
                     f'{_fmt(e["score"])} at {e["model_flops"]:.3g} FLOPs</title></circle>')
    parts.append("</svg>")
    return "".join(parts)


def _leaderboard_html(board: dict[str, Any]) -> str:
    metric = html.escape(board["metric"])
    head = "".join(f'<th class="num">{h}</th>' for h in ("model FLOPs", metric, "params", "MFU", "wall s"))
    rows = []
    for e in board["entries"]:
        mark = "★ " if e["frontier"] else ""
        mfu = f"{100 * e['mfu']:.1f}%" if isinstance(e["mfu"], int | float) else "–"
        rows.append(f'<tr data-run="{html.escape(e["label"])}" data-frontier="{str(e["frontier"]).lower()}">'
                    f'<td class="name">{mark}{html.escape(e["label"])}</td><td class="num">{e["model_flops"]:.3g}</td>'
                    f'<td class="num">{_fmt(e["score"])}</td><td class="num">{_fmt(e["params"], 3)}</td>'
                    f'<td class="num">{mfu}</td><td class="num">{_fmt(e["wall_s"], 3)}</td>'
                    f'<td>{html.escape(e["device"] or "–")}</td></tr>')
    return (f'<section id="leaderboard" class="card wide" aria-label="leaderboard"><h2>Leaderboard: {metric} '
            f'against model FLOPs</h2><p class="hint">★ on the Pareto frontier: no other run is both cheaper and '
            f'better.</p>{_chart(board)}<div class="table-scroll"><table class="steps"><thead><tr><th>run</th>{head}'
            f'<th>devices</th></tr></thead><tbody>{"".join(rows)}</tbody></table></div></section>')


def _law(name: str, law: dict[str, Any] | None) -> str:
    if law is None:
        return ""
    text = f"{name}(C) = {law['coefficient']:.3g} · C^{law['exponent']:.3f}"
    if law.get("stderr") is not None:
        low, high = law["ci95"]
        text += f" (standard error {law['stderr']:.3f}; 95% interval [{low:.3f}, {high:.3f}])"
    return f"<li>{html.escape(text)}</li>"


def _scaling_html(fits: list[dict[str, Any]]) -> str:
    blocks = []
    for item in fits:
        fit = item["fit"]
        laws = _law("N*", fit.get("params_law")) + _law("D*", fit.get("tokens_law"))
        note = f'<p class="hint">{html.escape(fit["note"])}</p>' if fit.get("note") else ""
        skipped = "".join(f"<li>{html.escape(s)}</li>" for s in fit.get("skipped") or [])
        image = (f'<img class="isoflop-plot" alt="IsoFLOP fit of {html.escape(item["name"])}" style="max-width:100%" '
                 f'src="data:image/png;base64,{item["png"]}">' if item["png"] else "")
        blocks.append(f'<div class="isoflop" data-step="{html.escape(item["name"])}"><h3>{html.escape(item["name"])} '
                      f'({html.escape(str(fit.get("objective")))})</h3>{image}<ul>{laws}</ul>{note}'
                      + (f'<p class="hint">left out:</p><ul>{skipped}</ul>' if skipped else "") + "</div>")
    return f'<section id="scaling" class="card wide" aria-label="scaling laws"><h2>Scaling laws</h2>{"".join(blocks)}</section>'


def render_views(views: dict[str, Any] | None) -> str:
    """The views' HTML sections (empty when there are none)."""
    if not views:
        return ""
    out = []
    if views.get("leaderboard"):
        out.append(_leaderboard_html(views["leaderboard"]))
    if views.get("scaling"):
        out.append(_scaling_html(views["scaling"]))
    return "\n".join(out)


def views_json(views: dict[str, Any] | None) -> dict[str, Any] | None:
    """The views as the page's data embeds them (plots left out: they are in the page already)."""
    if not views:
        return None
    return {**views, "scaling": [{k: v for k, v in f.items() if k != "png"} for f in views.get("scaling") or []]}
