"""The fit of an IsoFLOP ladder: per budget, loss against log parameters; then the compute-optimal
size and data as power laws of compute.

For each compute budget C the runs trade parameters N against tokens D = C / (6N). A quadratic of
the loss in ln N gives the budget's optimum N*(C) at its vertex, and D*(C) = C / (6 N*(C)). Least
squares of ln N* against ln C gives N*(C) = k C^a, with the standard error of ``a`` and a 95%
interval (Student's t with n - 2 degrees of freedom; none from two budgets, which fit exactly).
Pure functions of the numbers given, so they are tested on losses drawn from a known law.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from marin.execution.core.identity import keep_identities

__all__ = ["BudgetFit", "IsoflopFit", "PowerLaw", "Run", "fit_isoflop", "fit_power_law", "plot_isoflop"]


@dataclass(frozen=True)
class Run:
    """One finished run of the ladder."""

    budget: float
    """The compute budget it belongs to (FLOPs, 6ND)."""
    params: float
    """Its parameters N."""
    tokens: float
    """Tokens it trained on, D."""
    loss: float
    """Its loss (the objective fitted)."""


@dataclass(frozen=True)
class BudgetFit:
    """The quadratic ``loss = c0 + c1 ln N + c2 (ln N)^2`` of one budget's runs, and its vertex."""

    budget: float
    runs: tuple[Run, ...]
    coefficients: tuple[float, float, float] | None
    """(c0, c1, c2); None with fewer than three sizes."""
    optimum_params: float | None
    """N* at the vertex; None when the curve has no minimum (c2 <= 0) or no fit."""
    optimum_tokens: float | None
    """D* = budget / (6 N*)."""
    optimum_loss: float | None
    """The fitted loss at N*."""
    inside: bool
    """Whether N* lies within the sizes run (an optimum outside them is an extrapolation: left out
    of the power laws)."""

    def to_json(self) -> dict[str, Any]:
        return {"budget": self.budget, "coefficients": list(self.coefficients) if self.coefficients else None,
                "optimum_params": self.optimum_params, "optimum_tokens": self.optimum_tokens,
                "optimum_loss": self.optimum_loss, "inside": self.inside,
                "runs": [{"params": r.params, "tokens": r.tokens, "loss": r.loss} for r in self.runs]}


@dataclass(frozen=True)
class PowerLaw:
    """``y = coefficient * C ** exponent``, fitted by least squares in log space."""

    coefficient: float
    exponent: float
    stderr: float | None
    """Standard error of the exponent (None from two points)."""
    ci95: tuple[float, float] | None
    """95% interval of the exponent (None from two points)."""
    points: int

    def __call__(self, compute: float) -> float:
        return self.coefficient * compute ** self.exponent

    def to_json(self) -> dict[str, Any]:
        return {"coefficient": self.coefficient, "exponent": self.exponent, "stderr": self.stderr,
                "ci95": list(self.ci95) if self.ci95 else None, "points": self.points}


@dataclass(frozen=True)
class IsoflopFit:
    """The fit of a whole ladder."""

    budgets: tuple[BudgetFit, ...]
    params_law: PowerLaw | None
    """N*(C); None with fewer than two budgets whose optimum lies within their sizes."""
    tokens_law: PowerLaw | None
    """D*(C)."""

    def to_json(self) -> dict[str, Any]:
        used = [b.budget for b in self.budgets if b.inside]
        note = None if self.params_law else (
            f"no power law: {len(used)} budget(s) have an optimum within their sizes, two are needed")
        return {"budgets": [b.to_json() for b in self.budgets], "budgets_fitted": used,
                "params_law": self.params_law.to_json() if self.params_law else None,
                "tokens_law": self.tokens_law.to_json() if self.tokens_law else None, "note": note}


def _t975(dof: int) -> float:
    """The 97.5% quantile of Student's t with ``dof`` degrees of freedom."""
    # scipy.special (not scipy.stats, 4 s to import on a busy 2-core machine): only when an interval is asked for.
    from scipy.special import stdtrit

    return float(stdtrit(dof, 0.975))


def fit_power_law(compute: Sequence[float], values: Sequence[float]) -> PowerLaw:
    """Least squares of ``ln values`` against ``ln compute``.

    Raises:
        ValueError: fewer than two points, or a value that is not positive.
    """
    import numpy as np  # deferred: the module is imported to plan, the fit runs in a step

    if len(compute) != len(values) or len(compute) < 2:
        raise ValueError(f"a power law needs two or more points, got {len(compute)}")
    if min(compute) <= 0 or min(values) <= 0:
        raise ValueError("a power law is fitted to positive numbers only")
    x, y = np.log(np.asarray(compute, float)), np.log(np.asarray(values, float))
    n = len(x)
    sxx = float(((x - x.mean()) ** 2).sum())
    slope = float(((x - x.mean()) * (y - y.mean())).sum() / sxx)
    intercept = float(y.mean() - slope * x.mean())
    stderr = ci = None
    if n > 2:
        residual = float(((y - intercept - slope * x) ** 2).sum())
        stderr = math.sqrt(residual / (n - 2) / sxx)
        half = _t975(n - 2) * stderr
        ci = (slope - half, slope + half)
    return PowerLaw(coefficient=math.exp(intercept), exponent=slope, stderr=stderr, ci95=ci, points=n)


def _fit_budget(budget: float, runs: Sequence[Run]) -> BudgetFit:
    import numpy as np  # deferred: see fit_power_law

    runs = tuple(sorted(runs, key=lambda r: r.params))
    if len({r.params for r in runs}) < 3:
        return BudgetFit(budget, runs, None, None, None, None, False)
    x = np.log([r.params for r in runs])
    c2, c1, c0 = (float(c) for c in np.polyfit(x, [r.loss for r in runs], 2))
    if not c2 > 0:
        return BudgetFit(budget, runs, (c0, c1, c2), None, None, None, False)
    vertex = -c1 / (2 * c2)
    n_opt = math.exp(vertex)
    return BudgetFit(budget, runs, (c0, c1, c2), n_opt, budget / (6 * n_opt), c0 + c1 * vertex + c2 * vertex ** 2,
                     bool(x.min() <= vertex <= x.max()))


def fit_isoflop(runs: Sequence[Run]) -> IsoflopFit:
    """Fit each budget's runs, then N*(C) and D*(C) over the budgets whose optimum lies within their sizes."""
    by_budget: dict[float, list[Run]] = {}
    for run in runs:
        by_budget.setdefault(run.budget, []).append(run)
    budgets = tuple(_fit_budget(c, rs) for c, rs in sorted(by_budget.items()))
    used = [b for b in budgets if b.inside and b.optimum_params is not None and b.optimum_tokens is not None]
    if len(used) < 2:
        return IsoflopFit(budgets, None, None)
    compute = [b.budget for b in used]
    return IsoflopFit(budgets, fit_power_law(compute, [b.optimum_params for b in used]),
                      fit_power_law(compute, [b.optimum_tokens for b in used]))


def plot_isoflop(fit: IsoflopFit, path: str, title: str = "IsoFLOP ladder", loss_name: str = "loss") -> None:
    """Draw the fit as a PNG at ``path`` (local): loss against parameters per budget with each
    parabola and its minimum; beside it N*(C) and D*(C) with the power laws. ``loss_name``: what
    the loss is (its metric's name)."""
    # matplotlib takes ~0.5 s to import: only the fit step draws. Agg: no display needed.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    colors = plt.get_cmap("viridis")(np.linspace(0.1, 0.9, max(len(fit.budgets), 2)))
    for budget, color in zip(fit.budgets, colors, strict=False):
        n = [r.params for r in budget.runs]
        left.scatter(n, [r.loss for r in budget.runs], color=color, label=f"C = {budget.budget:.2g}", zorder=3)
        if budget.coefficients is not None:
            x = np.linspace(math.log(min(n)), math.log(max(n)), 64)
            c0, c1, c2 = budget.coefficients
            left.plot(np.exp(x), c0 + c1 * x + c2 * x ** 2, color=color, lw=1.2)
        if budget.optimum_params is not None and budget.inside:
            left.scatter([budget.optimum_params], [budget.optimum_loss], color=color, marker="*", s=140,
                         edgecolor="black", zorder=4)
    left.set_xscale("log")
    left.set_xlabel("parameters N")
    left.set_ylabel(loss_name)
    left.set_title("loss at fixed compute (★ fitted optimum)")
    left.legend(fontsize=8)
    used = [b for b in fit.budgets if b.inside and b.optimum_params is not None]
    if used:
        c = np.array([b.budget for b in used])
        right.scatter(c, [b.optimum_params for b in used], color="tab:blue", label="N*", zorder=3)
        right.scatter(c, [b.optimum_tokens for b in used], color="tab:orange", label="D*", zorder=3)
        grid = np.logspace(math.log10(c.min()), math.log10(c.max()), 32)
        for law, color, name in ((fit.params_law, "tab:blue", "N*"), (fit.tokens_law, "tab:orange", "D*")):
            if law is not None:
                spread = f", 95% [{law.ci95[0]:.2f}, {law.ci95[1]:.2f}]" if law.ci95 is not None else ""
                right.plot(grid, [law(x) for x in grid], color=color, lw=1.2,
                           label=f"{name} ∝ C^{law.exponent:.3f}{spread}")
        right.legend(fontsize=8)
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel("compute C (FLOPs)")
    right.set_title("compute-optimal parameters and tokens")
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


# Moved from scaling_fit.py: what it defines keeps that name in every hash (and for workers and pickle).
keep_identities(globals(), "marin.experiment.scaling_fit")
