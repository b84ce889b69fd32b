"""Mixture search: a Dirichlet dimension in a sweep's space (a RegMix swarm is a random sweep over it),
and ``mixture_fit`` fitting the objective on the weights and proposing the best mixture. Trials are
stand-ins (``sweep_trials.MixTrain``) whose val_loss is a known function of their mixture."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fray.inprocess import InProcessClient
from levanter.models.llama import LlamaConfig
from levanter.optim import AdamConfig
from marin.execution.core.errors import InvalidStep
from marin.execution.core.lazy import lower
from marin.execution.run.runner import StepRunner
from marin.experiment.sweeps.mixture_fit import MIXTURE_FIT_FILE, fit_mixture, fit_report, mixture_fit
from marin.experiment.sweeps.propose import propose
from marin.experiment.sweeps.space import Dirichlet, Method
from marin.experiment.sweeps.sweep import sweep
from marin.experiment.training.train import train_lm
from testsupport import sweep_trials as toy

NAMES = list(toy.MIX_BEST)  # /data/web, /data/books, /data/code
SPACE = {"data.datasets": ("dirichlet", NAMES, 1.0)}


def _base(datasets=None) -> toy.MixTrain:
    handle = train_lm(name="unused", version="v1", model=LlamaConfig(vocab_size=64, hidden_dim=16, intermediate_dim=32,
                                                                     num_heads=2, num_kv_heads=2, num_layers=1),
                      optimizer=AdamConfig(), datasets=datasets or dict.fromkeys(NAMES, 1.0), batch_size=4,
                      seq_len=16, num_train_steps=3)
    return toy.MixTrain(name="unused", config=handle.config)


def test_a_dirichlet_space_draws_the_same_mixtures_for_the_same_seed_and_sets_the_trials_weights():
    swarm = sweep("sweeps/mix", base=_base(), space=SPACE, method="random", trials=4, seed=3)
    (dim,) = swarm.spec.space
    assert isinstance(dim, Dirichlet) and dim.names == tuple(NAMES) and dim.alpha == (1.0, 1.0, 1.0)
    first = propose(Method.RANDOM, swarm.spec.space, round_index=0, count=4, seed=3)
    assert first == propose(Method.RANDOM, swarm.spec.space, round_index=0, count=4, seed=3)
    assert first != propose(Method.RANDOM, swarm.spec.space, round_index=0, count=4, seed=4)
    weights = [raw["data.datasets"] for raw in first]
    assert all(len(w) == 3 and abs(sum(w) - 1.0) < 1e-12 and min(w) > 0 for w in weights)
    trial = swarm.config.template.trial("sweeps/mix/trial-0", swarm.spec.params(first[0]))
    assert [(s.path, s.weight) for s in lower(trial).config.data.datasets] == list(zip(NAMES, weights[0], strict=True))


@pytest.mark.parametrize("space, method, message", [
    (SPACE, "tpe", "a dirichlet dimension needs method='random', got 'tpe'"),
    ({"data.datasets": ("dirichlet", NAMES[:2], 1.0)}, "random", "mixture weights must name the datasets /data/web, "
                                                                  "/data/books, /data/code; missing: /data/code"),
    ({"data.datasets": ("dirichlet", [*NAMES, "/data/math"], 1.0)}, "random", "unknown: /data/math"),
    ({"data.datasets": ("dirichlet", NAMES, [1.0, 2.0])}, "random", "dirichlet alpha must be a number or one per "
                                                                    "name (3), got [1.0, 2.0]"),
    ({"data.datasets": ("dirichlet", NAMES, 0.0)}, "random", "dirichlet alpha must be > 0, got 0.0"),
])
def test_a_bad_dirichlet_space_fails_when_the_sweep_is_made(space, method, message):
    with pytest.raises(InvalidStep, match="sweep 'sweeps/mix': space\\['data.datasets'\\]: ") as err:
        sweep("sweeps/mix", base=_base(), space=space, method=method, trials=4)
    assert message in str(err.value)


def test_the_fit_recovers_a_known_best_mixture_with_its_quality():
    rng = np.random.default_rng(0)
    weights = rng.dirichlet([1.0, 1.0, 1.0], size=16)
    objective = [toy.mix_loss(dict(zip(NAMES, w, strict=True))) for w in weights]
    fit = fit_mixture(weights, objective, names=NAMES, alpha=(1.0, 1.0, 1.0), candidates=20_000, top_k=50)
    assert fit.r2 > 0.999 and fit.loo_r2 > 0.99 and fit.spearman > 0.99
    assert np.allclose(fit.proposed, list(toy.MIX_BEST.values()), atol=0.04), fit.proposed
    assert abs(fit.predicted - 3.0) < 0.02
    with pytest.raises(ValueError, match="a quadratic fit of 3 datasets has 6 terms and needs at least 8 trials, got 5"):
        fit_mixture(weights[:5], objective[:5], names=NAMES, alpha=(1.0, 1.0, 1.0))


def test_a_swarm_and_its_fit_are_steps(tmp_path):
    swarm = sweep("sweeps/mix", base=_base(), space=SPACE, method="random", trials=12, seed=1)
    fit = mixture_fit(swarm, candidates=20_000, top_k=50)
    assert fit.name == "sweeps/mix/mixture-fit"
    result = StepRunner(prefix=str(tmp_path / "store"), client=InProcessClient(), max_parallel=1,
                        strict_env=False).run([fit])
    assert result.ok, [(s.name, s.error) for s in result.failed]
    document = json.loads(Path(result.by_name(fit.name).output_path, MIXTURE_FIT_FILE).read_text())
    assert document["trials"] == 12 and document["r2"] > 0.999 and list(document["proposed"]) == NAMES
    assert np.allclose(list(document["proposed"].values()), list(toy.MIX_BEST.values()), atol=0.05)
    lines = fit_report(document)
    assert lines[0].startswith("mixture fit of 12 trials (quadratic, 6 terms): R² 1.0000, leave-one-out R² ")
    with pytest.raises(InvalidStep, match="mixture_fit 'sweeps/lr': the sweep has 0 dirichlet dimensions"):
        mixture_fit(sweep("sweeps/lr", base=_base(), space={"optimizer.learning_rate": [1e-3, 1e-2]}))
