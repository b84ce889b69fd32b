"""FLOPs accounting: the Pareto frontier of quality against model FLOPs, the report's leaderboard,
and what a training step's ``train_summary.json`` and ``speedrun.json`` hold."""

from __future__ import annotations

import dataclasses

import pytest

from levanter.models.llama import LlamaConfig
from marin.experiment.training.flops import SPEEDRUN_FORMAT, flops_accounting, speedrun_record
from marin.report.compare import CompareRow, Comparison
from marin.report.leaderboard import leaderboard_of, pareto_frontier
from marin.report.views import render_views

MODEL = LlamaConfig(vocab_size=320, hidden_dim=16, intermediate_dim=32, num_heads=2, num_kv_heads=2, num_layers=1,
                    max_seq_len=64)


@pytest.mark.parametrize("points, frontier", [
    ([], []),
    ([(1.0, 5.0)], [0]),
    # 1 is dominated by 0 (cheaper and better); 3 by 2; the rest trade compute for quality.
    ([(1.0, 3.0), (2.0, 3.5), (4.0, 2.0), (5.0, 2.5), (8.0, 1.0)], [0, 2, 4]),
    # Equal compute: only the better one; equal points: only the first.
    ([(2.0, 3.0), (2.0, 2.0), (1.0, 4.0), (1.0, 4.0)], [2, 1]),
    # A better run that costs more is on the frontier; a worse one is not.
    ([(10.0, 1.0), (1.0, 2.0), (20.0, 1.0)], [1, 0]),
])
def test_the_pareto_frontier_keeps_the_runs_no_other_beats_on_both(points, frontier):
    assert pareto_frontier(points) == frontier


def _row(name: str, flops: float | None, **metrics: float | None) -> CompareRow:
    return CompareRow(name=name, hash=name.encode().hex().ljust(64, "0"), output_path=f"/nowhere/{name}",
                      metrics={"loss": 3.0, "val_loss": metrics.pop("val_loss", 3.0), "steps_trained": 10.0,
                               "params": 1e5, "model_flops": flops, "mfu": 0.1, **metrics})


def test_the_leaderboard_ranks_bits_per_byte_against_model_flops_and_marks_the_frontier():
    rows = [_row("a", 1e12, **{"held-out.bpb": 2.0, "tiny.bpb": None}),
            _row("b", 4e12, **{"held-out.bpb": 2.5, "tiny.bpb": 1.5}),
            _row("c", 2e12, **{"held-out.bpb": 1.5, "tiny.bpb": None}),
            _row("d", None, **{"held-out.bpb": 1.0, "tiny.bpb": None}),  # no FLOPs recorded: not ranked
            _row("e", 8e12, **{"held-out.bpb": 1.2, "tiny.bpb": None, "held-out@5.bpb": 0.1})]
    comparison = Comparison(rows=rows, fields=[], metrics=["loss", "val_loss", "steps_trained", "params",
                                                           "model_flops", "mfu", "held-out.bpb", "tiny.bpb",
                                                           "held-out@5.bpb"])
    board = leaderboard_of(comparison)
    assert board is not None and board.metric == "held-out.bpb"  # scored for the most runs
    assert [e.label.split("-")[0] for e in board.entries] == ["a", "c", "b", "e"]
    assert [e.label.split("-")[0] for e in board.frontier] == ["a", "c", "e"]
    page = render_views({"leaderboard": board.to_json(), "scaling": []})
    assert page.count('data-frontier="true"') == 3 and page.count('data-frontier="false"') == 1
    assert page.count('class="run on-frontier"') == 3 and 'class="frontier"' in page
    assert "Leaderboard: held-out.bpb against model FLOPs" in page


def test_without_bits_per_byte_the_leaderboard_ranks_validation_loss():
    rows = [_row("a", 1e12, val_loss=3.0), _row("b", 2e12, val_loss=3.2), _row("c", 3e12, val_loss=None)]
    board = leaderboard_of(Comparison(rows=rows, fields=[], metrics=["loss", "val_loss", "model_flops"]))
    assert board is not None and board.metric == "val_loss"
    assert [(e.label.split("-")[0], e.frontier) for e in board.entries] == [("a", True), ("b", False)]
    assert leaderboard_of(Comparison(rows=[_row("x", None)], fields=[], metrics=["val_loss"])) is None


def test_flops_are_counted_from_the_model_trained_where_the_trainer_gives_none():
    result = {"steps": 20, "model": dataclasses.asdict(MODEL), "mfu": 0.02, "devices": 1}
    counted = flops_accounting(result, seq_len=32, batch_size=4)
    tokens = 20 * 4 * 32
    assert counted["num_params"] == MODEL.num_params() == 320 * 16 * 2 + 2 * 16 * 16 + 2 * 16 * 16 + 3 * 16 * 32 + 3 * 16
    assert counted["flops_per_token"] == MODEL.flops_per_token(32)
    assert counted["tokens_trained"] == tokens and counted["model_flops"] == MODEL.flops_per_token(32) * tokens
    assert counted["mfu"] == 0.02 and counted["hardware_flops"] is None
    # What the trainer reports is kept as it is.
    given = {"num_params": 7, "flops_per_token": 11.0, "tokens_trained": 5, "model_flops": 55.0,
             "hardware_flops": 60.0, "hfu": 0.5, "peak_flops_per_device": 1e12, "peak_flops_source": "config"}
    assert flops_accounting({**result, **given}, seq_len=32, batch_size=4) == {**given, "mfu": 0.02}


def test_a_speedrun_record_holds_size_compute_time_hardware_and_quality():
    summary = {"final_loss": 3.1, "val_loss": 3.3, "steps": 20, **flops_accounting(
        {"steps": 20, "model": dataclasses.asdict(MODEL), "mfu": 0.02}, seq_len=32, batch_size=4)}
    record = speedrun_record(summary, wall_s=12.5, device_kind="cpu", device_count=2)
    assert record == {"format": SPEEDRUN_FORMAT, "params": MODEL.num_params(), "tokens": 2560,
                      "model_flops": MODEL.flops_per_token(32) * 2560, "hardware_flops": None, "mfu": 0.02,
                      "wall_s": 12.5, "val_loss": 3.3, "final_loss": 3.1, "steps": 20, "device_kind": "cpu",
                      "device_count": 2}
