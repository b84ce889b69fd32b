"""FLOPs accounting of a training run, and its speedrun-style results file (``speedrun.json``).

levanter's trainer reports a run's parameters and FLOPs (``num_params``, ``flops_per_token``,
``tokens_trained``, ``model_flops``, ``hardware_flops``, ``mfu``, ``hfu``, ``peak_flops_per_device``
and its source). Where a trainer does not, the model config's own counts
(``LlamaConfig.num_params()``, ``flops_per_token(seq_len)``) fill them in, so every training step
writes the same fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = ["SPEEDRUN_FILE", "SPEEDRUN_FORMAT", "flops_accounting", "speedrun_record"]

SPEEDRUN_FILE = "speedrun.json"
"""One training run's results as a leaderboard entry: size, compute, time, hardware, quality."""
SPEEDRUN_FORMAT = "marin.speedrun/v1"


def _model_config(model: Any) -> Any:
    """The trained model's config from what the trainer returned (its fields as a dict, or the config)."""
    from levanter.models.llama import LlamaConfig

    if isinstance(model, LlamaConfig):
        return model
    if isinstance(model, Mapping):
        known = {f.name for f in dataclasses.fields(LlamaConfig)}
        return LlamaConfig(**{k: v for k, v in model.items() if k in known})
    raise ValueError(f"no model config to count FLOPs of, got {type(model).__name__}")


def flops_accounting(result: Mapping[str, Any], *, seq_len: int, batch_size: int) -> dict[str, Any]:
    """The FLOPs fields of a run's summary: those the trainer returned in ``result``, the rest
    (parameters, FLOPs per token, tokens and model FLOPs trained) computed from the model config
    it trained (``result["model"]``) and the steps it reached (``result["steps"]``)."""
    out = {k: result.get(k) for k in ("num_params", "flops_per_token", "tokens_trained", "model_flops",
                                      "hardware_flops", "mfu", "hfu", "peak_flops_per_device", "peak_flops_source")}
    if all(out[k] is not None for k in ("num_params", "flops_per_token", "tokens_trained", "model_flops")):
        return out
    config = _model_config(result.get("model"))
    steps = int(result.get("steps") or 0)
    out["num_params"] = out["num_params"] if out["num_params"] is not None else config.num_params()
    if out["flops_per_token"] is None:
        out["flops_per_token"] = config.flops_per_token(seq_len)
    if out["tokens_trained"] is None:
        out["tokens_trained"] = steps * batch_size * seq_len
    if out["model_flops"] is None:
        out["model_flops"] = out["flops_per_token"] * out["tokens_trained"]
    return out


def speedrun_record(summary: Mapping[str, Any], *, wall_s: float, device_kind: str,
                    device_count: int) -> dict[str, Any]:
    """The ``speedrun.json`` of a run whose summary (``train_summary.json``, FLOPs fields included)
    is ``summary``, trained in ``wall_s`` seconds on ``device_count`` devices of ``device_kind``.

    Its quality is the validation loss the trainer measured (nats per token); bits per byte come
    from the run's eval steps (:mod:`marin.experiment.results`), which the report's leaderboard reads.
    """
    return {
        "format": SPEEDRUN_FORMAT,
        "params": summary.get("num_params"),
        "tokens": summary.get("tokens_trained"),
        "model_flops": summary.get("model_flops"),
        "hardware_flops": summary.get("hardware_flops"),
        "mfu": summary.get("mfu"),
        "wall_s": wall_s,
        "val_loss": summary.get("val_loss"),
        "final_loss": summary.get("final_loss"),
        "steps": summary.get("steps"),
        "device_kind": device_kind,
        "device_count": device_count,
    }
