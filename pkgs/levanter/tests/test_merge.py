"""Averaging checkpoints: the weighted mean, deterministic to the byte, refused across shapes."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os

import numpy as np
import pytest

from levanter.config import TrainLmConfig, config_to_dict
from levanter.data.spec import DatasetSpec
from levanter.merge import average_models, normalized_weights
from levanter.optim import AdamConfig
from levanter.training.final import save_final_params
from testsupport.levanter_data import TINY_MODEL, random_params


def _run(folder: str, model=TINY_MODEL, seed: int = 0) -> str:
    """A finished run's output as readers see it: its config and final parameters (no training)."""
    os.makedirs(folder, exist_ok=True)
    config = TrainLmConfig.from_settings((DatasetSpec("/data"),), model, AdamConfig())
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config_to_dict(config), f)
    save_final_params(folder, random_params(model, seed=seed))
    return folder


def test_the_merge_is_the_weighted_mean_in_float64_and_the_same_bytes_every_time(tmp_path) -> None:
    runs = [_run(str(tmp_path / f"run{i}"), seed=i) for i in range(3)]
    config, merged = average_models([(r, None) for r in runs], [1.0, 1.0, 2.0])
    assert config == TINY_MODEL
    sources = [random_params(TINY_MODEL, seed=i) for i in range(3)]
    for module, names in merged.items():
        for name, value in names.items():
            expected = sum(w * s[module][name].astype(np.float64) for w, s in zip((0.25, 0.25, 0.5), sources, strict=True))
            np.testing.assert_array_equal(value, expected.astype(np.float32))
            assert value.dtype == np.float32

    def digest(i: int) -> str:
        out = str(tmp_path / f"merged{i}")
        save_final_params(out, average_models([(r, None) for r in runs], [1.0, 1.0, 2.0])[1])
        return hashlib.sha256(open(os.path.join(out, "final", "params.npz"), "rb").read()).hexdigest()

    assert digest(1) == digest(2)


def test_runs_of_different_shapes_and_bad_weights_are_one_line_errors(tmp_path) -> None:
    narrow = _run(str(tmp_path / "narrow"))
    wide = _run(str(tmp_path / "wide"), model=dataclasses.replace(TINY_MODEL, intermediate_dim=128))
    with pytest.raises(ValueError, match=r"^checkpoints from runs of different shapes: .*narrow \(final\) and "
                                         r".*wide \(final\) differ in intermediate_dim 64 != 128$"):
        average_models([(narrow, None), (wide, None)])
    for weights, problem in (([1.0], "one weight per checkpoint \\(2\\)"), ([1.0, -1.0], "finite numbers >= 0"),
                             ([0.0, 0.0], "must not all be 0")):
        with pytest.raises(ValueError, match=problem):
            normalized_weights(weights, 2)
