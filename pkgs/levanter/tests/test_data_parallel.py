"""Data parallelism over 2 CPU devices matches 1 device on the same global batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from levanter.config import config_to_dict
from levanter.trainer import main
from testsupport.accumulation import one_step, unequal_windows
from testsupport.levanter_data import cpu_device_env, tiny_config

# Same math, different reduction order (per-device partial sums, then an all-reduce): float32
# results agree to a few ulps per step, far inside this relative tolerance.
RTOL = 1e-5


def _losses(out: str) -> list[float]:
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    return [r["loss"] for r in rows if "loss" in r]


@pytest.fixture(scope="module")
def one_device(shared_tiny_dataset, tmp_path_factory) -> str:
    """The 3-step run on this process's one device that the 2-device and accumulated runs must match."""
    out = str(tmp_path_factory.mktemp("one") / "run")
    main(tiny_config(shared_tiny_dataset, num_train_steps=3, eval_batches=0), out)
    return out


@pytest.fixture(scope="module")
def two_devices(shared_tiny_dataset, tmp_path_factory) -> tuple[dict, str, str]:
    """One process with 2 CPU devices (a process start costs seconds): the chat step of
    ``testsupport.accumulation`` on a data mesh, then the 3-step run over both devices, which also
    accumulates over 2 micro-batches (its loss and update are still those of the whole global batch).
    ``(its JSON line, the step's folder, the run's output)``."""
    root = tmp_path_factory.mktemp("two")
    config, run = root / "cfg.json", str(root / "run")
    config.write_text(json.dumps(config_to_dict(
        tiny_config(shared_tiny_dataset, num_train_steps=3, eval_batches=0, grad_accum=2))))
    proc = subprocess.run([sys.executable, "-m", "testsupport.accumulation", str(root), str(config), run],
                          env=cpu_device_env(2), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), str(root), run


def test_two_devices_match_one(one_device, two_devices):
    result, _, two = two_devices
    assert result["run"]["steps"] == 3 and result["run"]["devices"] == 2
    a, b = _losses(one_device), _losses(two)
    assert len(a) == len(b) == 3
    np.testing.assert_allclose(b, a, rtol=RTOL)
    # Training moved the loss, so equality is not a trivial property of the initial state.
    assert abs(a[2] - a[0]) > 100 * RTOL * abs(a[0])
    p1 = np.load(os.path.join(one_device, "final", "params.npz"))
    p2 = np.load(os.path.join(two, "final", "params.npz"))
    # Adam divides by sqrt(v), so an entry with a near-zero gradient turns ulp-level gradient
    # differences into update differences of up to ~lr * 1e-2; 3 steps at lr 3e-3 stay below 3e-5.
    for key in p1.files:
        np.testing.assert_allclose(p2[key], p1[key], rtol=0, atol=3e-5)


def test_grad_accumulation_matches_full_batch(shared_tiny_dataset, one_device, tmp_path):
    accum = str(tmp_path / "accum")
    main(tiny_config(shared_tiny_dataset, num_train_steps=3, eval_batches=0, grad_accum=4), accum)
    np.testing.assert_allclose(_losses(accum), _losses(one_device), rtol=RTOL)


def test_a_data_mesh_and_accumulation_on_it_take_the_one_device_step_of_unequal_chat_masks(two_devices):
    """Micro-batches of 52 and 4 loss targets: split over two devices, and over two devices and two
    micro-batches, the step is the one device's whole-batch step (the mean over all 56 targets)."""
    result, folder, _ = two_devices
    assert result["devices"] == 2
    whole, metrics = one_step(unequal_windows(), 1)
    for accum in (1, 2):
        on_mesh = np.load(os.path.join(folder, f"accum{accum}.npz"))
        assert sorted(on_mesh.files) == sorted(whole)
        for key, value in whole.items():
            np.testing.assert_allclose(on_mesh[key], value, rtol=1e-5, atol=1e-7, err_msg=f"grad_accum={accum}: {key}")
        for name in ("loss", "z_loss", "grad_norm"):
            np.testing.assert_allclose(result["metrics"][str(accum)][name], metrics[name], rtol=1e-5, err_msg=name)
