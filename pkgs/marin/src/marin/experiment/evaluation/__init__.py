"""Evaluation: the ``evaluate()`` handle and its steps (:mod:`~marin.experiment.evaluation.eval`),
benchmark tasks run through lm-evaluation-harness (:mod:`~marin.experiment.evaluation.tasks`), the
eval results' format (:mod:`~marin.experiment.evaluation.results`) and the eval report
(:mod:`~marin.experiment.evaluation.table`).

It reads trained models through :mod:`marin.experiment.training.models` only, never the training
step's module (which builds its ``evals=`` step from here).
"""
