"""What a training run reports when it returns: :class:`TrainSummary`.

Pure data (no JAX import), so whoever reads a run's summary need not load the trainer.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from levanter.flops import FlopsSummary
from levanter.memory import MemoryReport

__all__ = ["TrainSummary"]


@dataclasses.dataclass(frozen=True)
class TrainSummary:
    """One run of ``levanter.trainer.main``: how far it got, its losses, where it wrote, what it ran on.

    :meth:`to_json` is the run's summary as JSON data (what ``train_summary.json`` is made from).
    """

    final_loss: float
    """The last step's training loss (NaN if no step ran and there was no batch to score)."""
    val_loss: float | None
    """The latest validation loss (None without validation data)."""
    steps: int
    """Steps trained in all, this attempt's and earlier ones'."""
    start_step: int
    """Steps already trained when this attempt began (> 0 after a resume)."""
    output_path: str
    checkpoint_path: str
    params_path: str
    config_path: str
    metrics_path: str
    model: Any
    """The model config trained (a ``ModelConfig``, with the data's vocabulary)."""
    tokens_per_s: float
    """Of the last step logged (NaN if none)."""
    checkpoint_blocked_s: float
    """Seconds the loop waited on checkpoint saves."""
    devices: int
    mesh: dict[str, int]
    """Axis name -> size."""
    processes: int
    memory: MemoryReport
    run_id: str
    flops: FlopsSummary
    data_offset: int = 0
    """Step ``t`` trained on elements ``[t * batch_size + data_offset, ...)`` of its mixture's stream:
    what ``levanter.data.usage.mixture_usage`` needs to replay which dataset gave each window (not
    in :meth:`to_json`, whose keys stay as they were)."""

    def to_json(self) -> dict[str, Any]:
        """The summary as JSON data; its keys and their order are what ``main`` has always returned."""
        return {
            "final_loss": self.final_loss,
            "val_loss": self.val_loss,
            "steps": self.steps,
            "start_step": self.start_step,
            "output_path": self.output_path,
            "checkpoint_path": self.checkpoint_path,
            "params_path": self.params_path,
            "config_path": self.config_path,
            "metrics_path": self.metrics_path,
            "model": dataclasses.asdict(self.model),
            "tokens_per_s": self.tokens_per_s,
            "checkpoint_blocked_s": self.checkpoint_blocked_s,
            "devices": self.devices,
            "mesh": dict(self.mesh),
            "processes": self.processes,
            "memory": self.memory.to_json(),
            "run_id": self.run_id,
            **self.flops.to_json(),
        }
