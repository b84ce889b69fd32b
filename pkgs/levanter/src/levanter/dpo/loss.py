"""The preference losses and what is logged of them, as TRL's ``DPOTrainer`` computes them.

For a pair, with ``pi`` the policy's and ``ref`` the reference's summed log-probs of a completion
(per-token means for IPO), the log-ratio margin is ``h = (pi_w - ref_w) - (pi_l - ref_l)``, the
rewards are ``beta (pi_w - ref_w)`` (chosen) and ``beta (pi_l - ref_l)`` (rejected), the margin is
their difference, and a pair counts as ranked right (``reward_accuracy``) only when the chosen
reward is strictly the larger: a tie counts 0, as in TRL (``chosen_rewards > rejected_rewards``),
so a policy that is still its reference (every pair a tie, as at step 0) scores 0.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from levanter.data.chat import loss_weights
from levanter.dpo.config import DpoConfig, DpoLoss
from levanter.training.loss import sequence_logprobs
from levanter.training.step import Objective

__all__ = ["PairTerms", "batch_terms", "dpo_objective", "pair_metrics", "pair_terms"]


@dataclasses.dataclass(frozen=True)
class PairTerms:
    """Per pair (``[b]`` each): the loss, the two rewards and the policy's summed log-probs."""

    loss: jax.Array
    chosen_reward: jax.Array
    rejected_reward: jax.Array
    chosen_logp: jax.Array
    rejected_logp: jax.Array


jax.tree_util.register_dataclass(PairTerms, data_fields=[f.name for f in dataclasses.fields(PairTerms)],
                                 meta_fields=[])


def pair_terms(policy: jax.Array, reference: jax.Array, counts: jax.Array, config: DpoConfig) -> PairTerms:
    """The terms of pairs from ``[b, 2]`` summed log-probs (chosen, rejected) of the policy and the
    reference, and ``[b, 2]`` completion lengths (tokens)."""
    if config.loss is DpoLoss.IPO:  # IPO compares per-token means (TRL: log-probs divided by the length)
        policy, reference = policy / jnp.maximum(counts, 1.0), reference / jnp.maximum(counts, 1.0)
    chosen_ratio = policy[:, 0] - reference[:, 0]
    rejected_ratio = policy[:, 1] - reference[:, 1]
    h = chosen_ratio - rejected_ratio
    beta = config.beta
    if config.loss is DpoLoss.SIGMOID:
        e = config.label_smoothing
        loss = -(1.0 - e) * jax.nn.log_sigmoid(beta * h) - e * jax.nn.log_sigmoid(-beta * h)
    elif config.loss is DpoLoss.IPO:
        loss = jnp.square(h - 1.0 / (2.0 * beta))
    else:
        loss = jax.nn.relu(1.0 - beta * h)
    return PairTerms(loss=loss, chosen_reward=beta * chosen_ratio, rejected_reward=beta * rejected_ratio,
                     chosen_logp=policy[:, 0], rejected_logp=policy[:, 1])


def pair_metrics(terms: Any, weights: Any = None) -> dict[str, Any]:
    """Means over pairs (weighted by ``weights``: 1 for a pair that counts, 0 for padding) of the
    loss, the rewards, ``reward_accuracy`` and ``reward_margin``; works on numpy and JAX arrays."""
    xp = jnp if isinstance(terms.loss, jax.Array) else np
    w = xp.ones_like(terms.loss) if weights is None else weights
    total = xp.maximum(xp.sum(w), 1.0)
    right = xp.where(terms.chosen_reward > terms.rejected_reward, 1.0, 0.0)  # a tie counts 0, as in TRL

    def mean(x: Any) -> Any:
        return xp.sum(x * w) / total

    return {"loss": mean(terms.loss), "chosen_reward": mean(terms.chosen_reward),
            "rejected_reward": mean(terms.rejected_reward), "reward_accuracy": mean(right),
            "reward_margin": mean(terms.chosen_reward - terms.rejected_reward),
            "chosen_logp": mean(terms.chosen_logp), "rejected_logp": mean(terms.rejected_logp)}


def batch_terms(model: Any, params: Any, batch: dict[str, jax.Array], compute_dtype: Any, config: DpoConfig,
                base: Any = None, *, block: int | None = None) -> PairTerms:
    """The terms of a batch ``{"pairs": [b, 2, 3, window], "reference": [b, 2]}``; without ``reference``
    the reference is ``base`` (the frozen weights the policy's adapters adapt), scored here.

    Each side's log-prob is ``levanter.training.loss.sequence_logprobs`` (the softmax a block of
    ``block`` positions at a time): the sum over the completion's tokens, the ones the mask marks.
    """
    pairs = batch["pairs"]
    b = pairs.shape[0]
    flat = pairs.reshape(b * 2, *pairs.shape[2:])
    sums = sequence_logprobs(model, params, flat, compute_dtype, block=block)
    counts = jnp.sum(loss_weights(flat).astype(jnp.float32), axis=-1)
    if "reference" in batch:
        reference = batch["reference"]
    else:
        reference = jax.lax.stop_gradient(sequence_logprobs(model, base, flat, compute_dtype, block=block)).reshape(b, 2)
    return pair_terms(sums.reshape(b, 2), reference, counts.reshape(b, 2), config)


def dpo_objective(model: Any, compute_dtype: Any, config: DpoConfig, params_of: Any, *,
                  block: int | None = None) -> Objective:
    """The training objective (``levanter.training.step``): the mean preference loss of a batch;
    ``params_of(trained, frozen)`` makes the policy's parameters (``frozen``: a LoRA run's base)."""
    def objective(params: Any, batch: Any, frozen: Any) -> tuple[jax.Array, tuple[jax.Array, dict[str, jax.Array]]]:
        terms = batch_terms(model, params_of(params, frozen), batch, compute_dtype, config, base=frozen, block=block)
        metrics = pair_metrics(terms)
        loss = metrics.pop("loss")
        return loss, (loss, metrics)

    return objective
