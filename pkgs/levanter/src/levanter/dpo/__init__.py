"""Preference training: DPO (and IPO, SLiC) over chosen/rejected pairs, with reference log-probs scored once.

:mod:`~levanter.dpo.config` holds the settings (no JAX import), :mod:`~levanter.dpo.loss` the
losses and their metrics, :mod:`~levanter.dpo.reference` the reference log-probs a run compares
with, and :mod:`~levanter.dpo.trainer` the run itself in levanter's training loop. Names load on
first use, so naming a ``DpoConfig`` does not import JAX.
"""

from __future__ import annotations

from rigging.lazy import lazy_getattr

__all__ = ["DpoConfig", "DpoLoss", "DpoRunConfig", "main", "read_reference", "score_pairs"]

_WHERE = {
    "DpoConfig": "levanter.dpo.config",
    "DpoLoss": "levanter.dpo.config",
    "DpoRunConfig": "levanter.dpo.config",
    "main": "levanter.dpo.trainer",
    "read_reference": "levanter.dpo.reference",
    "score_pairs": "levanter.dpo.reference",
}

__getattr__ = lazy_getattr(__name__, _WHERE)
