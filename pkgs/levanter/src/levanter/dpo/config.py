"""The settings of a preference-training (DPO) run. Importing this module does not import JAX."""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping
from typing import Any

from levanter.config import TrainLmConfig, config_from_dict, config_to_dict

__all__ = ["DPO_CONFIG_FILE", "DpoConfig", "DpoLoss", "DpoRunConfig", "dpo_config_from_dict", "dpo_config_to_dict"]

DPO_CONFIG_FILE = "dpo.json"
"""Beside a DPO run's ``config.json`` (its training settings): the preference settings."""


class DpoLoss(enum.Enum):
    """The preference loss of a margin ``h = (log pi(y_w) - log ref(y_w)) - (log pi(y_l) - log ref(y_l))``."""

    SIGMOID = "sigmoid"
    """DPO (Rafailov et al.): ``-log sigmoid(beta h)``; with ``label_smoothing`` e, the robust
    (cDPO) ``-(1 - e) log sigmoid(beta h) - e log sigmoid(-beta h)``."""
    IPO = "ipo"
    """IPO (Azar et al.): ``(h - 1 / (2 beta))^2``, its log-probs the completions' per-token means."""
    HINGE = "hinge"
    """SLiC: ``max(0, 1 - beta h)``."""


@dataclasses.dataclass(frozen=True)
class DpoConfig:
    """The preference loss and its strength."""

    beta: float = 0.1
    """How far from the reference the policy may move (> 0): the rewards are ``beta`` times the log-ratios."""
    loss: DpoLoss = DpoLoss.SIGMOID
    """Which loss (a ``DpoLoss`` or its string value)."""
    label_smoothing: float = 0.0
    """``sigmoid`` only: the assumed share of pairs whose preference label is flipped, in [0, 0.5)."""

    def __post_init__(self) -> None:
        if isinstance(self.loss, str):
            try:
                object.__setattr__(self, "loss", DpoLoss(self.loss))
            except ValueError:
                raise ValueError(f"loss must be one of {', '.join(repr(k.value) for k in DpoLoss)}, "
                                 f"got {self.loss!r}") from None
        if not isinstance(self.loss, DpoLoss):
            raise ValueError(f"loss must be a DpoLoss or one of {[k.value for k in DpoLoss]}, got {self.loss!r}")
        b = self.beta
        if isinstance(b, bool) or not isinstance(b, int | float) or not math.isfinite(b) or b <= 0:
            raise ValueError(f"beta must be a finite number > 0, got {b!r}")
        object.__setattr__(self, "beta", float(b))
        s = self.label_smoothing
        if isinstance(s, bool) or not isinstance(s, int | float) or not 0 <= s < 0.5:
            raise ValueError(f"label_smoothing must be in [0, 0.5), got {s!r}")
        if s and self.loss is not DpoLoss.SIGMOID:
            raise ValueError(f"label_smoothing applies to loss='sigmoid' only, got loss={self.loss.value!r}")
        object.__setattr__(self, "label_smoothing", float(s))


@dataclasses.dataclass(frozen=True)
class DpoRunConfig:
    """A DPO run: a training run (``train``) whose data is preference pairs, with a preference loss."""

    train: TrainLmConfig
    """Model, optimizer and loop; ``data`` names the tokenized preference pairs (one dataset),
    ``trainer.initialize_from`` the policy's starting weights (also the LoRA base), ``lora`` and
    ``trainer.ema`` as for any run."""
    dpo: DpoConfig = DpoConfig()
    """The loss."""
    reference: Any = None
    """The reference log-probs' folder (``levanter.dpo.reference``), or None: with ``train.lora``,
    the base (the policy with its adapters off, scored in the step: no second copy of the weights)."""

    def __post_init__(self) -> None:
        if not isinstance(self.train, TrainLmConfig):
            raise ValueError(f"train must be a TrainLmConfig, got {type(self.train).__name__}")
        if not isinstance(self.dpo, DpoConfig):
            raise ValueError(f"dpo must be a DpoConfig, got {type(self.dpo).__name__}")
        if len(self.train.data.datasets) != 1:
            raise ValueError(f"a DPO run reads one preference dataset, got {len(self.train.data.datasets)}")
        if self.train.trainer.initialize_from is None:
            raise ValueError("a DPO run starts from a trained model (trainer.initialize_from), got none")
        if self.reference is None and self.train.lora is None:
            raise ValueError("reference must name reference log-probs (only a LoRA run can use its base as "
                             "its reference without a second copy of the weights)")


def dpo_config_to_dict(config: DpoRunConfig) -> dict[str, Any]:
    """JSON-ready form of ``config`` (the training settings as ``levanter.config.config_to_dict`` has them)."""
    return {"train": config_to_dict(config.train),
            "dpo": {"beta": config.dpo.beta, "loss": config.dpo.loss.value, "label_smoothing": config.dpo.label_smoothing},
            "reference": None if config.reference is None else str(config.reference)}


def dpo_config_from_dict(data: Mapping[str, Any]) -> DpoRunConfig:
    """Inverse of :func:`dpo_config_to_dict`."""
    return DpoRunConfig(train=config_from_dict(data["train"]), dpo=DpoConfig(**data["dpo"]),
                        reference=data.get("reference"))
