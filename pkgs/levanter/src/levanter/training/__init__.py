"""The parts of training: the loss, the step, the state, the loop and its hooks.

``levanter.trainer.main`` puts them together for one config; they are here for whoever needs one
alone (a benchmark, a test, an evaluation hook added to the loop).
"""

from levanter.training.callbacks import Checkpointing, Progress, Validation
from levanter.training.errors import NonFiniteLossError, TrainingPreempted
from levanter.training.hooks import Hook, Hooks, MetricsListener, ScheduledHook, StepInfo
from levanter.training.loop import MetricsSink, Throughput, Trainer
from levanter.training.loss import loss_fn, loss_terms, objective_terms, sequence_logprobs, token_logprobs
from levanter.training.start import Start, starting_state
from levanter.training.state import TrainState, abstract_state, state_initializer
from levanter.training.step import make_train_step

__all__ = [
    "Checkpointing",
    "Hook",
    "Hooks",
    "MetricsListener",
    "MetricsSink",
    "NonFiniteLossError",
    "Progress",
    "ScheduledHook",
    "Start",
    "StepInfo",
    "Throughput",
    "TrainState",
    "Trainer",
    "TrainingPreempted",
    "Validation",
    "abstract_state",
    "loss_fn",
    "loss_terms",
    "make_train_step",
    "objective_terms",
    "sequence_logprobs",
    "starting_state",
    "state_initializer",
    "token_logprobs",
]
