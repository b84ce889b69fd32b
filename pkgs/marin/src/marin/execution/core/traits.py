"""Step traits: how the engine treats the steps of one function, beyond running it.

A step function declares its traits where it is defined::

    @step_function(StepTraits(scale_fields=("trainer.num_train_steps",), volatile_files=("metrics.jsonl",)))
    def train_lm_step(config, output_path): ...

The decorator returns a :class:`StepFunction`: it is called like the function and has the same
identity (module and qualified name), so wrapping a function never changes a step's hash. The
engine asks :func:`traits_of` for a step's traits; a plain function has the defaults.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from marin.execution.core.step import Step

__all__ = ["ALWAYS_VOLATILE", "ON_ACCELERATOR", "EarlierBuilds", "Expander", "PlanNote", "PlanNotes", "Start",
           "StartPlanner", "StepFunction", "StepTraits", "step_function", "traits_of", "uses_accelerator", "volatile_patterns"]

EarlierBuilds = Callable[[str], Sequence[tuple[str, Any]]]
"""Finished builds of a step name, newest first: (output path, provenance record: the store's
``marin.execution.store.provenance_record.Provenance``, which this layer may not name)."""



@dataclass(frozen=True)
class Start:
    """Where a build starts, as the plan decided it: what ``marin plan`` says, and what the running
    step is handed (:attr:`marin.execution.run.worker.RunningStep.start`). Never part of a hash.

    Attributes:
        note: the line the plan shows ("starts from ... at step 10", "extends ... from step 10",
            or why no earlier build can be extended).
        extends: the files folder of an earlier build of the same step that this build continues
            from (an extension); None when it starts as its config says (from step 0, or a branch
            its config names).
        step: the checkpoint of ``extends`` it continues from.
        reuse_parts: the files folder of an earlier build of the same step, made from other input
            files, whose per-file outputs this build may copy for every input file whose
            fingerprint is unchanged (:mod:`marin.processing.incremental`); None: every file is
            processed.
    """

    note: str
    extends: str | None = None
    step: int | None = None
    reuse_parts: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.note, str) or not self.note:
            raise TypeError(f"Start.note must be a non-empty line of text, got {self.note!r}")
        if (self.extends is None) != (self.step is None):
            raise ValueError(f"Start.extends and Start.step go together, got extends={self.extends!r}, step={self.step!r}")
        if self.step is not None and (not isinstance(self.step, int) or isinstance(self.step, bool) or self.step <= 0):
            raise ValueError(f"Start.step must be a positive int, got {self.step!r}")
        if self.reuse_parts is not None and (not isinstance(self.reuse_parts, str) or not self.reuse_parts):
            raise TypeError(f"Start.reuse_parts must be a folder (a non-empty string) or None, got {self.reuse_parts!r}")
        if self.reuse_parts is not None and self.extends is not None:
            raise ValueError("Start.extends and Start.reuse_parts exclude each other: a build continues an earlier "
                             "one, or reuses its per-file outputs")

    def to_json(self) -> dict[str, Any]:
        return {"note": self.note, "extends": self.extends, "step": self.step, "reuse_parts": self.reuse_parts}


StartPlanner = Callable[[Step, Mapping[int, str], EarlierBuilds], "Start | None"]
"""Where a build of a step starts (a branch, an extension of an earlier build), given the plan's
hashes (``{id(step): hash}``) and the earlier builds; None for "as its config says, nothing to
note". The plan decides it once; the run hands that decision to the step, which never looks for
earlier builds itself."""

@dataclass(frozen=True)
class PlanNote:
    """A line the plan shows for a step that will run: what it will do (a note) or a risk (a warning)."""

    text: str
    warning: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not self.text or "\n" in self.text:
            raise TypeError(f"PlanNote.text must be one non-empty line, got {self.text!r}")


PlanNotes = Callable[[Step, Mapping[int, str]], Sequence[PlanNote]]
"""What the plan says of a step that will run, given the output folder of every step object of the
graph (``{id(step): folder}``; its inputs' folders hold their outputs when they are built). It may
read those outputs (a few small files), never write."""

Expander = Callable[[Step, str], Sequence[Any]]
"""The steps (or handles) a built step's output decides: called with the step (its config as
written, placeholders and all, so new steps can read the step's inputs) and its output folder,
which it may read. A pure function of the output: the same output always gives the same steps."""

ALWAYS_VOLATILE: tuple[str, ...] = (".commits/*",)
"""Output files that differ between two builds of the same inputs, whatever the step: zephyr's
shard commit records name the absolute paths of the input files they were made from (found by
building the same graph under two prefixes and comparing manifests)."""


@dataclass(frozen=True)
class StepTraits:
    """What the engine may know of a step function's steps.

    Attributes:
        scale_fields: dotted config fields (as ``marin compare`` names them) whose product is the
            step's work; estimates scale earlier builds' durations by it (tokens, for training).
        volatile_files: glob patterns (``*`` spans folders) of output files that differ between
            two builds of the same inputs (times, random names); left out of the output digest.
        plan_start: decides, when the plan is made, where a build starts (:data:`StartPlanner`);
            ``marin plan`` shows it and the run hands it to the step.
        expand: the steps its output decides (:data:`Expander`): once the step is built (or found
            built), the runner plans and runs them in the same run; steps that read this step
            wait until everything it expanded into is built.
        shares_names: its steps may share a name with a step of another identity in one graph
            and still run, with a warning (Marin's executor allows it); otherwise such a graph
            is refused before anything runs (:mod:`marin.execution.plan.clashes`).
        plan_notes: lines ``marin plan`` shows for a step that will run (:data:`PlanNotes`): what
            it will do with its inputs, and warnings.
        accelerator: its steps compute on the accelerator (training, evaluation, sampling, DPO ...):
            on a host that has one, a step that does not say where it runs (``resources``) asks
            for one slot of it, waits its turn for it, and is the only kind of process that sees
            it; every other step runs with it hidden (``JAX_PLATFORMS=cpu``). Mark such a function
            with ``@step_function(StepTraits(accelerator=True))`` (or :data:`ON_ACCELERATOR`).
        open_accelerator: how its step's process opens the accelerator, given the step's config,
            before the function is called (default: JAX's backends, ``iris.accelerator_open.open_jax``).
            Another process holding it then is a wait for it; the function's own errors are failures.
    """

    scale_fields: tuple[str, ...] = ()
    volatile_files: tuple[str, ...] = ()
    plan_start: StartPlanner | None = None
    expand: Expander | None = None
    shares_names: bool = False
    plan_notes: PlanNotes | None = None
    accelerator: bool = False
    open_accelerator: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        for name in ("scale_fields", "volatile_files"):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(v, str) and v for v in value):
                raise TypeError(f"StepTraits.{name} must be a tuple of non-empty strings, got {value!r}")
            object.__setattr__(self, name, tuple(value))
        for name in ("plan_start", "expand", "plan_notes", "open_accelerator"):
            if getattr(self, name) is not None and not callable(getattr(self, name)):
                raise TypeError(f"StepTraits.{name} must be callable, got {getattr(self, name)!r}")
        for name in ("shares_names", "accelerator"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"StepTraits.{name} must be a bool, got {getattr(self, name)!r}")


_DEFAULT = StepTraits()

ON_ACCELERATOR = StepTraits(accelerator=True)
"""The traits of a step function that computes on the accelerator and needs nothing else:
``@step_function(ON_ACCELERATOR)``."""


class StepFunction:
    """A step function and its :class:`StepTraits`; called as the function is, same identity."""

    def __init__(self, fn: Callable[[Any, str], Any], traits: StepTraits):
        if not callable(fn):
            raise TypeError(f"step_function needs a function, got {fn!r}")
        if not isinstance(traits, StepTraits):
            raise TypeError(f"step_function needs StepTraits, got {type(traits).__name__}")
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.traits = traits
        # Its identity (``module:qualname``) is the function's: wrapping never changes a step's hash.
        self.__qualname__: str = fn.__qualname__

    def __call__(self, config: Any, output_path: str) -> Any:
        return self.fn(config, output_path)

    def __reduce__(self) -> str:
        # Pickled by reference, as a module-level function is: its module holds this object by name.
        return self.__qualname__

    def __repr__(self) -> str:
        return f"<step function {self.__module__}.{self.__qualname__}>"


def step_function(traits: StepTraits) -> Callable[[Callable[[Any, str], Any]], StepFunction]:
    """Declare a step function's traits where it is defined (see the module docstring)."""
    return lambda fn: StepFunction(fn, traits)


def traits_of(fn: Any) -> StepTraits:
    """The traits of a step function (the defaults for a plain function)."""
    return fn.traits if isinstance(fn, StepFunction) else _DEFAULT


def uses_accelerator(step: Step) -> bool:
    """Whether ``step``'s function computes on the accelerator (:attr:`StepTraits.accelerator`)."""
    return traits_of(step.fn).accelerator


def volatile_patterns(step: Step) -> tuple[str, ...]:
    """Glob patterns of a step's output files left out of its output digest."""
    return ALWAYS_VOLATILE + traits_of(step.fn).volatile_files
