"""Training: the ``train_lm()`` handle and its step (:mod:`~marin.experiment.training.train`), what
names a trained model for the steps that read one (:mod:`~marin.experiment.training.models`), runs
that extend an earlier build (:mod:`~marin.experiment.training.warm_start`), FLOPs accounting
(:mod:`~marin.experiment.training.flops`) and sampling from a trained model
(:mod:`~marin.experiment.training.sampling`).

Nothing is imported here: ``from marin.experiment import train_lm`` (or the module itself) loads
what it needs.
"""
