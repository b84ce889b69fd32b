"""Hyperparameter sweeps: the ``sweep()`` and ``best()`` handles (:mod:`~marin.experiment.sweeps.sweep`),
their steps (:mod:`~marin.experiment.sweeps.steps`), search spaces (:mod:`~marin.experiment.sweeps.space`)
and proposals (:mod:`~marin.experiment.sweeps.propose`).
"""
