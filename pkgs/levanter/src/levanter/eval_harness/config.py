"""Settings of benchmark evaluation through the lm-evaluation-harness (no JAX, no lm_eval imported here)."""

from __future__ import annotations

import dataclasses

from levanter.config import ComputeDtype
from rigging.fields import added_field

__all__ = ["DEFAULT_EOS_TOKEN", "HarnessConfig", "TaskRunConfig"]

DEFAULT_EOS_TOKEN = "<|endoftext|>"


def _positive_int(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


@dataclasses.dataclass(frozen=True)
class HarnessConfig:
    """How a levanter model answers the harness's requests."""

    batch_size: int = 8
    """Rows of ``seq_len`` tokens per forward pass (a multiple of the mesh's batch shards; scores do not depend on it)."""
    seq_len: int = 512
    """Tokens per row: the longest context the model sees; longer requests lose tokens on the left."""
    max_gen_toks: int = 256
    """Tokens ``generate_until`` produces when a task's generation settings name no limit."""
    eos_token: str = DEFAULT_EOS_TOKEN
    """The tokenizer's end-of-document token: the context of an empty context and of rolling
    windows (documents follow it in training), and a stop sequence of generation."""
    compute_dtype: ComputeDtype = ComputeDtype.FLOAT32
    """Precision of the forward pass (parameters are cast to it)."""
    seed: int = added_field(default=0)
    """Where sampled generations draw from when a request names no seed of its own (each request
    gets a seed of its own made from this one, see ``LevanterLM.generate_until``)."""

    def __post_init__(self) -> None:
        for name in ("batch_size", "seq_len", "max_gen_toks"):
            _positive_int(name, getattr(self, name))
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or not 0 <= self.seed < 2**32:
            raise ValueError(f"seed must be an int in [0, 2**32), got {self.seed!r}")
        if self.seq_len < 2:
            raise ValueError(f"seq_len must be >= 2, got {self.seq_len}")
        if not isinstance(self.eos_token, str) or not self.eos_token:
            raise ValueError(f"eos_token must be a non-empty string, got {self.eos_token!r}")
        if isinstance(self.compute_dtype, str):
            object.__setattr__(self, "compute_dtype", ComputeDtype(self.compute_dtype))


@dataclasses.dataclass(frozen=True)
class TaskRunConfig:
    """Which harness tasks to run, and how (the harness's own settings of the same names)."""

    tasks: tuple[str, ...]
    """lm-eval task, group or tag names, or paths of task YAML files."""
    num_fewshot: int | None = None
    """Few-shot examples per prompt (None: each task's own default, else 0)."""
    limit: int | float | None = None
    """Documents per task: a count, or a share of them below 1.0 (None: all)."""
    include_paths: tuple[str, ...] = ()
    """Folders of task YAML files searched for task names before lm-eval's own tasks."""
    bootstrap_iters: int = 1000
    """Bootstrap resamples for the standard errors of non-mean metrics (0: none)."""
    seed: int = 0
    """Seed of the harness's random number generators (few-shot sampling)."""

    def __post_init__(self) -> None:
        if isinstance(self.tasks, str):
            raise ValueError(f"tasks must be a sequence of task names or YAML paths, got the string {self.tasks!r}")
        object.__setattr__(self, "tasks", tuple(self.tasks))
        object.__setattr__(self, "include_paths", tuple(self.include_paths))
        if not self.tasks or not all(isinstance(t, str) and t for t in self.tasks):
            raise ValueError(f"tasks must name at least one task, each a non-empty string, got {self.tasks!r}")
        if len(set(self.tasks)) != len(self.tasks):
            raise ValueError(f"tasks must be distinct, got {self.tasks!r}")
        if self.num_fewshot is not None and (not isinstance(self.num_fewshot, int) or self.num_fewshot < 0):
            raise ValueError(f"num_fewshot must be an int >= 0 or None, got {self.num_fewshot!r}")
        if self.limit is not None and (isinstance(self.limit, bool) or not isinstance(self.limit, int | float)
                                       or self.limit <= 0):
            raise ValueError(f"limit must be a count > 0, a share in (0, 1) or None, got {self.limit!r}")
        if not isinstance(self.bootstrap_iters, int) or self.bootstrap_iters < 0:
            raise ValueError(f"bootstrap_iters must be an int >= 0, got {self.bootstrap_iters!r}")
