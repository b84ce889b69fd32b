"""The post-training tutorials end to end (issue 47), on the prefix of ``make experiments`` at smoke size.

``experiments/tutorials/dpo_nano.py``: DPO of the smoke SFT model over three betas, reading one
reference log-probs step. Quality bar: each run takes the held-out pairs' reward accuracy from 0
(step 0: the policy is its reference, every pair a tie, which counts 0 as in TRL) to at least 0.9, while the story text's perplexity stays
within 10% of the SFT model's (measured at smoke size: 1.0 / 1.0 / 1.0 accuracy; perplexity
below the SFT model's). ``experiments/tutorials/merge_nano.py``: the mean of a constant-rate
run's last four checkpoints has a lower validation loss than its last checkpoint alone, and is
printed beside the cooldown branch's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from testsupport.e2e import (
    ROOT,
    actions,
    builds_experiments,
    clean_env,
    entry,
    experiments_prefix,
    marin,
    plan_json,
)

BETAS = ("0.1", "0.3", "1.0")
DPO_FILE = "experiments/tutorials/dpo_nano.py"


def _rows(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _results(prefix: Path, name: str) -> dict:
    return json.loads((entry(prefix, name) / "eval_results.json").read_text())["results"]


@builds_experiments
@pytest.mark.slow
def test_dpo_over_three_betas_reads_one_reference_step_and_learns_the_held_out_preferences(
        tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    prefix, ran = experiments_prefix(tmp_path_factory)
    env = clean_env(MARIN_PREFIX=str(prefix))
    planned = actions(plan_json(DPO_FILE, env=env))
    assert [n for n in planned if n.startswith("reference/")] == ["reference/story-preferences/marin-nano-sft"]
    assert sorted(n for n in planned if n.startswith("checkpoints/marin-nano-dpo")) == [
        f"checkpoints/marin-nano-dpo-beta{b}" for b in BETAS]
    assert set(planned.values()) == {"cached"}, planned

    sft = _results(prefix, "evals/story-chats/fine-tuned")["tinystories"]["perplexity"]
    for beta in BETAS:
        rows = _rows(entry(prefix, f"checkpoints/marin-nano-dpo-beta{beta}"))
        held_out = [(r["step"], r["val_reward_accuracy"]) for r in rows if "val_reward_accuracy" in r]
        assert held_out[0] == (0, 0.0) and held_out[-1][0] == 16, held_out
        assert held_out[-1][1] >= 0.9, (beta, held_out)
        assert any("reward_margin" in r and "chosen_reward" in r and "rejected_reward" in r for r in rows)
        perplexity = _results(prefix, f"evals/story-chats/dpo-beta{beta}")["tinystories"]["perplexity"]
        assert perplexity <= 1.10 * sft, (beta, perplexity, sft)
        print(f"beta {beta}: held-out reward accuracy {held_out[0][1]} -> {held_out[-1][1]:.3f}, story-text "
              f"perplexity {perplexity:.2f} (SFT model {sft:.2f}, ratio {perplexity / sft:.3f})")

    # A fourth beta: one more DPO step (and its eval) to run; the reference is not scored again.
    (tmp_path / "four_betas.py").write_text(
        "from experiments.tutorials.dpo_nano import dpo_models, dpo_run\n"
        "steps = [*dpo_models.values(), dpo_run(3.0)]\n")
    with_pythonpath = {**env, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)}
    four = actions(plan_json(str(tmp_path / "four_betas.py"), env=with_pythonpath))
    assert four["reference/story-preferences/marin-nano-sft"] == "cached"
    assert {n: a for n, a in four.items() if a == "run"} == {"checkpoints/marin-nano-dpo-beta3.0": "run"}, four


@builds_experiments
@pytest.mark.slow
def test_the_mean_of_the_last_four_checkpoints_beats_the_last_one(tmp_path_factory: pytest.TempPathFactory) -> None:
    prefix, _ran = experiments_prefix(tmp_path_factory)
    loss = {label: _results(prefix, name)["tinystories"]["loss"] for label, name in (
        ("last checkpoint", "evals/checkpoints/nano-constant"),
        ("merge of the last 4", "evals/checkpoints/nano-constant-merge-last4"),
        ("cooldown branch", "evals/checkpoints/nano-constant-cooldown"))}
    merge = json.loads((entry(prefix, "checkpoints/nano-constant-merge-last4") / "merge.json").read_text())
    assert [m["checkpoint"] for m in merge["merged"]] == [25, 30, 35, "final"]
    assert loss["merge of the last 4"] < loss["last checkpoint"], loss
    print("validation loss: " + ", ".join(f"{k} {v:.4f}" for k, v in loss.items()))
    # marin compare puts the merge beside the runs it is compared with.
    compared = json.loads(marin("compare", "experiments/tutorials/merge_nano.py", "--format", "json",
                                env=clean_env(MARIN_PREFIX=str(prefix))).stdout)
    by_name = {row["name"]: row["metrics"].get("tinystories.loss") for row in compared["rows"]}
    assert by_name["checkpoints/nano-constant-merge-last4"] == loss["merge of the last 4"]
    assert by_name["checkpoints/nano-constant-cooldown"] == loss["cooldown branch"]
