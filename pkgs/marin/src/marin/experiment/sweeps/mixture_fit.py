"""``mixture_fit(sweep)``: fit a sweep's objective as a function of its mixture weights, and propose the best mixture.

A RegMix-style search is a sweep whose space has a Dirichlet dimension over a mixture's datasets::

    swarm = sweep("sweeps/mix", base=dict(..., datasets={web: 1.0, books: 1.0, code: 1.0}, ...),
                  space={"data.datasets": ("dirichlet", ["tokenized/web", "tokenized/books", "tokenized/code"], 1.0)},
                  method="random", trials=24, objective="held-out.bpb")
    fit = mixture_fit(swarm)        # <name>/mixture-fit: mixture_fit.json, the proposal and the fit's quality

The fit is a Scheffé polynomial of the weights (mixture experiments' regression: no intercept, since
the weights sum to 1): ``quadratic`` (each weight, and each pair's product) or ``linear``. Its
quality is its R², its leave-one-out R² and the Spearman rank correlation of the leave-one-out
predictions with the objectives (how well it ranks mixtures it did not see, RegMix's measure). The
proposal is, as RegMix does, the mean of the ``top_k`` best-predicted of ``candidates`` mixtures
drawn from the sweep's own Dirichlet distribution (seeded): it stays where the trials were.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from marin.execution.core.errors import InvalidStep
from marin.execution.core.lazy import StepHandle
from marin.execution.core.placeholders import output_path_of
from marin.experiment.sweeps.space import Direction, Dirichlet
from marin.experiment.sweeps.steps import SWEEP_FORMAT, Sweep, SweepSpec, read_sweep_results
from rigging import filesystem as fs

__all__ = ["MIXTURE_FIT_FILE", "MixtureFit", "MixtureFitConfig", "MixtureFitResult", "fit_mixture", "fit_report",
           "mixture_fit", "mixture_fit_step"]

MIXTURE_FIT_FILE = "mixture_fit.json"
MODELS = ("quadratic", "linear")


@dataclass(frozen=True)
class MixtureFitConfig:
    """What the fit step fits: the objective of every trial of a sweep, on one Dirichlet dimension."""

    spec: SweepSpec
    """The sweep."""
    head: Any
    """Its first round (a placeholder): the fit waits for all it expanded into."""
    field: str
    """The Dirichlet dimension fitted on (``data.datasets``)."""
    model: str = "quadratic"
    """``quadratic`` or ``linear`` (Scheffé polynomials of the weights)."""
    candidates: int = 100_000
    """Mixtures drawn from the sweep's Dirichlet distribution, among which the best predicted are sought."""
    top_k: int = 100
    """The proposal is the mean of this many best-predicted candidates."""
    seed: int = 0
    """Seeds the candidates."""

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {', '.join(MODELS)}, got {self.model!r}")
        for name in ("candidates", "top_k"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.top_k > self.candidates:
            raise ValueError(f"top_k ({self.top_k}) must be at most candidates ({self.candidates})")


@dataclass(frozen=True)
class MixtureFitResult:
    """A fitted mixture regression and its proposal (weights in the dimension's ``names`` order)."""

    terms: tuple[str, ...]
    coefficients: tuple[float, ...]
    r2: float
    loo_r2: float
    spearman: float | None
    """Of the leave-one-out predictions with the objectives (None when either is constant)."""
    proposed: tuple[float, ...]
    predicted: float
    """The fitted objective at the proposal."""


def _features(w: Any, model: str) -> Any:
    import numpy as np  # only in the fit step's process

    k = w.shape[1]
    cols = [w[:, i] for i in range(k)]
    if model == "quadratic":
        cols += [w[:, i] * w[:, j] for i in range(k) for j in range(i + 1, k)]
    return np.stack(cols, axis=1)


def _ranks(values: Any) -> Any:
    """Ranks from 0, ties given their mean rank."""
    import numpy as np  # only in the fit step's process

    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    return ((ends - counts + ends - 1) / 2.0)[inverse]


def _spearman(a: Any, b: Any) -> float | None:
    """Spearman's rank correlation (numpy's: scipy.stats takes seconds to import)."""
    import numpy as np  # only in the fit step's process

    ra, rb = _ranks(a), _ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return None
    return float(np.corrcoef(ra, rb)[0, 1])


def _terms(names: Sequence[str], model: str) -> tuple[str, ...]:
    terms = list(names)
    if model == "quadratic":
        terms += [f"{a}*{b}" for i, a in enumerate(names) for b in names[i + 1:]]
    return tuple(terms)


def fit_mixture(weights: Sequence[Sequence[float]], objective: Sequence[float], *, names: Sequence[str],
                alpha: Sequence[float], direction: Direction = Direction.MINIMIZE, model: str = "quadratic",
                candidates: int = 100_000, top_k: int = 100, seed: int = 0) -> MixtureFitResult:
    """Fit ``objective`` on the mixture ``weights`` of each trial and propose the best mixture.

    Raises:
        ValueError: too few trials for the model's terms (it names how many it needs).
    """
    import numpy as np  # only in the fit step's process

    w, y = np.asarray(weights, dtype=np.float64), np.asarray(objective, dtype=np.float64)
    x = _features(w, model)
    n, p = x.shape
    if n < p + 2:
        raise ValueError(f"a {model} fit of {w.shape[1]} datasets has {p} terms and needs at least {p + 2} "
                         f"trials, got {n}: run more trials or use model='linear'")
    gram = x.T @ x
    # A whisper of ridge keeps the solve well posed when trials sit near a face of the simplex.
    inverse = np.linalg.inv(gram + 1e-10 * np.trace(gram) / p * np.eye(p))
    beta = inverse @ x.T @ y
    residual = y - x @ beta
    hat = np.einsum("ij,jk,ik->i", x, inverse, x)
    loo = residual / np.clip(1.0 - hat, 1e-12, None)
    total = float(((y - y.mean()) ** 2).sum()) or 1.0
    sign = 1.0 if direction is Direction.MINIMIZE else -1.0
    rng = np.random.default_rng(seed)
    pool = rng.dirichlet(np.asarray(alpha, dtype=np.float64), size=candidates)
    best = np.argsort(sign * (_features(pool, model) @ beta), kind="stable")[:top_k]
    proposed = pool[best].mean(axis=0)
    return MixtureFitResult(
        terms=_terms(names, model), coefficients=tuple(float(b) for b in beta),
        r2=1.0 - float((residual ** 2).sum()) / total, loo_r2=1.0 - float((loo ** 2).sum()) / total,
        spearman=_spearman(y - loo, y), proposed=tuple(float(v) for v in proposed),
        predicted=float((_features(proposed[None, :], model) @ beta)[0]))


def _dimension(spec: SweepSpec, field: str) -> Dirichlet:
    for dim in spec.space:
        if dim.field == field and isinstance(dim, Dirichlet):
            return dim
    raise ValueError(f"the sweep has no dirichlet dimension {field!r}")


def mixture_fit_step(config: MixtureFitConfig, output_path: str) -> None:
    """Step function: fit every trial's objective on its weights; write ``mixture_fit.json``."""
    spec, dim = config.spec, _dimension(config.spec, config.field)
    results = read_sweep_results(spec, config.head, f"{spec.name}/mixture-fit")
    trials = results["trials"]
    fit = fit_mixture([t["raw"][config.field] for t in trials], [t["objective"] for t in trials], names=dim.names,
                      alpha=dim.alpha, direction=spec.direction, model=config.model, candidates=config.candidates,
                      top_k=config.top_k, seed=config.seed)
    sign = 1.0 if spec.direction is Direction.MINIMIZE else -1.0
    best = min(trials, key=lambda t: (sign * t["objective"], t["index"]))
    document = {
        "format": SWEEP_FORMAT, "sweep": spec.name, "objective": spec.objective, "direction": spec.direction.value,
        "field": config.field, "model": config.model, "trials": len(trials),
        "r2": fit.r2, "loo_r2": fit.loo_r2, "spearman": fit.spearman,
        "coefficients": dict(zip(fit.terms, fit.coefficients, strict=True)),
        "proposed": dict(zip(dim.names, fit.proposed, strict=True)), "predicted": fit.predicted,
        "best_trial": {"name": best["name"], "objective": best["objective"],
                       "weights": dict(zip(dim.names, best["raw"][config.field], strict=True))},
    }
    fs.atomic_write(fs.join(output_path, MIXTURE_FIT_FILE), json.dumps(document, indent=2, allow_nan=False))
    for line in fit_report(document):
        print(line)


def fit_report(document: dict[str, Any]) -> list[str]:
    """The fit's lines for a person (what the step prints)."""
    def mix(weights: dict[str, float]) -> str:
        return ", ".join(f"{name} {w:.3f}" for name, w in weights.items())

    best = document["best_trial"]
    return [
        f"mixture fit of {document['trials']} trials ({document['model']}, {len(document['coefficients'])} terms): "
        f"R² {document['r2']:.4f}, leave-one-out R² {document['loo_r2']:.4f}, Spearman "
        + (f"{document['spearman']:.3f}" if document["spearman"] is not None else "undefined (a constant)"),
        f"proposed mixture: {mix(document['proposed'])} (predicted {document['objective']} "
        f"{document['predicted']:.4f})",
        f"best trial: {best['name']} ({document['objective']} {best['objective']:.4f}): {mix(best['weights'])}",
    ]


class MixtureFit(StepHandle, fn=mixture_fit_step):
    """Handle to a sweep's mixture fit (``mixture_fit.json``)."""


def mixture_fit(swept: Sweep, *, field: str | None = None, model: str = "quadratic", candidates: int = 100_000,
                top_k: int = 100, seed: int = 0) -> MixtureFit:
    """The step ``<sweep>/mixture-fit``: it waits for the whole sweep, fits its objective on the weights
    of its Dirichlet dimension (``field``, needed only when it has several) and proposes the best mixture.

    Raises:
        InvalidStep: not a sweep, no such dimension, or a bad setting (one line naming it).
    """
    if not isinstance(swept, Sweep):
        raise InvalidStep(f"mixture_fit() takes a sweep(...), got {type(swept).__name__}")
    spec = swept.spec
    dims = [d.field for d in spec.space if isinstance(d, Dirichlet)]
    try:
        if field is None:
            if len(dims) != 1:
                raise ValueError(f"the sweep has {len(dims)} dirichlet dimensions ({', '.join(dims) or 'none'}): "
                                 "name one with field=")
            field = dims[0]
        _dimension(spec, field)
        config = MixtureFitConfig(spec=spec, head=output_path_of(swept), field=field, model=model,
                                  candidates=candidates, top_k=top_k, seed=seed)
    except ValueError as e:
        raise InvalidStep(f"mixture_fit {spec.name!r}: {e}") from None
    return MixtureFit(name=f"{spec.name}/mixture-fit", config=config)

