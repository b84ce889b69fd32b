"""``train_lm`` mixtures by phase: their identity (a static mixture keeps its hash), their checks,
what ``marin plan`` says of them (epochs, repeats, missing data), extensions that add a phase, and
the tokens a run's summary records. No model is trained here (see levanter's test_mixture_phases)."""

from __future__ import annotations

import os
import textwrap

import pytest
from click.testing import CliRunner

from levanter.checkpoint import CheckpointConfig
from levanter.data.spec import DatasetSpec, MixturePhase
from levanter.data.usage import mixture_usage
from levanter.models.llama import LlamaConfig
from levanter.optim import AdamConfig
from marin.cli.main import cli
from marin.execution.core.encoding import config_to_json, flatten_config
from marin.execution.core.errors import InvalidStep
from marin.execution.core.lazy import lower
from marin.execution.store.provenance_record import Provenance
from marin.experiment.training.mixture import mixture_summary
from marin.experiment.training.train import checkpoint, train_lm
from marin.experiment.training.warm_start import find_extension
from testsupport.levanter_data import write_tokenized

TINY = LlamaConfig(vocab_size=64, hidden_dim=16, intermediate_dim=32, num_heads=2, num_kv_heads=2, num_layers=1,
                   max_seq_len=32)
CONSTANT = AdamConfig(learning_rate=1e-3, warmup=2, schedule="constant")
A, B = "/data/tok-a", "/data/tok-b"
# train_lm(datasets={A: 0.7, B: 0.3}) below, computed before phases existed: a static mixture keeps it.
STATIC_HASH = "c0ff7d5936b8089ecec59374916b373b30fd5a43049d627d41eb67c0d198f9a8"


def _train(datasets, name: str = "checkpoints/static", steps: int = 8, **settings):
    return train_lm(name=name, version="v1", model=TINY, optimizer=AdamConfig(learning_rate=1e-3), datasets=datasets,
                    batch_size=4, seq_len=16, num_train_steps=steps, **settings)


def test_a_static_mixture_keeps_its_hash_and_each_phase_is_part_of_the_identity():
    static = lower(_train({A: 0.7, B: 0.3}))
    assert static.hash == STATIC_HASH
    assert lower(_train([(0, {A: 0.7, B: 0.3})])).hash == STATIC_HASH  # one phase is a static mixture
    assert lower(_train({A: 0.7, B: 0.3}, epochs_warning=10)).hash == STATIC_HASH  # a plan setting only
    phased = lower(_train([(0, {A: 0.7, B: 0.3}), (4, {A: 0.2, B: 0.8})]))
    assert phased.config.data.datasets == (DatasetSpec(A, 0.7), DatasetSpec(B, 0.3))
    assert phased.config.data.phases == (MixturePhase(4, (0.2, 0.8)),)
    others = {lower(_train([(0, {A: 0.7, B: 0.3}), (5, {A: 0.2, B: 0.8})])).hash,
              lower(_train([(0, {A: 0.7, B: 0.3}), (4, {A: 0.3, B: 0.7})])).hash,
              lower(_train([(0, {A: 0.7, B: 0.3}), (4, {B: 1.0})])).hash}
    assert len(others | {phased.hash, STATIC_HASH}) == 5


@pytest.mark.parametrize("datasets, message", [
    ([(2, {A: 1.0})], "the first phase must start at step 0, got 2"),
    ([(0, {A: 1.0}), (4, {A: 1.0}), (4, {B: 1.0})], "phases must start at increasing steps, got 4 after 4"),
    ([(0, {A: 1.0}), (4, {A: 0.0})], "the phase at step 4 gives every dataset weight 0"),
    ([(0, {A: -1.0})], "dataset weight must be a number >= 0, got -1.0"),
    ([(0, {A: 1.0}), 4], "a phase must be (step, {data: weight}), got 4"),
    ({A: 0.0}, "dataset weight must be a number > 0, got 0.0"),
    ("tokenized/x", "datasets must be a mapping of tokenized data to weights or a list of (step, mapping) phases"),
])
def test_a_bad_mixture_fails_when_the_handle_is_made(datasets, message):
    with pytest.raises(InvalidStep) as err:
        _train(datasets)
    assert str(err.value) == f"train_lm 'checkpoints/static': {message}" or str(err.value).startswith(
        f"train_lm 'checkpoints/static': {message}"), str(err.value)


def test_a_cooldown_branch_carries_its_own_phase_and_lists_its_sources_datasets_first():
    main = _train({A: 0.7, B: 0.3}, name="checkpoints/main", steps=20,
                  checkpoint=CheckpointConfig(save_every=10, keep_every=10))
    hq = "/data/tok-hq"
    branch = lower(_train([(10, {A: 0.2, B: 0.2, hq: 0.6})], name="checkpoints/cool", steps=20,
                          initialize_from=checkpoint(main, step=10)))
    assert [s.weight for s in branch.config.data.datasets] == [0.2, 0.2, 0.6] and branch.config.data.phases == ()
    with pytest.raises(InvalidStep, match=r"list the source's datasets first, in their order \(/data/tok-a, "
                                          r"/data/tok-b\), and new ones after them"):
        _train({B: 0.5, A: 0.5}, name="checkpoints/cool", steps=20, initialize_from=checkpoint(main, step=10))
    _train({B: 0.5, A: 0.5}, name="checkpoints/cool", steps=20, initialize_from=checkpoint(main, step=10),
           reset_data_loader=True)


def test_marin_plan_shows_each_datasets_epochs_and_warns_of_repeats_and_missing_data(tmp_path):
    big = write_tokenized(str(tmp_path / "big"), {"train": [[1, 2, 3, 4] * 50] * 40}, vocab_size=64, eos_id=0)
    small = write_tokenized(str(tmp_path / "small"), {"train": [[5, 6, 7]] * 20}, vocab_size=64, eos_id=0)
    missing = str(tmp_path / "never-tokenized")
    exp = tmp_path / "mix_plan.py"
    exp.write_text(textwrap.dedent(f"""
        from levanter.models.llama import LlamaConfig
        from levanter.optim import AdamConfig
        from marin.experiment.training.train import train_lm

        model = train_lm(name="checkpoints/mix", version="v1", model=LlamaConfig(), optimizer=AdamConfig(),
                         datasets=[(0, {{{big!r}: 0.9, {small!r}: 0.1}}), (30, {{{big!r}: 0.5, {small!r}: 0.5}}),
                                   (100, {{{missing!r}: 1.0}})],
                         batch_size=4, seq_len=15, num_train_steps=60)
        steps = [model]
    """))
    result = CliRunner().invoke(cli, ["plan", str(exp), "--prefix", str(tmp_path / "store")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    # 4 windows of 16 tokens a step: big gives 4 x (0.9 x 30 + 0.5 x 30) = 168 of its (40 x 200 + 40) / 16 = 502.5
    # windows an epoch, small 4 x (0.1 x 30 + 0.5 x 30) = 72 of (20 x 3 + 20) / 16 = 5.
    assert (f"note: mixture over steps 0-60 in 2 phases (from steps 0, 30): {big} 0.33 epochs, {small} 14.40 epochs, "
            f"{missing} ? epochs (no data)") in lines[1]
    assert "note: phases at steps 100 start after the run's last step (60): they take effect only in a longer run" \
        in lines[1]
    assert lines[-2:] == [
        f"warning: checkpoints/mix: {small} would be read 14.4 times (over 4 epochs): give it less weight or more "
        "data, or set train_lm(..., epochs_warning=...)",
        f"warning: checkpoints/mix: {missing}: tokenized data missing or incomplete (no readable index.json): "
        "training will refuse it",
    ]


def _fake_build(root: str, name: str, config, steps: list[int]) -> tuple[str, Provenance, dict]:
    folder = os.path.join(root, name)
    for step in steps:
        os.makedirs(os.path.join(folder, "checkpoints", str(step)))
        open(os.path.join(folder, "checkpoints", str(step), "commit_success.txt"), "w").close()
    provenance = Provenance(name="checkpoints/mix", version="v1", fn="marin.experiment.train:train_lm_step",
                            config=config_to_json(config))
    return folder, provenance, flatten_config(config, {})


def test_an_extension_may_add_a_later_phase_from_a_checkpoint_before_it(tmp_path):
    def config(datasets, steps):
        return lower(train_lm(name="checkpoints/mix", version="v1", model=TINY, optimizer=CONSTANT, datasets=datasets,
                              batch_size=4, seq_len=16, num_train_steps=steps)).config

    earlier = [_fake_build(str(tmp_path), "checkpoints/mix-0", config({A: 0.7, B: 0.3}, 12), [4, 8, 12])]

    def extends(phase_at: int):
        new = config([(0, {A: 0.7, B: 0.3}), (phase_at, {A: 0.2, B: 0.8})], 20)
        return find_extension(name="checkpoints/mix", version="v1", fn="marin.experiment.train:train_lm_step",
                              config=new, flat=flatten_config(new, {}), earlier=earlier,
                              optimizer_from_json=lambda data: AdamConfig(**data))

    assert extends(14).describe() == "extends mix-0 from step 12 (saves 12 steps)".replace("mix-0", "checkpoints/mix-0")
    assert extends(10).step == 8 and extends(6).step == 4
    assert extends(3).describe() == ("cannot extend checkpoints/mix-0: the mixtures' phases part at step 3 (it keeps "
                                     "no checkpoint at or before step 3)")


def test_the_summary_counts_tokens_by_dataset_and_by_phase_under_the_steps_names():
    prefix = "/store"
    a, b = f"{prefix}/tokenized/a-0123456789abcdef", f"{prefix}/tokenized/b-fedcba9876543210"
    config = lower(_train([(0, {a: 0.7, b: 0.3}), (4, {a: 0.2, b: 0.8})])).config
    summary = mixture_summary(config, steps=8, first_step=0, data_offset=0, prefix=prefix)
    usage = mixture_usage(config.data.datasets, config.data.phases, seed=0, batch_size=4, seq_len=16, first_step=0,
                          last_step=8)
    assert summary["tokens_by_dataset"] == {"tokenized/a": usage.tokens[0], "tokenized/b": usage.tokens[1]}
    assert sum(summary["tokens_by_dataset"].values()) == 8 * 4 * 16
    assert [(p["start_step"], p["end_step"], p["weights"]) for p in summary["tokens_by_phase"]] == [
        (0, 4, {"tokenized/a": 0.7, "tokenized/b": 0.3}), (4, 8, {"tokenized/a": 0.2, "tokenized/b": 0.8})]
    # A branch from step 6 counts the steps it trained.
    branch = mixture_summary(config, steps=8, first_step=6, data_offset=0, prefix=prefix)
    assert sum(branch["tokens_by_dataset"].values()) == 2 * 4 * 16 and len(branch["tokens_by_phase"]) == 1
