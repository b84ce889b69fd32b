"""The CLI as people read it: ``marin show``'s summary, ``-v`` after the verb, "did you mean" and a
handle's argument errors naming the file and line, and ``marin run``'s closing scores and report."""

from __future__ import annotations

import json
import os
import re
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from marin.cli.main import cli
from marin.report.outputs import read_tokenized

EXPERIMENT = """
import steps_for_tests as t
from marin.execution.core.placeholders import output_path_of
from marin.execution.step import Step
from marin.experiment.evaluation.eval import EvalSummaryConfig

docs = Step("curated/docs", t.summarised, t.NodeConfig("docs", extra={"threshold": 0.003, "rules": {"min_words": 5}}))
scores = Step("evals/docs", t.scored, EvalSummaryConfig(model=output_path_of(docs), checkpoint="final",
                                                        tasks=("story_qa",)))
steps = [scores]
"""


def _invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


def _exp(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


def test_run_ends_with_the_scores_and_the_report_and_show_summarises_each_step(tmp_path):
    exp, prefix = _exp(tmp_path, "people_exp", EXPERIMENT), str(tmp_path / "store")
    run = _invoke("run", exp, "--prefix", prefix)
    assert run.exit_code == 0, run.output
    lines = run.stdout.splitlines()
    assert lines[-4:-1] == ["scores: evals/docs", "  task story_qa      acc 0.625 ± 0.125",
                            "  data held-out      loss 2.5, bpb 1.25"], run.stdout
    report = re.fullmatch(r"report: (\S+/reports/run-\S+\.html)", lines[-1])
    assert report and os.path.isfile(report.group(1)), run.stdout

    shown = _invoke("show", "curated/docs", "--prefix", prefix)
    assert shown.exit_code == 0, shown.output
    text = shown.stdout
    raw = json.loads(_invoke("show", "curated/docs", "--prefix", prefix, "--json").stdout)
    assert raw["state"] == "done" and raw["name"] == "curated/docs" and "0x1." in json.dumps(raw["config_flat"])
    # Decimal floats, never hex; the config as a tree, one level of indent per level of nesting.
    assert "0x1." not in text
    assert re.search(r"^  extra\n    rules\n      min_words  5\n    threshold    0\.003$", text, re.M), text
    # Local times, a size, the data step's counts from its _summary.json.
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(raw["started_at"]))
    assert re.search(rf"^  built     {started} to \d\d:\d\d:\d\d \S+ \([\d.]+s\), 1 attempt, on \S+$", text, re.M), text
    assert re.search(rf"^  size      [\d.]+ (bytes|kB) in {raw['output_files']} files$", text, re.M), text
    assert re.search(r"^data\n  documents   12,345\n  mean_score  0\.25\n  passed      12,000$", text, re.M), text
    assert text.rstrip().endswith(f"every record: marin show curated/docs --prefix {prefix} --json")

    evaluation = _invoke("show", "evals/docs", "--prefix", prefix).stdout
    assert re.search(r"^scores \(checkpoint final, step 10\)\n  task story_qa  acc 0\.625 ± 0\.125\n"
                     r"  data held-out  loss 2\.5, bpb 1\.25$", evaluation, re.M), evaluation
    assert re.search(rf"^  reads     curated/docs-{raw['hash'][:16]}$", evaluation, re.M), evaluation

    # -v after the verb, as the hint of an unexpected error says: the traceback.
    unknown = _invoke("show", "no/such", "--prefix", prefix, "-v")
    assert unknown.exit_code == 2 and "Traceback" in unknown.stderr and "no/such" in unknown.stderr


def test_verbose_after_the_verb_shows_the_traceback(tmp_path):
    exp = _exp(tmp_path, "people_dotdot", """
        from marin.execution.step import Step
        import steps_for_tests as t
        steps = [Step("data/../escape", t.record, None)]
        """)
    quiet = _invoke("run", exp, "--prefix", str(tmp_path / "store"))
    assert quiet.exit_code == 2 and "Traceback" not in quiet.stderr
    for flag in ("--verbose", "-v"):
        loud = _invoke("run", exp, "--prefix", str(tmp_path / "store"), flag)
        assert loud.exit_code == 2 and "Traceback" in loud.stderr and "data/../escape" in loud.stderr, flag


_TRAIN = """
from levanter.optim import AdamConfig
from experiments.llama import llama_nano
from marin.experiment import tokenized, train_lm

data = tokenized(name="tokenized/x", source="/corpus", tokenizer="/tokenizer.json")
model = train_lm(name="checkpoints/x", {args}model=llama_nano, optimizer=AdamConfig(), datasets={{data: 1.0}},
                 batch_size=8, seq_len=64, {steps}=20)
steps = [model]
"""

MISTAKES = {
    "misspelled_import": ("from marin.experiment import tokenised\nsteps = []\n",
                          ":1: cannot import name 'tokenised' from marin.experiment; did you mean 'tokenized'?"),
    "misspelled_module": ("from marin.experimnet import tokenized\nsteps = []\n",
                          ":1: import failed: no module named 'marin.experimnet'; did you mean 'marin.experiment'?"),
    "misspelled_attribute": ("import marin.experiment as me\nx = me.train_llm\nsteps = []\n",
                             ":2: AttributeError: module 'marin.experiment' has no attribute 'train_llm'; "
                             "did you mean 'train_lm'?"),
    "missing_version": (_TRAIN.format(args="", steps="num_train_steps"),
                        ":7: train_lm 'checkpoints/x': missing version=; add version=\"v1\" (bump to retrain when "
                        "the training code changed in a way the config does not show)"),
    "misspelled_keyword": (_TRAIN.format(args='version="v1", ', steps="num_train_step"),
                           ":7: train_lm 'checkpoints/x': num_train_step= is not an argument of train_lm; did you "
                           "mean num_train_steps=?"),
    "unknown_keyword": ('from marin.experiment import tokenized\n'
                        'data = tokenized(name="tokenized/x", sorce="/corpus", tokenizer="/t.json")\nsteps = [data]\n',
                        ":2: tokenized 'tokenized/x': sorce= is not an argument of tokenized; did you mean source=?"),
    "misspelled_setting": (_TRAIN.format(args='version="v1", eval_evry=5, ', steps="num_train_steps"),
                           ":7: train_lm 'checkpoints/x': unknown training setting 'eval_evry'; did you mean "
                           "'eval_every'?"),
    "refused_value": ('from marin.experiment import evaluate\nsteps = [evaluate("evals/x", "no-model")]\n',
                      ":2: evaluate 'evals/x': model must be a train_lm(...) handle or its step, got str: 'no-model'"),
}


@pytest.mark.parametrize("case", sorted(MISTAKES))
def test_a_mistake_in_an_experiment_file_is_one_line_naming_its_line_and_the_fix(tmp_path, case):
    body, expected = MISTAKES[case]
    exp = _exp(tmp_path, f"mistake_{case}", body)
    result = _invoke("plan", exp, "--prefix", str(tmp_path / "store"))
    assert result.exit_code == 2, result.output
    error, hint = result.stderr.splitlines()
    assert error == f"error: {exp}{expected}", result.stderr
    assert hint.startswith("hint: ") and "Traceback" not in result.stderr
    assert not (tmp_path / "store").exists()


def test_show_of_a_trained_model_says_how_it_trained(trained_prefix: Path):
    shown = _invoke("show", "checkpoints/tiny", "--prefix", str(trained_prefix))
    assert shown.exit_code == 0, shown.output
    text = shown.stdout
    raw = json.loads(_invoke("show", "checkpoints/tiny", "--prefix", str(trained_prefix), "--json").stdout)
    steps = raw["config"]["trainer"]["num_train_steps"]
    assert re.search(rf"^training\n  steps\s+{steps}\n  tokens\s+{4 * 32 * steps:,}\n"
                     r"  loss\s+train \d+\.\d+, validation \d+\.\d+\n  parameters\s+[\d,]+\n"
                     r"  throughput\s+[\d,]+ tokens/s, MFU \d+\.\d%$", text, re.M), text
    assert re.search(r"^    learning_rate\s+0\.003$", text, re.M), text
    # The model trained with the vocabulary it asked for (the data's): nothing to explain.
    [data] = [d["path"] for d in raw["dependencies"] if d["name"] == "tokenized/tiny"]
    assert read_tokenized(data).vocab_size == raw["config"]["model"]["vocab_size"] == 320
    assert re.search(r"^    vocab_size\s+320$", text, re.M), text
