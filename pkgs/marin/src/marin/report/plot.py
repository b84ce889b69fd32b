"""Training curves of one step as a PNG (matplotlib, no display needed)."""

from __future__ import annotations

import io
from typing import Any

from marin.report.outputs import Metrics

__all__ = ["DEFAULT_DPI", "plot_metrics"]

DEFAULT_DPI = 100

# (panel title, [(series key, legend label)]) in the order drawn.
_PANELS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("Loss", (("loss", "train"), ("val_loss", "validation"))),
    ("Learning rate", (("lr", "lr"),)),
    ("Throughput (tokens/s)", (("tokens_per_s", "tokens/s"),)),
    ("Gradient norm", (("grad_norm", "grad norm"),)),
    ("MFU", (("mfu", "mfu"),)),
)


def plot_metrics(metrics: Metrics, *, width: int = 1000, height: int = 700, title: str | None = None,
                 dpi: int = DEFAULT_DPI) -> bytes:
    """A PNG of ``width`` x ``height`` pixels with one panel per logged series group.

    Args:
        metrics: the series to draw (see :func:`marin.report.outputs.read_metrics`).
        width: the image's width in pixels.
        height: the image's height in pixels.
        title: a title over the panels (the step's name).
        dpi: dots per inch of the figure (the pixel size does not depend on it).

    Raises:
        ValueError: when the size is not positive or there is nothing to draw.
    """
    if width <= 0 or height <= 0:
        raise ValueError(f"width and height must be > 0, got {width}x{height}")
    panels = [(name, [(key, label) for key, label in series if metrics.series.get(key)])
              for name, series in _PANELS]
    panels = [(name, series) for name, series in panels if series]
    if not panels:
        raise ValueError("no loss, learning rate, throughput, gradient norm or MFU series to plot")
    from matplotlib.figure import Figure

    # A Figure used directly (not pyplot) keeps no global state and needs no display backend.
    fig = Figure(figsize=(width / dpi, height / dpi), dpi=dpi)
    cols = 1 if len(panels) == 1 else 2
    rows = (len(panels) + cols - 1) // cols
    axes: list[Any] = [fig.add_subplot(rows, cols, i + 1) for i in range(len(panels))]
    for ax, (name, series) in zip(axes, panels, strict=True):
        for key, label in series:
            points = metrics.series[key]
            xs = [p[0] for p in points]
            ys = [p[1] for p in points]
            ax.plot(xs, ys, label=label, linewidth=1.5, marker="o" if len(points) <= 40 else None, markersize=2.5)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(True, alpha=0.3)
        if len(series) > 1:
            ax.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()
