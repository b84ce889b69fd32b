"""Kill, preempt and corrupt: training resumes from the right checkpoint with identical results."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import time

import numpy as np
import pytest

from levanter.checkpoint import CheckpointConfig
from levanter.trainer import PREEMPTED_EXIT_CODE, checkpoint_dir, main
from testsupport.levanter_data import final_params, start_trainer, tiny_config

STEPS = 16


def _committed_steps(ckpt_dir: str) -> list[int]:
    if not os.path.isdir(ckpt_dir):
        return []
    return sorted(int(name) for name in os.listdir(ckpt_dir) if name.isdigit())


def _wait_for_checkpoint(proc, ckpt_dir: str, at_least: int, timeout: float = 120.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        steps = _committed_steps(ckpt_dir)
        if steps and steps[-1] >= at_least:
            return steps[-1]
        assert proc.poll() is None, f"trainer exited early ({proc.returncode}): {proc.stderr.read()[-3000:]}"
        time.sleep(0.02)
    raise AssertionError(f"no checkpoint >= {at_least} under {ckpt_dir} within {timeout}s")


def _config(data: str, save_every: int = 1):
    # A checkpoint every step paces the run (a step alone takes under a millisecond here), so a
    # signal reliably lands mid-run. Every run here has the same steps, so the same compiled program.
    return tiny_config(data, num_train_steps=STEPS, checkpoint=CheckpointConfig(save_every=save_every, keep_last=3),
                       eval_batches=0)


def _assert_bitwise_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].dtype == b[key].dtype
        assert np.array_equal(a[key], b[key]), f"{key} differs"


@pytest.fixture(scope="module")
def reference(shared_tiny_dataset, tmp_path_factory) -> dict[str, np.ndarray]:
    """The final parameters of the uninterrupted run that the killed and the preempted runs must end at
    (checkpointed only at its end: saving is no part of what it computes, and 15 saves cost a
    second and a half)."""
    out = str(tmp_path_factory.mktemp("reference") / "run")
    main(_config(shared_tiny_dataset, save_every=STEPS), out)
    return final_params(out)


def test_sigkill_then_rerun_matches_uninterrupted_run(shared_tiny_dataset, reference, tmp_path):
    out = str(tmp_path / "killed")
    cfg = _config(shared_tiny_dataset)
    proc = start_trainer(cfg, out, str(tmp_path / "cfg.json"))
    seen = _wait_for_checkpoint(proc, checkpoint_dir(out), at_least=4)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert not os.path.exists(os.path.join(out, "final")), "the run finished before it was killed"
    assert seen < STEPS

    result = main(cfg, out)
    assert 4 <= result.start_step < STEPS
    assert result.steps == STEPS
    _assert_bitwise_equal(final_params(out), reference)


def test_sigterm_saves_and_exits_resumable(shared_tiny_dataset, reference, tmp_path):
    out = str(tmp_path / "run")
    cfg = _config(shared_tiny_dataset)
    proc = start_trainer(cfg, out, str(tmp_path / "cfg.json"))
    _wait_for_checkpoint(proc, checkpoint_dir(out), at_least=3)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == PREEMPTED_EXIT_CODE, stderr[-3000:]
    assert "preempted by SIGTERM after step" in stderr
    stopped_at = int(stderr.split("preempted by SIGTERM after step ")[1].split(";")[0])
    assert 3 <= stopped_at < STEPS
    assert _committed_steps(checkpoint_dir(out))[-1] == stopped_at
    assert not os.path.exists(os.path.join(out, "final"))

    result = main(cfg, out)
    assert result.start_step == stopped_at
    assert result.steps == STEPS
    # Every step's metrics once: the killed attempt's rows up to the checkpoint, then the resumed run's.
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    assert [r["step"] for r in rows if "loss" in r] == list(range(1, STEPS + 1))
    pairs = [(r["step"], k) for r in rows for k in r if k != "step"]
    assert len(set(pairs)) == len(pairs)
    _assert_bitwise_equal(final_params(out), reference)


def test_corrupt_newest_checkpoint_falls_back_to_previous(shared_tiny_dataset, tmp_path, caplog):
    out = str(tmp_path / "run")
    cfg = _config(shared_tiny_dataset, save_every=4)
    main(cfg, out)
    # The uninterrupted run's final parameters: where the resumed run must end (and write them anew).
    reference = final_params(out)
    shutil.rmtree(os.path.join(out, "final"))
    ckpt = checkpoint_dir(out)
    assert _committed_steps(ckpt) == [8, 12, 16]
    # Overwrite every array file of the newest checkpoint with garbage.
    damaged = 0
    for dirpath, _dirs, files in os.walk(os.path.join(ckpt, "16", "state")):
        for name in files:
            with open(os.path.join(dirpath, name), "wb") as f:
                f.write(b"\x00garbage")
            damaged += 1
    assert damaged

    with caplog.at_level(logging.WARNING, logger="levanter.checkpoint"):
        result = main(cfg, out)
    assert result.start_step == 12 and result.steps == STEPS
    assert any("unreadable" in r.getMessage() and "falling back" in r.getMessage() for r in caplog.records)
    _assert_bitwise_equal(final_params(out), reference)
