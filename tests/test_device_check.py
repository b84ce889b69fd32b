"""``benchmarks/device_check --smoke`` on a CPU: the accelerator check cannot rot unnoticed.

Two configurations in one process: the nano model trains and gets a row, and ``llama_1_4b`` at
8 x 2048 on a stated 16 GiB device is refused in one line naming the estimate and the fix.
"""

from __future__ import annotations

import json
import math
import os
import tempfile

import pytest

from benchmarks.device_check import main


def test_smoke_rows_and_a_refusal(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    scratch = tmp_path / "scratch"  # the check's temporary folders go here, and must be gone after it
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    rows = main(["--smoke", "--config", "llama_nano:4x64:full:xla:blockwise:2", "--config", "llama_1_4b:8x2048",
                 "--memory-gib", "16", "--steps", "3", "--warmup", "1", "--out", str(out)])
    ok, refused = rows
    assert (ok["model"], ok["batch"], ok["seq_len"], ok["remat"], ok["attention"], ok["loss"], ok["status"]) == \
        ("llama_nano", 4, 64, "full", "xla", "blockwise", "ok")
    assert refused["loss"] == "blockwise"  # auto, resolved: no TPU here
    assert (ok["unroll"], refused["unroll"]) == (2, 1)  # both layers an iteration, as asked; auto: one
    assert ok["opt_state"] == refused["opt_state"] == "device"
    for key in ("compile_s", "step_ms", "tokens_per_s", "mfu", "mfu_causal", "hbm_step_gib"):
        assert math.isfinite(ok[key]) and ok[key] > 0, key
    # The causal count halves attention's FLOPs: a smaller share of the same peak.
    assert ok["mfu_causal"] < ok["mfu"] and ok["hbm_available_gib"] == 16.0
    # A CPU reports no peak of its own: XLA's count, the donated state counted once.
    assert ok["hbm_from"] == "xla" and ok["hbm_step_gib"] == ok["hbm_xla_gib"] and ok["hbm_device_peak_gib"] is None
    assert refused["status"].startswith("refused: llama_1_4b 8x2048 needs about ")
    assert "GiB" in refused["status"] and "fix:" in refused["status"] and "\n" not in refused["status"]
    printed = capsys.readouterr()
    assert refused["status"] in printed.err
    assert printed.out.splitlines()[1].startswith("model | batch | seq_len | remat | attention | loss | unroll | compile_s")
    saved = json.loads((out / "device_check.json").read_text())
    assert [r["status"] == "ok" for r in saved["rows"]] == [True, False]
    assert "| llama_nano | 4 | 64 | full | xla | blockwise | 2 |" in (out / "device_check.md").read_text()
    assert not [p.name for p in scratch.iterdir() if p.name.startswith("device-check-")]


def test_offload_both_runs_each_configuration_with_the_state_on_the_device_and_on_the_host():
    from benchmarks.device_check import _parse

    specs = _parse(["--config", "llama_1_4b:8x2048:full:splash", "--config", "llama_600m:16x1024",
                    "--offload-optimizer", "both"]).specs
    assert [(s.model, s.offload) for s in specs] == [("llama_1_4b", False), ("llama_1_4b", True),
                                                     ("llama_600m", False), ("llama_600m", True)]
    assert [s.offload for s in _parse(["--offload-optimizer"]).specs] == [True]  # alone: as before
    assert [s.offload for s in _parse([]).specs] == [False]


def test_hbm_is_the_devices_own_peak_where_this_configuration_set_it():
    from benchmarks.device_check import _hbm, _own_peak
    from levanter.memory import MemoryReport

    report = MemoryReport(mesh={}, params_bytes_per_device=0, params_bytes_total=0, opt_state_bytes_per_device=0,
                          opt_state_bytes_total=0, temp_bytes_per_device=10, step_argument_bytes_per_device=8,
                          step_output_bytes_per_device=8, step_alias_bytes_per_device=8, step_peak_bytes_per_device=18)
    assert _own_peak(None, 15) == 15 and _own_peak(12, 15) == 15  # raised here: this configuration's own
    assert _own_peak(15, 15) is None and _own_peak(None, None) is None  # an earlier one's, or not reported
    assert _hbm(report, 15) == (15, "device")  # the chip's count over XLA's, which may not be all live at once
    assert _hbm(report, None) == (18, "xla")


def test_unknown_model_is_named(tmp_path):
    with pytest.raises(SystemExit, match="no model 'llama_7x' in experiments/llama.py; models are: .*llama_150m"):
        main(["--smoke", "--model", "llama_7x", "--out", os.fspath(tmp_path)])


def _perfetto(path: os.PathLike, events: list[dict]) -> None:
    import gzip

    meta = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:TPU:0"}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "XLA Ops"}}]
    os.makedirs(path, exist_ok=True)
    with gzip.open(os.path.join(path, "perfetto_trace.json.gz"), "wt") as f:
        json.dump({"traceEvents": meta + [dict(e, ph="X", pid=1, tid=2) for e in events]}, f)


def test_profile_summary_charges_a_loop_only_what_its_body_leaves(tmp_path):
    from benchmarks.device_profile import summarise_trace

    # One step: a while loop (0-100 us) whose body ran two ops (10-40, 50-90), then an op after it.
    _perfetto(tmp_path / "t", [
        {"name": "while.3", "ts": 0, "dur": 100, "args": {"tf_op": "jit(step)/while"}},
        {"name": "fusion.1", "ts": 10, "dur": 30, "args": {"tf_op": "jit(step)/jvp(cross_entropy)/while/body/closed_call/bkd,dv->bkv/dot_general"}},
        {"name": "fusion.2", "ts": 50, "dur": 40, "args": {"tf_op": "jit(step)/transpose(jvp(embed))/scatter-add"}},
        {"name": "fusion.1", "ts": 100, "dur": 20, "args": {}},
    ])
    summary = summarise_trace(str(tmp_path / "t"))
    ops = {name: (ms, share, src) for name, ms, share, src in summary["ops"]}
    assert summary["total_ms"] == pytest.approx(0.12)  # 120 us of device time, none counted twice
    assert ops["fusion.1"][:2] == (pytest.approx(0.05), pytest.approx(50 / 120, abs=1e-4))
    assert ops["while.3"][0] == pytest.approx(0.03)  # 100 less the 70 of its body
    assert ops["fusion.2"][2].endswith("scatter-add")
    assert summary["kinds"]["loss"] == pytest.approx(30 / 120, abs=1e-4)  # by each op's own source
    assert summary["kinds"]["embedding"] == pytest.approx(40 / 120, abs=1e-4)
    assert any("scatter-add" in line for line in summary["lines"])


def test_profile_summary_names_the_splash_kernels_share(tmp_path):
    from benchmarks.device_profile import summarise_trace

    # Two layers' splash kernels (each op a name of its own, XLA's ".N") beside a matmul.
    _perfetto(tmp_path / "t", [
        {"name": "splash_mha_fwd_residuals.1", "ts": 0, "dur": 10, "args": {}},
        {"name": "splash_mha_dkv_no_residuals.1", "ts": 10, "dur": 20, "args": {}},
        {"name": "splash_mha_dkv_no_residuals.2", "ts": 30, "dur": 20, "args": {}},
        {"name": "splash_mha_dq_no_residuals", "ts": 50, "dur": 10, "args": {}},
        {"name": "fusion.7", "ts": 60, "dur": 40, "args": {"tf_op": "jit(step)/mlp/dot_general"}},
    ])
    summary = summarise_trace(str(tmp_path / "t"))
    assert summary["splash"]["share"] == pytest.approx(0.6)
    assert summary["splash"]["kernels"] == {"splash_mha_dkv_no_residuals": pytest.approx(0.4),
                                            "splash_mha_fwd_residuals": pytest.approx(0.1),
                                            "splash_mha_dq_no_residuals": pytest.approx(0.1)}
    assert "splash kernels 60.0% (0.1 ms): splash_mha_dkv_no_residuals 40.0%" in summary["lines"][1]


def test_profile_summary_times_the_host_copies_in_flight_and_waited_for(tmp_path):
    from benchmarks.device_profile import summarise_trace

    # A host-to-device copy (S(5): host memory) in flight 0-100 us, 80 of it under a fusion, waited
    # for 10 us in its copy-done; a copy between the chip's own memories (S(1)) is not the host's.
    host = "(bf16[16,2048]{1,0}, bf16[16,2048]{1,0:S(5)}, u32[]) copy-start(%p)"
    _perfetto(tmp_path / "t", [
        {"name": "copy-start.3", "ts": 0, "dur": 1, "args": {"long_name": host}},
        {"name": "copy-start.4", "ts": 2, "dur": 1, "args": {"long_name": "(f32[8]{0:S(1)}, f32[8]{0}) copy-start"}},
        {"name": "copy-done.4", "ts": 5, "dur": 5, "args": {"long_name": "f32[8]{0:S(1)} copy-done"}},
        {"name": "fusion.1", "ts": 10, "dur": 80, "args": {}},
        {"name": "copy-done.3", "ts": 90, "dur": 10, "args": {"long_name": "bf16[16,2048]{1,0} copy-done"}},
    ])
    copies = summarise_trace(str(tmp_path / "t"))["copies"]
    assert (copies["pairs"], copies["host_named"]) == (1, True)
    assert copies["in_flight_ms"] == pytest.approx(0.1) and copies["waited_ms"] == pytest.approx(0.01)
    assert copies["hidden"] == pytest.approx(0.9) and copies["waited_share"] == pytest.approx(10 / 97, abs=1e-4)


# A scheduled entry computation in a TPU dump's form: S(5) marks host memory; a copy-start's result
# is (destination, source, context).
_SCHEDULED = """HloModule jit_step, is_scheduled=true

%body (p: (s32[])) -> (s32[]) {
  %p = (s32[]) parameter(0)
}

ENTRY %main.0 (m.0: bf16[1024,512], w.0: f32[8]) -> (bf16[1024,512]) {
  %m.0 = bf16[1024,512]{1,0:T(8,128)(2,1)S(5)} parameter(0)
  %copy-start.7 = (bf16[1024,512]{1,0:T(8,128)(2,1)}, bf16[1024,512]{1,0:T(8,128)(2,1)S(5)}, u32[]{:S(2)}) copy-start(%m.0)
  %copy-start.8 = (f32[8]{0:S(1)}, f32[8]{0}, u32[]{:S(2)}) copy-start(%w.0)
  %while.3 = (s32[]) while(%tuple.1), condition=%cond, body=%body
  %copy-done.8 = f32[8]{0:S(1)} copy-done(%copy-start.8)
  %copy-done.7 = bf16[1024,512]{1,0:T(8,128)(2,1)} copy-done(%copy-start.7)
  %fusion.2 = bf16[1024,512]{1,0:T(8,128)(2,1)} fusion(%copy-done.7), kind=kLoop, calls=%f
  %copy-start.9 = (bf16[1024,512]{1,0:T(8,128)(2,1)S(5)}, bf16[1024,512]{1,0:T(8,128)(2,1)}, u32[]{:S(2)}) copy-start(%fusion.2)
  %copy-done.9 = bf16[1024,512]{1,0:T(8,128)(2,1)S(5)} copy-done(%copy-start.9)
  ROOT %tuple.4 = (bf16[1024,512]{1,0:T(8,128)(2,1)S(5)}) tuple(%copy-done.9)
}
"""


def test_scheduled_host_copies_say_which_transfers_a_loop_runs_under():
    from benchmarks.host_copies import scheduled_host_copies

    copies = scheduled_host_copies(_SCHEDULED)
    mib = 1024 * 512 * 2 / 2**30
    assert copies["loops"] == 1
    # The moments come in under the loop; they go back after it with nothing to hide them; the
    # copy between the chip's own memories (S(1)) is neither.
    assert copies["h2d"] == {"copies": 1, "gib": round(mib, 3), "under_loops_gib": round(mib, 3),
                             "first_start": 0.1, "last_done": 0.5}
    assert copies["d2h"]["copies"] == 1 and copies["d2h"]["under_loops_gib"] == 0.0
    with pytest.raises(ValueError, match="no ENTRY computation"):
        scheduled_host_copies("HloModule m\n")
