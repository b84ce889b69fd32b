"""marin.experiment's subpackages: the old flat module names still import as the same modules, what
moved keeps its identity (so every hash stays)."""

from __future__ import annotations

import importlib
import pickle

import pytest

from marin.execution.core.identity import fn_identity, qualified_name

MOVED = {
    "train": "training.train", "warm_start": "training.warm_start",
    "eval": "evaluation.eval", "eval_results": "evaluation.results", "eval_table": "evaluation.table",
    "task_eval": "evaluation.tasks", "story_task": "tasks.story", "story_chat": "tasks.story_chat",
    "sweep": "sweeps.sweep", "sweep_space": "sweeps.space", "sweep_steps": "sweeps.steps",
    "scaling_fit": "scaling.fit", "chat_data": "chat.data", "chat_template": "chat.template",
    "chat_tokenize": "chat.tokenize", "corpus": "data.corpus", "sources": "data.sources",
    "tokenize_impl": "data.tokenize", "tokenizer_train": "data.tokenizer", "hf_hub": "data.hub",
}


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_module_name_is_the_moved_module_and_names_what_it_defines(old, new):
    module = importlib.import_module(f"marin.experiment.{new}")
    assert importlib.import_module(f"marin.experiment.{old}") is module
    defined = [v for k, v in vars(module).items() if not k.startswith("__") and isinstance(v, type)
               and v.__module__.startswith("marin.experiment.")]
    for cls in defined:
        owner = importlib.import_module(cls.__module__)
        assert getattr(owner, cls.__qualname__.split(".")[0]) is not None, cls


def test_step_functions_and_config_classes_keep_their_identities():
    from marin.experiment.chat import conversation_from_record
    from marin.experiment.evaluation.eval import evaluate_step
    from marin.experiment.evaluation.tasks import harness_eval_step
    from marin.experiment.sweeps.space import Direction
    from marin.experiment.sweeps.steps import sweep_round_step
    from marin.experiment.training.models import TrainedModelHandle
    from marin.experiment.training.train import train_lm_step

    assert fn_identity(train_lm_step) == "marin.experiment.train:train_lm_step"
    assert fn_identity(evaluate_step) == "marin.experiment.eval:evaluate_step"
    assert fn_identity(harness_eval_step) == "marin.experiment.task_eval:harness_eval_step"
    assert fn_identity(sweep_round_step) == "marin.experiment.sweep_steps:sweep_round_step"
    assert fn_identity(conversation_from_record) == "marin.experiment.chat:conversation_from_record"
    assert qualified_name(TrainedModelHandle) == "marin.experiment.train:TrainedModelHandle"
    assert qualified_name(Direction) == "marin.experiment.sweep_space:Direction"
    for value in (train_lm_step, evaluate_step, Direction, TrainedModelHandle):
        assert pickle.loads(pickle.dumps(value)) is value

