"""Data parallelism over 2 CPU devices matches 1 device on the same global batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

from levanter.trainer import main
from testsupport.accumulation import one_step, unequal_windows
from testsupport.levanter_data import cpu_device_env, start_trainer, tiny_config

# Same math, different reduction order (per-device partial sums, then an all-reduce): float32
# results agree to a few ulps per step, far inside this relative tolerance.
RTOL = 1e-5


def _losses(out: str) -> list[float]:
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    return [r["loss"] for r in rows if "loss" in r]


def test_two_devices_match_one(tiny_dataset, tmp_path):
    one = str(tmp_path / "one")
    main(tiny_config(tiny_dataset, num_train_steps=3, eval_batches=0), one)

    two = str(tmp_path / "two")
    # The 2-device run also accumulates over 2 micro-batches: the step's loss and update are
    # still those of the whole global batch.
    proc = start_trainer(tiny_config(tiny_dataset, num_train_steps=3, eval_batches=0, grad_accum=2), two,
                         str(tmp_path / "cfg.json"), devices=2)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    result = json.loads(stdout.strip().splitlines()[-1])
    assert result["steps"] == 3 and result["devices"] == 2
    a, b = _losses(one), _losses(two)
    assert len(a) == len(b) == 3
    np.testing.assert_allclose(b, a, rtol=RTOL)
    # Training moved the loss, so equality is not a trivial property of the initial state.
    assert abs(a[2] - a[0]) > 100 * RTOL * abs(a[0])
    p1 = np.load(os.path.join(one, "final", "params.npz"))
    p2 = np.load(os.path.join(two, "final", "params.npz"))
    # Adam divides by sqrt(v), so an entry with a near-zero gradient turns ulp-level gradient
    # differences into update differences of up to ~lr * 1e-2; 3 steps at lr 3e-3 stay below 3e-5.
    for key in p1.files:
        np.testing.assert_allclose(p2[key], p1[key], rtol=0, atol=3e-5)


def test_grad_accumulation_matches_full_batch(tiny_dataset, tmp_path):
    full, accum = str(tmp_path / "full"), str(tmp_path / "accum")
    main(tiny_config(tiny_dataset, num_train_steps=2, eval_batches=0), full)
    main(tiny_config(tiny_dataset, num_train_steps=2, eval_batches=0, grad_accum=4), accum)
    np.testing.assert_allclose(_losses(accum), _losses(full), rtol=RTOL)


def test_a_data_mesh_and_accumulation_on_it_take_the_one_device_step_of_unequal_chat_masks(tmp_path):
    """Micro-batches of 52 and 4 loss targets: split over two devices, and over two devices and two
    micro-batches, the step is the one device's whole-batch step (the mean over all 56 targets)."""
    env = cpu_device_env(2)
    proc = subprocess.run([sys.executable, "-m", "testsupport.accumulation", str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["devices"] == 2
    whole, metrics = one_step(unequal_windows(), 1)
    for accum in (1, 2):
        on_mesh = np.load(tmp_path / f"accum{accum}.npz")
        assert sorted(on_mesh.files) == sorted(whole)
        for key, value in whole.items():
            np.testing.assert_allclose(on_mesh[key], value, rtol=1e-5, atol=1e-7, err_msg=f"grad_accum={accum}: {key}")
        for name in ("loss", "z_loss", "grad_norm"):
            np.testing.assert_allclose(result["metrics"][str(accum)][name], metrics[name], rtol=1e-5, err_msg=name)
