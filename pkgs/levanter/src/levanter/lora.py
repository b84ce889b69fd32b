"""Low-rank adapters (LoRA) as a transform of the parameter tree.

A target weight ``W`` (``[..., in, out]``: a Haiku ``Linear``'s ``w``, with any leading axes, such
as the layer axis of stacked layers) is used as ``W + (alpha / rank) * A @ B``, with ``A``
``[..., in, rank]`` and ``B`` ``[..., rank, out]`` batched over the leading axes. Only ``A`` and
``B`` are trained; ``B`` starts at zero, so the adapted model starts as its base. The adapters
are a tree of their own, ``{module: {"lora_a": A, "lora_b": B}}`` keyed by the target's module
path, so it is what a LoRA run's checkpoints and final parameters hold.

A LoRA run's output records its base and settings in ``lora.json`` (:data:`LORA_FILE`);
``levanter.generate.load_model`` folds the adapters into the base on read (:func:`fold`), so the
run is evaluated, sampled and exported like any model. Importing this module does not import JAX.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any

from rigging import filesystem as fs

__all__ = [
    "LORA_A",
    "LORA_B",
    "LORA_FILE",
    "LORA_FORMAT",
    "LoraConfig",
    "fold",
    "init_adapters",
    "read_lora_file",
    "target_weights",
    "write_lora_file",
]

LORA_FILE = "lora.json"
"""Beside a LoRA run's ``config.json``: the adapters' settings and the base they adapt."""
LORA_FORMAT = "levanter.lora/v1"

LORA_A, LORA_B = "lora_a", "lora_b"
"""Names of the two factors under a target's module."""

_WEIGHT = "w"
"""The parameter of a Haiku ``Linear`` that adapters adapt."""


@dataclasses.dataclass(frozen=True)
class LoraConfig:
    """Which weights get adapters, of which rank, at which scale.

    Changing any field changes what is trained: all of them are part of a run's identity.
    """

    rank: int = 8
    """Inner dimension of each adapter; at most the smaller side of every target weight."""
    alpha: float = 16.0
    """The adapters' output is scaled by ``alpha / rank``."""
    targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    """Names of the linear modules adapted (the last part of their module path), e.g. ``("q_proj", "v_proj")``."""
    seed: int = 0
    """Seeds the initial ``A`` factors."""

    def __post_init__(self) -> None:
        if isinstance(self.targets, str) or not isinstance(self.targets, list | tuple):
            raise ValueError(f"lora targets must be a sequence of module names, got {self.targets!r}")
        object.__setattr__(self, "targets", tuple(self.targets))
        if not isinstance(self.rank, int) or isinstance(self.rank, bool) or self.rank <= 0:
            raise ValueError(f"lora rank must be a positive int, got {self.rank!r}")
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, int | float) or not math.isfinite(self.alpha) \
                or self.alpha <= 0:
            raise ValueError(f"lora alpha must be a finite number > 0, got {self.alpha!r}")
        object.__setattr__(self, "alpha", float(self.alpha))
        if not self.targets or not all(isinstance(t, str) and t for t in self.targets):
            raise ValueError(f"lora targets must name at least one module, got {self.targets!r}")
        if len(set(self.targets)) != len(self.targets):
            raise ValueError(f"lora targets must be distinct, got {self.targets!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise ValueError(f"lora seed must be an int >= 0, got {self.seed!r}")

    @property
    def scale(self) -> float:
        """``alpha / rank``: what the adapters' product is multiplied by."""
        return self.alpha / self.rank

    def check(self, linear_shapes: Mapping[str, tuple[int, int]]) -> None:
        """Raise ValueError when a target names no linear module of the model, or the rank exceeds
        a target's smaller side; ``linear_shapes`` is ``{module name: (in, out)}`` (``LlamaConfig.linear_shapes``)."""
        unknown = [t for t in self.targets if t not in linear_shapes]
        if unknown:
            raise ValueError(f"lora targets {unknown} name no linear module of the model "
                             f"(its linear modules: {', '.join(linear_shapes)})")
        for target in self.targets:
            dims = linear_shapes[target]
            if self.rank > min(dims):
                raise ValueError(f"lora rank {self.rank} is larger than the dimension of {target} "
                                 f"({dims[0]} x {dims[1]}): at most {min(dims)}")

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "alpha": self.alpha, "targets": list(self.targets), "seed": self.seed}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LoraConfig:
        return cls(rank=int(data["rank"]), alpha=float(data["alpha"]), targets=tuple(data["targets"]),
                   seed=int(data.get("seed", 0)))


def _module_name(module: str) -> str:
    """The last part of a Haiku module path (``layer_0/~/attn/~/q_proj`` -> ``q_proj``)."""
    return module.rsplit("/", 1)[-1]


def target_weights(config: LoraConfig, params: Mapping[str, Mapping[str, Any]]) -> dict[str, tuple[int, ...]]:
    """``{module path: shape of its w}`` of every weight ``config`` adapts in ``params``.

    Raises:
        ValueError: a target matches no weight, or the rank exceeds a weight's smaller side.
    """
    found = {module: tuple(names[_WEIGHT].shape) for module, names in params.items()
             if _module_name(module) in config.targets and _WEIGHT in names}
    matched = {_module_name(m) for m in found}
    missing = [t for t in config.targets if t not in matched]
    if missing:
        linear = sorted({_module_name(m) for m, names in params.items() if _WEIGHT in names})
        raise ValueError(f"lora targets {missing} match no weight of the model (its linear modules: {', '.join(linear)})")
    for module, shape in found.items():
        if config.rank > min(shape[-2:]):
            raise ValueError(f"lora rank {config.rank} is larger than the dimension of {module} "
                             f"({shape[-2]} x {shape[-1]}): at most {min(shape[-2:])}")
    return found


def init_adapters(config: LoraConfig, params: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Fresh adapters for ``params`` (arrays or shape structs): ``A`` Gaussian with standard deviation
    ``1 / sqrt(in)``, ``B`` zero, float32. Deterministic in ``config.seed`` and the module paths."""
    import zlib

    import jax
    import jax.numpy as jnp

    out: dict[str, dict[str, Any]] = {}
    for module, shape in sorted(target_weights(config, params).items()):
        *lead, d_in, d_out = shape
        key = jax.random.fold_in(jax.random.PRNGKey(config.seed), zlib.crc32(module.encode()))
        a = jax.random.normal(key, (*lead, d_in, config.rank), jnp.float32) / math.sqrt(d_in)
        out[module] = {LORA_A: a, LORA_B: jnp.zeros((*lead, config.rank, d_out), jnp.float32)}
    return out


def fold(params: Mapping[str, Mapping[str, Any]], adapters: Mapping[str, Mapping[str, Any]],
         scale: float) -> dict[str, dict[str, Any]]:
    """``params`` with each adapted weight replaced by ``W + scale * A @ B`` (batched over leading axes).

    What the adapted model computes with, and what a merge writes. Works on JAX arrays (inside a
    jitted step, differentiable in the adapters) and on numpy arrays alike.

    Raises:
        KeyError: an adapter names a module ``params`` lacks.
    """
    import jax.numpy as jnp

    out = {module: dict(names) for module, names in params.items()}
    for module, ab in adapters.items():
        if module not in out:
            raise KeyError(f"adapters for {module}, which the model does not have")
        w = out[module][_WEIGHT]
        delta = jnp.einsum("...ir,...ro->...io", ab[LORA_A], ab[LORA_B], precision="highest")
        out[module][_WEIGHT] = (w + scale * delta).astype(w.dtype)
    return out


def write_lora_file(output_path: str, config: LoraConfig, base: Mapping[str, Any]) -> None:
    """Record in ``output_path`` that its parameters are adapters of ``base`` (a serialised
    ``initialize_from``, :func:`levanter.initialize.initialize_to_dict`)."""
    data = {"format": LORA_FORMAT, **config.to_json(), "base": dict(base)}
    fs.atomic_write(fs.join(output_path, LORA_FILE), json.dumps(data, indent=2, default=str) + "\n")


def read_lora_file(output_path: str) -> tuple[LoraConfig, dict[str, Any]] | None:
    """``(settings, serialised base)`` of a LoRA run's output, None for any other output.

    Raises:
        ValueError: the file is there but is not a LoRA record.
    """
    path = fs.join(output_path, LORA_FILE)
    if not fs.exists(path):
        return None
    data = json.loads(fs.read_text(path))
    if data.get("format") != LORA_FORMAT:
        raise ValueError(f"{path}: not a {LORA_FORMAT} record (format {data.get('format')!r})")
    return LoraConfig.from_json(data), dict(data["base"])
