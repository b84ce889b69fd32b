"""``marin plot``: a step's training curves as a PNG of the asked size."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from marin.cli.main import cli
from marin.report import plot_metrics, read_metrics

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _write_metrics(folder: Path, steps: int = 25, with_val: bool = True) -> None:
    """A ``metrics.jsonl`` as a training step writes it: loss, lr, throughput, sometimes val_loss."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for step in range(1, steps + 1):
        row = {"step": step, "loss": 5.0 * math.exp(-step / 10) + 1.0, "lr": 1e-3 * min(1.0, step / 5),
               "tokens_per_s": 2000.0 + step, "grad_norm": 1.0 / step}
        if with_val and step % 5 == 0:
            row["val_loss"] = row["loss"] + 0.2
        rows.append(json.dumps(row))
    (folder / "metrics.jsonl").write_text("\n".join(rows) + "\n")


def _png_size(path: Path) -> tuple[int, int]:
    import matplotlib.image

    image = matplotlib.image.imread(str(path))
    return image.shape[1], image.shape[0]


@pytest.mark.parametrize(("width", "height"), [(640, 480), (1200, 300)])
def test_marin_plot_writes_a_png_of_the_asked_size(tmp_path: Path, width: int, height: int) -> None:
    step = tmp_path / "checkpoints" / "nano-0123456789abcdef"
    _write_metrics(step)
    out = tmp_path / "plots" / "loss.png"
    result = CliRunner().invoke(cli, ["plot", str(step), "-o", str(out), "--width", str(width), "--height", str(height)])
    assert result.exit_code == 0, result.output
    assert f"plot: {out} ({width}x{height}, 25 logged steps)" in result.output
    data = out.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert _png_size(out) == (width, height)

    from PIL import Image

    with Image.open(out) as image:
        image.verify()  # a complete, valid PNG
    with Image.open(out) as image:
        assert len(image.convert("RGB").getcolors(maxcolors=1 << 24) or []) > 20  # curves, not a blank canvas


def test_marin_plot_accepts_the_metrics_file_itself(tmp_path: Path) -> None:
    _write_metrics(tmp_path / "run", steps=3, with_val=False)
    out = tmp_path / "curves.png"
    result = CliRunner().invoke(cli, ["plot", str(tmp_path / "run" / "metrics.jsonl"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert _png_size(out) == (1000, 700)


def test_marin_plot_without_metrics_is_a_user_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(cli, ["plot", str(tmp_path / "empty"), "--prefix", str(tmp_path / "store"),
                                      "-o", str(tmp_path / "x.png")])
    assert result.exit_code == 2
    assert "no metrics.jsonl" in result.output and "hint:" in result.output
    assert not (tmp_path / "x.png").exists()


def test_plot_metrics_draws_only_what_was_logged(tmp_path: Path) -> None:
    folder = tmp_path / "step"
    folder.mkdir()
    (folder / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 2.0}) + "\n" + json.dumps({"step": 2, "loss": 1.5}) + "\n")
    metrics = read_metrics(str(folder))
    assert metrics is not None
    png = plot_metrics(metrics, width=300, height=200)
    out = tmp_path / "one.png"
    out.write_bytes(png)
    assert _png_size(out) == (300, 200)
    (folder / "metrics.jsonl").write_text(json.dumps({"step": 1, "accuracy": 0.5}) + "\n")
    with pytest.raises(ValueError, match="no loss"):
        plot_metrics(read_metrics(str(folder)), width=300, height=200)
    with pytest.raises(ValueError, match="must be > 0"):
        plot_metrics(metrics, width=0, height=200)
