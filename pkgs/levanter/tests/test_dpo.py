"""Preference training: the losses against TRL's formulas, reference log-probs, and DPO runs in the loop."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

from levanter.checkpoint import CheckpointConfig
from levanter.dpo.config import DpoConfig, DpoLoss, DpoRunConfig, dpo_config_to_dict
from levanter.dpo.loss import pair_metrics, pair_terms
from levanter.dpo.reference import read_reference, score_pairs
from levanter.dpo.trainer import main as dpo_main
from levanter.generate import load_model
from levanter.initialize import TrainedModel
from levanter.lora import LoraConfig
from levanter.optim import AdamConfig
from levanter.sharding import MeshConfig
from levanter.trainer import main
from testsupport.levanter_data import cpu_device_env, tiny_config, write_pattern_pairs


def _log_sigmoid(x: np.ndarray) -> np.ndarray:
    return -np.logaddexp(0.0, -x)


def _trl(pc, pr, rc, rr, nc, nr, beta, loss, label_smoothing=0.0):
    """``DPOTrainer.dpo_loss`` of TRL, written out: losses, chosen and rejected rewards (IPO on per-token means)."""
    if loss == "ipo":
        pc, pr, rc, rr = pc / nc, pr / nr, rc / nc, rr / nr
    logits = (pc - pr) - (rc - rr)  # pi_logratios - ref_logratios
    if loss == "sigmoid":
        losses = -_log_sigmoid(beta * logits) * (1 - label_smoothing) - _log_sigmoid(-beta * logits) * label_smoothing
    elif loss == "hinge":
        losses = np.maximum(0.0, 1 - beta * logits)
    else:
        losses = (logits - 1 / (2 * beta)) ** 2
    return losses, beta * (pc - rc), beta * (pr - rr)


@pytest.mark.parametrize(("loss", "beta", "smoothing"), [("sigmoid", 0.1, 0.0), ("sigmoid", 0.5, 0.2),
                                                         ("ipo", 0.3, 0.0), ("hinge", 0.2, 0.0)])
def test_losses_rewards_and_accuracy_equal_trls_formulas_on_a_fixed_batch(loss, beta, smoothing) -> None:
    rng = np.random.default_rng(3)
    n = 16
    policy = rng.normal(-40, 8, size=(n, 2))
    reference = policy + rng.normal(0, 2, size=(n, 2))
    counts = rng.integers(3, 30, size=(n, 2)).astype(np.float64)
    config = DpoConfig(beta=beta, loss=loss, label_smoothing=smoothing)
    terms = pair_terms(jnp.asarray(policy, jnp.float32), jnp.asarray(reference, jnp.float32),
                       jnp.asarray(counts, jnp.float32), config)
    got = {k: float(v) for k, v in pair_metrics(terms).items()}
    losses, chosen, rejected = _trl(policy[:, 0], policy[:, 1], reference[:, 0], reference[:, 1],
                                    counts[:, 0], counts[:, 1], beta, loss, smoothing)
    np.testing.assert_allclose(np.asarray(terms.loss), losses, rtol=2e-5, atol=2e-6)
    assert got["loss"] == pytest.approx(losses.mean(), rel=2e-5)
    assert got["chosen_reward"] == pytest.approx(chosen.mean(), rel=2e-5, abs=2e-6)
    assert got["rejected_reward"] == pytest.approx(rejected.mean(), rel=2e-5, abs=2e-6)
    assert got["reward_margin"] == pytest.approx((chosen - rejected).mean(), rel=2e-5, abs=2e-6)
    assert got["reward_accuracy"] == (chosen > rejected).mean()  # no ties here: exactly TRL's
    assert 0 < got["reward_accuracy"] < 1


def test_a_tie_counts_zero_as_in_trl_so_a_policy_that_is_its_reference_scores_zero() -> None:
    same = jnp.asarray([[-3.0, -5.0], [-2.0, -2.5]])
    metrics = pair_metrics(pair_terms(same, same, jnp.ones((2, 2)), DpoConfig(beta=0.1)))
    assert float(metrics["reward_accuracy"]) == 0.0 and float(metrics["reward_margin"]) == 0.0
    # One pair ranked right, one tie: TRL's mean of ``chosen > rejected`` is 1/2 (not 3/4).
    moved = same.at[0, 0].add(1.0)
    assert float(pair_metrics(pair_terms(moved, same, jnp.ones((2, 2)), DpoConfig(beta=0.1)))["reward_accuracy"]) == 0.5
    assert float(metrics["loss"]) == pytest.approx(np.log(2.0), rel=1e-6)


def test_bad_dpo_settings_are_one_line_errors() -> None:
    for beta in (0, -0.1, float("nan")):
        with pytest.raises(ValueError, match=r"^beta must be a finite number > 0, got"):
            DpoConfig(beta=beta)
    with pytest.raises(ValueError, match=r"^loss must be one of 'sigmoid', 'ipo', 'hinge', got 'kto'$"):
        DpoConfig(loss="kto")
    with pytest.raises(ValueError, match="label_smoothing applies to loss='sigmoid' only"):
        DpoConfig(loss=DpoLoss.IPO, label_smoothing=0.1)


def _rows(out: str) -> list[dict]:
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def _at(rows: list[dict], step: int, key: str) -> float:
    return next(r[key] for r in rows if r.get("step") == step and key in r)


STEPS = 12


@pytest.fixture(scope="module")
def pretrained(pretrained_tiny, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """The shared tiny model trained on pattern documents, and pattern preference pairs of its vocabulary."""
    return pretrained_tiny[1], write_pattern_pairs(str(tmp_path_factory.mktemp("dpo") / "pairs"))


def _lora_config(pretrained: tuple[str, str], mesh: MeshConfig = MeshConfig()) -> DpoRunConfig:
    """LoRA-DPO: no reference step, the base scored in the step."""
    model, pairs = pretrained
    train = tiny_config(pairs, seq_len=16, num_train_steps=STEPS, eval_batches=4, eval_every=STEPS, mesh=mesh,
                        initialize_from=TrainedModel(model), lora=LoraConfig(rank=4, alpha=16.0),
                        optimizer=AdamConfig(learning_rate=3e-3, warmup=0, weight_decay=0.0))
    return DpoRunConfig(train=train, dpo=DpoConfig(beta=0.5))


@pytest.fixture(scope="module")
def lora_run(pretrained, tmp_path_factory: pytest.TempPathFactory) -> str:
    out = str(tmp_path_factory.mktemp("lora-dpo") / "out")
    dpo_main(_lora_config(pretrained), out)
    return out


def test_dpo_runs_in_the_loop_from_reference_log_probs_and_lora_uses_its_base(pretrained, lora_run, tmp_path) -> None:
    model, pairs = pretrained
    reference = str(tmp_path / "reference")
    assert score_pairs(model, pairs, reference, batch_size=8) == {"train": 160, "validation": 32}
    table = read_reference(reference, pairs)
    assert table["train"].shape == (160, 2) and (table["train"] < 0).all()

    train = tiny_config(pairs, seq_len=16, num_train_steps=STEPS, eval_batches=4, eval_every=STEPS,
                        initialize_from=TrainedModel(model), checkpoint=CheckpointConfig(save_every=6),
                        optimizer=AdamConfig(learning_rate=1e-2, warmup=0, weight_decay=0.0))
    out = str(tmp_path / "dpo")
    summary = dpo_main(DpoRunConfig(train=train, dpo=DpoConfig(beta=0.5), reference=reference), out)
    rows = _rows(out)
    # Before the first step the policy is the reference (scored by another program: equal to rounding,
    # so the pairs are ties, which count 0, or ranked either way by rounding).
    assert abs(_at(rows, 0, "val_reward_margin")) < 1e-3 and _at(rows, 0, "val_reward_accuracy") <= 0.8
    assert _at(rows, 0, "val_loss") == pytest.approx(np.log(2), abs=1e-3)
    assert _at(rows, STEPS, "val_reward_accuracy") >= 0.9 and _at(rows, STEPS, "val_reward_margin") > 0
    assert _at(rows, STEPS, "val_loss") < 0.5 * np.log(2)
    assert {"loss", "chosen_reward", "rejected_reward", "reward_accuracy", "reward_margin"} <= set(
        next(r for r in rows if r.get("step") == STEPS and "reward_accuracy" in r))
    assert summary.steps == STEPS and os.path.exists(os.path.join(out, "dpo.json"))
    config, params = load_model(out)  # a model like any other
    assert config.vocab_size == 64 and "embed" in params
    assert sorted(os.listdir(os.path.join(out, "checkpoints"))) == ["12", "6"]
    again = dpo_main(DpoRunConfig(train=train, dpo=DpoConfig(beta=0.5), reference=reference), out)
    assert again.start_step == STEPS and again.val_loss == pytest.approx(summary.val_loss, rel=1e-6)

    # LoRA-DPO: the base is the reference, scored in the step (no reference log-probs, no second copy).
    lora_rows = _rows(lora_run)
    assert _at(lora_rows, 0, "val_reward_accuracy") == 0.0 and _at(lora_rows, 0, "val_reward_margin") == 0.0
    # ... its reference is the same model the reference step scored.
    assert _at(lora_rows, 0, "val_chosen_logp") == pytest.approx(float(table["validation"][:, 0].mean()), rel=1e-4)
    assert _at(lora_rows, STEPS, "val_reward_accuracy") >= 0.9
    assert os.path.exists(os.path.join(lora_run, "lora.json"))

    with pytest.raises(ValueError, match="score other preference data"):
        other = write_pattern_pairs(str(tmp_path / "other"), train=80)
        dpo_main(DpoRunConfig(train=tiny_config(other, seq_len=16, initialize_from=TrainedModel(model)),
                              reference=reference), str(tmp_path / "bad"))
    with pytest.raises(ValueError, match="holds preference pairs .* not as language-model data"):
        main(tiny_config(pairs, seq_len=16), str(tmp_path / "lm-on-pairs"))
    with pytest.raises(ValueError, match="reference must name reference log-probs"):
        DpoRunConfig(train=tiny_config(pairs, seq_len=16, initialize_from=TrainedModel(model)))


def test_a_lora_dpo_run_over_two_devices_matches_one(pretrained, lora_run, tmp_path) -> None:
    """The mesh is how, not what: pairs split over 2 devices (and the frozen base over fsdp) give the same steps."""
    path = tmp_path / "two.json"
    path.write_text(json.dumps(dpo_config_to_dict(_lora_config(pretrained, MeshConfig(data=1, fsdp=2)))))
    env = cpu_device_env(2)
    two = str(tmp_path / "two")
    ran = subprocess.run([sys.executable, "-m", "levanter.dpo.trainer", str(path), two], env=env, capture_output=True,
                         text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert json.loads(ran.stdout.strip().splitlines()[-1])["devices"] == 2
    for key in ("loss", "reward_margin", "val_reward_margin"):
        a = [r[key] for r in _rows(lora_run) if key in r]
        b = [r[key] for r in _rows(two) if key in r]
        assert len(a) in (2, STEPS) and abs(a[-1] - a[0]) > 1e-3
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
