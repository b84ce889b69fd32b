"""An exported chat model keeps its chat template (issue 58: ``marin serve`` of an export folder).

Uses the prefix of ``make experiments`` (``testsupport.e2e.experiments_prefix``), whose
``checkpoints/marin-nano-sft`` is fine-tuned on chats: its export is read as the run is.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from marin.execution.store.records import StepRecord
from testsupport.e2e import builds_experiments, entry, experiments_prefix


@builds_experiments
@pytest.mark.slow
def test_an_exported_chat_model_renders_turns_and_ends_them_as_its_run_does(
        tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    from marin.experiment.generation.model import load_generation_model
    from marin.experiment.hf import write_hf_folder

    prefix, ran = experiments_prefix(tmp_path_factory)
    run = entry(prefix, "checkpoints/marin-nano-sft")
    assert StepRecord(str(run)).is_done(), ran.describe()
    out = tmp_path / "sft-hf"
    write_hf_folder(str(run), str(out))

    ours, exported = load_generation_model(str(run)), load_generation_model(str(out))
    assert ours.chat_template is not None
    assert exported.chat_template == ours.chat_template
    question = "Tell me a story about a cat."
    assert exported.chat_template.prompt(question) == ours.chat_template.prompt(question)
    # The turn's end stops a completion of the export as it stops the run's: beside the document end.
    assert exported.end_ids == ours.end_ids and len(ours.end_ids) == 2
