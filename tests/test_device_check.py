"""``benchmarks/device_check --smoke`` on a CPU: the accelerator check cannot rot unnoticed.

Two configurations in one process: the nano model trains and gets a row, and ``llama_1_4b`` at
8 x 2048 on a stated 16 GiB device is refused in one line naming the estimate and the fix.
"""

from __future__ import annotations

import json
import math
import os

import pytest

from benchmarks.device_check import main


def test_smoke_rows_and_a_refusal(tmp_path, capsys):
    out = tmp_path / "out"
    rows = main(["--smoke", "--config", "llama_nano:4x64:full:xla", "--config", "llama_1_4b:8x2048",
                 "--memory-gib", "16", "--steps", "3", "--warmup", "1", "--out", str(out)])
    ok, refused = rows
    assert (ok["model"], ok["batch"], ok["seq_len"], ok["remat"], ok["attention"], ok["status"]) == \
        ("llama_nano", 4, 64, "full", "xla", "ok")
    for key in ("compile_s", "step_ms", "tokens_per_s", "mfu", "mfu_causal", "hbm_step_gib"):
        assert math.isfinite(ok[key]) and ok[key] > 0, key
    # The causal count halves attention's FLOPs: a smaller share of the same peak.
    assert ok["mfu_causal"] < ok["mfu"] and ok["hbm_available_gib"] == 16.0
    assert refused["status"].startswith("refused: llama_1_4b 8x2048 needs about ")
    assert "GiB" in refused["status"] and "fix:" in refused["status"] and "\n" not in refused["status"]
    printed = capsys.readouterr()
    assert refused["status"] in printed.err
    assert printed.out.splitlines()[1].startswith("model | batch | seq_len | remat | attention | compile_s")
    saved = json.loads((out / "device_check.json").read_text())
    assert [r["status"] == "ok" for r in saved["rows"]] == [True, False]
    assert "| llama_nano | 4 | 64 | full | xla |" in (out / "device_check.md").read_text()


def test_unknown_model_is_named(tmp_path):
    with pytest.raises(SystemExit, match="no model 'llama_7x' in experiments/llama.py; models are: .*llama_150m"):
        main(["--smoke", "--model", "llama_7x", "--out", os.fspath(tmp_path)])
