"""Hyperparameter sweeps: the ``sweep()`` and ``best()`` handles (:mod:`~marin.experiment.sweeps.sweep`),
their steps (:mod:`~marin.experiment.sweeps.steps`), search spaces (:mod:`~marin.experiment.sweeps.space`),
proposals (:mod:`~marin.experiment.sweeps.propose`) and the fit of a mixture search
(:mod:`~marin.experiment.sweeps.mixture_fit`).
"""
