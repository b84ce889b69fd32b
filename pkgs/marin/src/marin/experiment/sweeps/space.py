"""A sweep's search space: typed dimensions over config fields, and setting those fields.

A field is named as ``marin compare`` names it: the dotted path of a (nested) dataclass field of
the trial's config (``optimizer.learning_rate``, ``trainer.num_train_steps``, ``model.hidden_dim``).
Each dimension proposes *raw* values (what a sampler works with and a round records: a float, an
int, or an index into a list of choices) and turns them into the field's value.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from levanter.data.spec import DatasetSpec
from marin.execution.core.identity import keep_identities
from marin.experiment.training.mixture import reweighted

__all__ = [
    "Choice",
    "Dimension",
    "Dirichlet",
    "Direction",
    "IntRange",
    "LogUniform",
    "Method",
    "Uniform",
    "field_value",
    "parse_space",
    "with_fields",
]


class Method(enum.Enum):
    """How trials are proposed."""

    GRID = "grid"  # every combination of the listed values, at once
    RANDOM = "random"  # ``trials`` independent draws, at once
    TPE = "tpe"  # Optuna's tree-structured Parzen estimator, ``parallel`` trials a round


class Direction(enum.Enum):
    """Whether the objective is to be made small or large."""

    MINIMIZE = "minimize"
    MAXIMIZE = "maximize"


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Uniform:
    """A float drawn uniformly from [low, high]."""

    field: str
    """The config field it sets."""
    low: float
    """Smallest value."""
    high: float
    """Largest value."""

    def __post_init__(self) -> None:
        low, high = _number(self.low, "low"), _number(self.high, "high")
        if not low < high:
            raise ValueError(f"low must be < high, got {self.low!r} and {self.high!r}")
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)

    def sample(self, rng: Any) -> float:
        return float(rng.uniform(self.low, self.high))

    def distribution(self) -> Any:
        from optuna.distributions import FloatDistribution  # heavy: only in a round step's process

        return FloatDistribution(self.low, self.high)

    def value(self, raw: Any) -> Any:
        return float(raw)

    def extremes(self) -> list[Any]:
        return [self.low, self.high]


@dataclass(frozen=True)
class LogUniform(Uniform):
    """A float whose logarithm is uniform over [log low, log high] (learning rates)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.low > 0:
            raise ValueError(f"low must be > 0 on a log scale, got {self.low!r}")

    def sample(self, rng: Any) -> float:
        return float(math.exp(rng.uniform(math.log(self.low), math.log(self.high))))

    def distribution(self) -> Any:
        from optuna.distributions import FloatDistribution  # heavy: only in a round step's process

        return FloatDistribution(self.low, self.high, log=True)


@dataclass(frozen=True)
class IntRange:
    """An int drawn uniformly from low..high, both included."""

    field: str
    """The config field it sets."""
    low: int
    """Smallest value."""
    high: int
    """Largest value."""

    def __post_init__(self) -> None:
        for name in ("low", "high"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be an int, got {value!r}")
        if not self.low <= self.high:
            raise ValueError(f"low must be <= high, got {self.low!r} and {self.high!r}")

    def sample(self, rng: Any) -> int:
        return int(rng.integers(self.low, self.high + 1))

    def distribution(self) -> Any:
        from optuna.distributions import IntDistribution  # heavy: only in a round step's process

        return IntDistribution(self.low, self.high)

    def value(self, raw: Any) -> Any:
        return int(raw)

    def extremes(self) -> list[Any]:
        return [self.low, self.high]


@dataclass(frozen=True)
class Choice:
    """One of a list of values (of any kind a config holds); its raw value is the index."""

    field: str
    """The config field it sets."""
    values: tuple[Any, ...]
    """The values, in order."""

    def __post_init__(self) -> None:
        if isinstance(self.values, str | bytes) or not isinstance(self.values, Sequence):
            raise ValueError(f"choices must be a list of values, got {self.values!r}")
        object.__setattr__(self, "values", tuple(self.values))
        if not self.values:
            raise ValueError("choices must hold at least one value, got none")

    def sample(self, rng: Any) -> int:
        return int(rng.integers(0, len(self.values)))

    def distribution(self) -> Any:
        from optuna.distributions import CategoricalDistribution  # heavy: only in a round step's process

        return CategoricalDistribution(tuple(range(len(self.values))))

    def value(self, raw: Any) -> Any:
        return self.values[int(raw)]

    def extremes(self) -> list[Any]:
        return list(self.values)


@dataclass(frozen=True)
class Dirichlet:
    """Mixture weights of the named datasets, drawn from a Dirichlet distribution (a RegMix swarm).

    Its raw value is the weights in ``names`` order (they sum to 1); its field's value is
    ``{name: weight}``, which sets the weights of a mixture's datasets by name (``data.datasets``
    of a training config; their first phase when the mixture has phases).
    """

    field: str
    """The config field it sets (``data.datasets``)."""
    names: tuple[str, ...]
    """The datasets, as the mixture names them (their tokenize steps' names, or paths)."""
    alpha: tuple[float, ...]
    """The concentration of each (1 everywhere: uniform over the simplex; small: near its corners)."""

    def __post_init__(self) -> None:
        names = self.names
        if isinstance(names, str) or not isinstance(names, Sequence) or len(names) < 2:
            raise ValueError(f"('dirichlet', [names], alpha) needs at least two dataset names, got {names!r}")
        if not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
            raise ValueError(f"dirichlet names must be distinct non-empty strings, got {list(names)!r}")
        alpha = self.alpha
        alphas = [alpha] * len(names) if isinstance(alpha, int | float) and not isinstance(alpha, bool) else alpha
        if isinstance(alphas, str) or not isinstance(alphas, Sequence) or len(alphas) != len(names):
            raise ValueError(f"dirichlet alpha must be a number or one per name ({len(names)}), got {alpha!r}")
        alphas = [_number(a, "alpha") for a in alphas]
        if not all(a > 0 for a in alphas):
            raise ValueError(f"dirichlet alpha must be > 0, got {alpha!r}")
        object.__setattr__(self, "names", tuple(names))
        object.__setattr__(self, "alpha", tuple(alphas))

    def sample(self, rng: Any) -> list[float]:
        return [float(x) for x in rng.dirichlet(self.alpha)]

    def distribution(self) -> Any:
        raise ValueError("a dirichlet dimension needs method='random' (TPE does not sample mixture weights)")

    def value(self, raw: Any) -> Any:
        if not isinstance(raw, Sequence) or len(raw) != len(self.names):
            raise ValueError(f"{self.field}: expected {len(self.names)} weights, got {raw!r}")
        return {name: float(w) for name, w in zip(self.names, raw, strict=True)}

    def extremes(self) -> list[Any]:
        return [self.value([1.0 / len(self.names)] * len(self.names))]


Dimension = Uniform | LogUniform | IntRange | Choice | Dirichlet
_RANGES = {"uniform": Uniform, "log_uniform": LogUniform, "int": IntRange}


def _dimension(field: str, spec: Any, method: Method) -> Dimension:
    if isinstance(spec, list):
        return Choice(field, tuple(spec))
    if method is Method.GRID:
        raise ValueError(f"a grid needs a list of values, got {spec!r}")
    if not isinstance(spec, tuple) or not spec or not isinstance(spec[0], str):
        raise ValueError(f"expected a list of values, ('uniform' | 'log_uniform' | 'int', low, high), "
                         f"('choice', [values]) or ('dirichlet', [names], alpha), got {spec!r}")
    kind, args = spec[0], spec[1:]
    if kind == "dirichlet":
        if len(args) != 2:
            raise ValueError(f"('dirichlet', [names], alpha) takes names and alpha, got {spec!r}")
        if method is not Method.RANDOM:
            raise ValueError(f"a dirichlet dimension needs method='random', got {method.value!r}")
        return Dirichlet(field, *args)
    if kind == "choice":
        if len(args) != 1:
            raise ValueError(f"('choice', [values]) takes one list, got {spec!r}")
        return Choice(field, args[0])
    if kind not in _RANGES:
        raise ValueError(f"unknown kind {kind!r}; kinds: choice, dirichlet, {', '.join(_RANGES)}")
    if len(args) != 2:
        raise ValueError(f"({kind!r}, low, high) takes two bounds, got {spec!r}")
    return _RANGES[kind](field, *args)


def parse_space(space: Mapping[str, Any], method: Method, template: Any) -> tuple[Dimension, ...]:
    """The dimensions of ``space`` (field → spec), each checked against the ``template`` config:
    the field exists and accepts the dimension's extreme values.

    Raises:
        ValueError: one line naming the field at fault (``space['optimizer.learning_rate']: ...``).
    """
    if not isinstance(space, Mapping) or not space:
        raise ValueError(f"space must be a non-empty mapping of config field to values, got {space!r}")
    dims = []
    for field, spec in space.items():
        try:
            if not isinstance(field, str) or not field:
                raise ValueError("a field must be a dotted name such as 'optimizer.learning_rate'")
            dim = _dimension(field, spec, method)
            field_value(template, field)
            for value in dim.extremes():
                with_fields(template, {field: value})
        except (ValueError, TypeError) as e:
            raise ValueError(f"space[{field!r}]: {e}") from None
        dims.append(dim)
    return tuple(dims)


def field_value(config: Any, path: str) -> Any:
    """The value of the dotted field ``path`` of ``config``; ValueError naming what is missing."""
    value = config
    for i, part in enumerate(path.split(".")):
        names = [f.name for f in dataclasses.fields(value)] if dataclasses.is_dataclass(value) else []
        if part not in names:
            where = ".".join(path.split(".")[:i]) or "the config"
            kind = type(value).__name__
            raise ValueError(f"no field {part!r} in {where} ({kind}" + (f"; fields: {', '.join(names)})" if names
                                                                         else ", which has no fields)"))
        value = getattr(value, part)
    return value


def with_fields(config: Any, values: Mapping[str, Any]) -> Any:
    """``config`` with each dotted field of ``values`` replaced (nested dataclasses rebuilt, so
    their ``__post_init__`` checks the new values)."""
    for path, value in values.items():
        config = _replace(config, path.split("."), value)
    return config


def _replace(config: Any, parts: list[str], value: Any) -> Any:
    current = field_value(config, parts[0])
    if len(parts) == 1:
        if isinstance(value, Mapping) and _is_mixture(current):
            value = reweighted(current, value)  # a Dirichlet's {name: weight} on a mixture's datasets
        return dataclasses.replace(config, **{parts[0]: value})
    return dataclasses.replace(config, **{parts[0]: _replace(getattr(config, parts[0]), parts[1:], value)})


def _is_mixture(value: Any) -> bool:
    return isinstance(value, tuple) and bool(value) and all(isinstance(v, DatasetSpec) for v in value)


# Moved from sweep_space.py: what it defines keeps that name in every hash (and for workers and pickle).
keep_identities(globals(), "marin.experiment.sweep_space")
