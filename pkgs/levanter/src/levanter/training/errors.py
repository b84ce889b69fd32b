"""How a training run stops early: preempted (resumable) or diverged."""

from __future__ import annotations

from fray.types import Preempted

__all__ = ["NonFiniteLossError", "TrainingPreempted"]


class TrainingPreempted(Preempted):
    """SIGTERM arrived: a checkpoint of ``step`` was committed and the run can be resumed.

    ``exit_code`` is what a command-line wrapper should exit with (:data:`fray.types.PREEMPTED_EXIT_CODE`).
    """

    def __init__(self, step: int, checkpoint_path: str):
        super().__init__(f"preempted by SIGTERM after step {step}; checkpoint saved under {checkpoint_path}; "
                         "run again to resume")
        self.step = step
        self.checkpoint_path = checkpoint_path


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite; ``step`` names the (1-based) step."""

    def __init__(self, step: int, loss: float):
        super().__init__(f"training loss is {loss} at step {step}; stopping (lower the learning rate, "
                         "enable gradient clipping or use float32 compute)")
        self.step = step
        self.loss = loss
