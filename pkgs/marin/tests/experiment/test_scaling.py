"""IsoFLOP ladders: the fit recovers the exponents of a known law L(N, D) = E + A/N^a + B/D^b (with
and without noise); ``isoflop()`` sizes each run's steps to its budget; the fit step writes its JSON
and plot from runs' recorded losses."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from levanter.models.llama import LlamaConfig
from levanter.optim import AdamConfig
from marin.execution.core.errors import InvalidStep
from marin.execution.core.lazy import lower
from marin.experiment.data import tokenized
from marin.experiment.scaling import FIT_FILE, PLOT_FILE, FitConfig, LadderRun, isoflop, isoflop_fit_step
from marin.experiment.scaling.fit import Run, fit_isoflop, fit_power_law

# Hoffmann et al.'s fitted law; the compute-optimal N* grows as C^(b / (a + b)), D* as C^(a / (a + b)).
E, A, B, ALPHA, BETA = 1.69, 406.4, 410.7, 0.34, 0.28
N_EXPONENT, D_EXPONENT = BETA / (ALPHA + BETA), ALPHA / (ALPHA + BETA)
BUDGETS = np.logspace(18, 22, 5)


def law(n: float, d: float) -> float:
    return E + A / n ** ALPHA + B / d ** BETA


def ladder(noise: float = 0.0, seed: int = 0) -> list[Run]:
    """Nine sizes a decade either side of the "20 tokens per parameter" guess (which is not the law's
    optimum, and drifts from it across budgets), each trained on C / 6N tokens."""
    rng = np.random.default_rng(seed)
    runs = []
    for c in BUDGETS:
        for n in math.sqrt(c / 120) * np.logspace(-1, 1, 9):
            d = c / (6 * n)
            runs.append(Run(budget=float(c), params=float(n), tokens=float(d), loss=law(n, d) + rng.normal(0, noise)))
    return runs


def test_the_fit_recovers_the_exponents_of_a_known_law():
    fit = fit_isoflop(ladder())
    assert len(fit.budgets) == 5 and all(b.inside for b in fit.budgets)
    assert fit.params_law is not None and fit.tokens_law is not None
    assert abs(fit.params_law.exponent - N_EXPONENT) < 0.02
    assert abs(fit.tokens_law.exponent - D_EXPONENT) < 0.02
    # D* = C / 6N*: the two exponents add up to one.
    assert fit.params_law.exponent + fit.tokens_law.exponent == pytest.approx(1.0)
    # Each budget's vertex is near the law's own optimum, N* = G (C/6)^(b/(a+b)).
    g = (ALPHA * A / (BETA * B)) ** (1 / (ALPHA + BETA))
    for budget in fit.budgets:
        assert budget.optimum_params == pytest.approx(g * (budget.budget / 6) ** N_EXPONENT, rel=0.1)
    law_json = fit.to_json()["params_law"]
    assert law_json["points"] == 5 and law_json["ci95"][0] < law_json["exponent"] < law_json["ci95"][1]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_fit_recovers_the_exponent_through_a_little_noise(seed):
    fit = fit_isoflop(ladder(noise=0.002, seed=seed))
    assert fit.params_law is not None and abs(fit.params_law.exponent - N_EXPONENT) < 0.02
    law_fit = fit.params_law
    assert law_fit.stderr is not None and 0 < law_fit.stderr < 0.02
    # The 95% interval is the exponent +- t(0.975, 3 degrees of freedom) standard errors.
    low, high = law_fit.ci95
    assert (high - law_fit.exponent) == pytest.approx(3.182446 * law_fit.stderr, rel=1e-5)
    assert law_fit.exponent - low == pytest.approx(high - law_fit.exponent)


def test_a_power_law_through_two_points_is_exact_and_has_no_interval():
    law_fit = fit_power_law([1e10, 1e12], [2e3, 2e4])
    assert law_fit.exponent == pytest.approx(0.5) and law_fit(1e14) == pytest.approx(2e5)
    assert law_fit.stderr is None and law_fit.ci95 is None
    with pytest.raises(ValueError, match="two or more points"):
        fit_power_law([1e10], [1.0])


def test_budgets_without_a_minimum_inside_their_sizes_are_left_out_of_the_laws():
    runs = [Run(1e12, n, 1e12 / (6 * n), loss) for n, loss in ((1e4, 3.0), (1e5, 2.5), (1e6, 2.2))]  # still falling
    runs += [Run(1e13, n, 1e13 / (6 * n), loss) for n, loss in ((1e4, 3.0), (1e5, 2.0), (1e6, 2.6))]
    runs += [Run(1e14, n, 1e14 / (6 * n), loss) for n, loss in ((1e4, 3.0), (1e5, 3.5))]  # two sizes: no parabola
    fit = fit_isoflop(runs)
    falling, good, short = fit.budgets
    assert not falling.inside and good.inside and short.coefficients is None and not short.inside
    assert fit.params_law is None
    assert fit.to_json()["note"] == "no power law: 1 budget(s) have an optimum within their sizes, two are needed"


DATA = tokenized(name="tokenized/x", source="/corpus", tokenizer="/tokenizer.json")
SIZES = [LlamaConfig(vocab_size=256, hidden_dim=h, intermediate_dim=2 * h, num_heads=2, num_kv_heads=2, num_layers=2,
                     max_seq_len=64) for h in (16, 32, 64)]


def test_isoflop_sizes_each_run_to_its_budget_and_leaves_out_runs_too_short(caplog):
    params = [s.num_params() for s in SIZES]
    budgets = [3e8, 3e9]
    fit = isoflop("scaling/t", budgets=budgets, sizes=SIZES, data=DATA, optimizer=AdamConfig(), batch_size=4,
                  seq_len=32, min_steps=10)
    runs = {r.name: r for r in fit.runs}
    expected = {}
    for c in budgets:
        for n in params:
            steps = round(c / (6 * n) / (4 * 32))
            if steps >= 10:
                expected[(c, n)] = steps
    assert len(runs) == len(expected) < 6  # the largest model at the smaller budget trains too few steps
    assert [(r.budget, r.params, r.tokens) for r in fit.config.runs] == [(c, n, s * 4 * 32)
                                                                        for (c, n), s in expected.items()]
    assert sorted(r.config.trainer.num_train_steps for r in fit.runs) == sorted(expected.values())
    assert "scaling/t/3e09-" + f"{params[0] / 1e3:.3g}k" in runs
    assert fit.config.objective == "val_loss" and len(fit.config.skipped) == 6 - len(expected)
    assert "steps < min_steps=10" in caplog.text
    # The fit reads every run (and its eval step): they are its dependencies.
    with_evals = isoflop("scaling/e", budgets=budgets, sizes=lambda c: SIZES[:2], data=DATA,
                         eval={"held-out": "/"}, optimizer=AdamConfig(), batch_size=4, seq_len=32)
    assert with_evals.config.objective == "held-out.loss"
    assert all(len(r.outputs) == 2 for r in with_evals.config.runs)
    assert lower(with_evals).name == "scaling/e/fit"


@pytest.mark.parametrize("kwargs, message", [
    ({"budgets": []}, "budgets must be positive numbers of FLOPs, got []"),
    ({"budgets": [1e3]}, "every run is shorter than min_steps=10: raise the budgets"),
    ({"sizes": [SIZES[0], SIZES[0]]}, "sizes must differ in parameters"),
    ({"objective": "held-out.bpb"}, "objective 'held-out.bpb' is not a metric of the runs"),
])
def test_a_bad_ladder_is_refused_in_one_line(kwargs, message):
    options = {"budgets": [3e10], "sizes": SIZES, "data": DATA, "optimizer": AdamConfig(), "batch_size": 4,
               "seq_len": 32, **kwargs}
    with pytest.raises(InvalidStep) as err:
        isoflop("scaling/bad", **options)
    assert str(err.value).startswith(f"isoflop 'scaling/bad': {message}") and "\n" not in str(err.value)


def write_run(folder: Path, run: Run) -> str:
    """A finished "training run" of ``run``: its summary as the trainer writes it."""
    folder.mkdir(parents=True)
    (folder / "train_summary.json").write_text(json.dumps({"val_loss": run.loss, "num_params": run.params,
                                                           "steps": 10, "start_step": 0}))
    return str(folder)


def test_the_fit_step_writes_its_fit_and_plot_from_the_runs_recorded_losses(tmp_path):
    runs = ladder()
    config = FitConfig(runs=tuple(LadderRun(r.budget, 1, int(r.tokens), (write_run(tmp_path / f"run-{i}", r),))
                                  for i, r in enumerate(runs)),
                       objective="val_loss", skipped=("C=1e+18 N=5: 0 steps < min_steps=10",))
    isoflop_fit_step(config, str(tmp_path / "fit"))
    document = json.loads((tmp_path / "fit" / FIT_FILE).read_text())
    assert abs(document["params_law"]["exponent"] - N_EXPONENT) < 0.02  # the recorded params, not the nominal 1
    assert document["skipped"] == ["C=1e+18 N=5: 0 steps < min_steps=10"] and len(document["budgets"]) == 5
    assert (tmp_path / "fit" / PLOT_FILE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_report_shows_the_fit_of_a_ladder_its_plot_and_exponents(tmp_path):
    from fray.inprocess import InProcessClient
    from marin.execution.core.placeholders import output_path_of
    from marin.execution.run.runner import StepRunner
    from marin.experiment.scaling import IsoflopFitStep
    from marin.report import collect_plan, render_html
    from testsupport.sweep_trials import LawConfig, LawRun

    ladder_runs = []
    for c in (1e18, 1e19, 1e20):
        for n in math.sqrt(c / 120) * np.logspace(-1, 1, 5):
            run = LawRun(name=f"ladder/{c:.0e}-{n:.3g}".replace("+", ""), config=LawConfig(float(n), c / (6 * n)))
            ladder_runs.append(LadderRun(c, 1, int(c / (6 * n)), (output_path_of(run),)))
    fit = IsoflopFitStep(name="ladder/fit", config=FitConfig(runs=tuple(ladder_runs), objective="val_loss"))
    runner = StepRunner(prefix=str(tmp_path / "store"), client=InProcessClient(), max_parallel=1, strict_env=False)
    assert runner.run([fit]).ok
    plan = runner.plan([fit])
    page = render_html(collect_plan(plan, title="ladder"))
    assert '<section id="scaling"' in page and 'data-step="ladder/fit"' in page
    assert re.search(r'<img class="isoflop-plot"[^>]*src="data:image/png;base64,iVBORw0KGgo', page)
    fit_output = next(p.output_path for p in plan.steps if p.name == "ladder/fit")
    exponent = json.loads(Path(fit_output, FIT_FILE).read_text())["params_law"]
    assert f"N*(C) = {exponent['coefficient']:.3g} · C^{exponent['exponent']:.3f} (standard error" in page
