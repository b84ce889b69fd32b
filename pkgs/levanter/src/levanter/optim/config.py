"""Marin's ``levanter.optim.config`` path: the optimizer configs of :mod:`levanter.optim`, re-exported."""

from levanter.optim import AdamConfig, DecayShape, Schedule

__all__ = ["AdamConfig", "DecayShape", "Schedule"]
