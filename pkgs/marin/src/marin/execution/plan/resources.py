"""What a step asks of the machine it runs on: its ``resources``, or by default one CPU, or, for a
step whose function computes on the accelerator, one slot of the host's accelerator.

The plan's estimate (how steps that share the accelerator queue for it) and the runner's
admission read the same answer from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from marin.execution.core.step import Step
from marin.execution.core.traits import uses_accelerator

if TYPE_CHECKING:
    from iris.accelerator import HostAccelerator
    from iris.cluster import ResourceConfig

__all__ = ["accelerator_ignored", "describe_accelerator", "resources_of", "schedule_resources"]


def resources_of(step: Step, accelerator: HostAccelerator | None = None) -> ResourceConfig:
    """The step's iris ``ResourceConfig``: what it says (Marin's ``resources=`` always wins); else,
    when its function computes on the accelerator (``StepTraits.accelerator``) and ``accelerator``
    (this host's) is given, one slot of it; else one CPU.

    Raises:
        TypeError: ``resources`` is not an iris ``ResourceConfig``.
        ValueError: the host's accelerator names no type a step can ask for (the message says how
            to state it).
    """
    # Not at import: a plan with nothing to run never asks (fray's request types, ~2 ms).
    from iris.cluster import ResourceConfig

    if step.resources is not None:
        if not isinstance(step.resources, ResourceConfig):
            raise TypeError(f"step {step.name}: resources must be an iris ResourceConfig or None, "
                            f"got {type(step.resources).__name__}")
        return step.resources
    if accelerator is not None and uses_accelerator(step):
        try:
            return ResourceConfig(accelerator=accelerator.slot_request())
        except ValueError as e:
            raise ValueError(f"step {step.name}: {e}") from None
    return ResourceConfig()


def accelerator_ignored(step: Step) -> str | None:
    """The warning for a step whose function computes on the accelerator (``StepTraits.accelerator``)
    while its ``resources=`` asks for none: it runs on the CPU, with the accelerator hidden; None
    for any other step."""
    resources = step.resources
    if resources is None or not uses_accelerator(step) or getattr(resources, "accelerator", None) is not None:
        return None
    return ("its function computes on the accelerator, but its resources= asks for none: it runs on the CPU "
            "with the accelerator hidden; ask for it in resources= (e.g. ResourceConfig.with_tpu(...)) "
            "or leave resources= out to take one slot of this host's")


def describe_accelerator(resources: ResourceConfig) -> str | None:
    """``TPU v5e-1``, ``GPU H100 x8``: the accelerator ``resources`` asks for, None for none."""
    # Not at import: a plan with nothing to run never asks (fray's request types, ~2 ms).
    from iris.cluster import GpuConfig, TpuConfig

    match resources.accelerator:
        case TpuConfig(type=tpu_type):
            return f"TPU {tpu_type}"
        case GpuConfig(type=gpu_type, count=count):
            return f"GPU {gpu_type} x{count * resources.num_hosts}"
    return None


def schedule_resources(steps: Mapping[int, Step], accelerator: HostAccelerator | None) -> dict[int, ResourceConfig]:
    """What each step asks (by position), for an estimate of how they queue on this host; a step
    that could never run on its accelerator counts as asking for none (the run refuses it, naming
    it, before anything starts)."""
    asked = {}
    for pos, step in steps.items():
        resources = resources_of(step, accelerator)
        if accelerator is not None and resources.accelerator is not None:
            try:
                accelerator.slots_needed(resources)
            except ValueError:
                resources = resources.replace(accelerator=None)
        asked[pos] = resources
    return asked
