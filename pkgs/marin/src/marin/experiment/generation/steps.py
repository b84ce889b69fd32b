"""``generations()``: a model's completions of a set of prompts as a content-hashed dataset.

The step writes JSON-lines shards ``part-00000.jsonl``, ... (sorted keys, one record per completion:
``id``, ``prompt``, ``prompt_index``, ``sample``, ``text``, ``token_ids``, ``logprobs``,
``finish_reason``; with ``chat=True`` also ``messages``, the user turn and the reply in OpenAI's chat
layout, so ``tokenized_chat(source=<this step>)`` fine-tunes on them). Each shard is written whole
and atomically; a killed build starts again from the shards it completed.

Completion ``sample`` of prompt ``prompt_index`` draws with its own seed, made from the sampling's
seed and those two numbers (:func:`completion_seed`): which shard, slot or batch it was decoded in
never changes its tokens, so the same model, prompts, sampling and ``n`` give the same bytes on the
CPU (on an accelerator, within its arithmetic's determinism).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from levanter.inference.sampling import SamplingParams, derived_seed
from marin.execution.core.errors import InvalidStep
from marin.execution.core.lazy import Lazy, StepHandle
from marin.execution.core.sources import Source
from marin.execution.core.step import Step
from marin.execution.core.traits import StepTraits, step_function
from marin.experiment.data.sources import as_source
from marin.experiment.training.models import FINAL, check_checkpoint_kept, training_config
from rigging import filesystem as fs
from rigging.fields import unhashed_field

__all__ = ["SUMMARY_FILE", "Generations", "GenerationsConfig", "completion_seed", "generations", "generations_step", "read_prompts",
           "shard_name"]

PROMPT_FIELDS = ("prompt", "text")
"""Where a prompt record holds its prompt (the first present): a ``prompt``, or a document's ``text``."""


@dataclass(frozen=True)
class GenerationsConfig:
    """Which model completes which prompts, how, and how often."""

    model: Any
    """The training step (a placeholder resolved to its output folder)."""
    prompts: Any
    """A tuple of prompt strings, a fingerprinted file or folder of JSON-lines/Parquet records
    (``source(...)``), or another step's output (its records' ``prompt``, else ``text``)."""
    sampling: SamplingParams = SamplingParams()
    """How each completion is drawn; its ``seed`` is the base of every completion's own seed."""
    n: int = 1
    """Completions per prompt."""
    checkpoint: int | str = FINAL
    """``"final"`` or the step number of a kept checkpoint."""
    chat: bool = False
    """Each prompt is a user turn, rendered with the model's chat template (ending at its end token)."""
    prompts_per_shard: int = 64
    """Prompts per output shard (and per resumable unit of work)."""
    slots: int = unhashed_field(default=8)
    """Completions decoded at once (does not change them)."""

    def __post_init__(self) -> None:
        for name in ("n", "prompts_per_shard", "slots"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if not isinstance(self.sampling, SamplingParams):
            raise ValueError(f"sampling must be a levanter.inference.SamplingParams, got {type(self.sampling).__name__}")
        if isinstance(self.prompts, tuple) and not all(isinstance(p, str) and p for p in self.prompts):
            raise ValueError("prompts must be non-empty strings")


def completion_seed(base: int, prompt_index: int, sample: int) -> int:
    """The seed of completion ``sample`` of prompt ``prompt_index`` (uint32), from the sampling's ``base``."""
    return derived_seed("generations", base, prompt_index, sample)


def shard_name(index: int) -> str:
    """The file name of output shard ``index``."""
    return f"part-{index:05d}.jsonl"


def read_prompts(prompts: Any) -> list[str]:
    """The prompt strings ``prompts`` (a config's resolved field) holds, in order.

    Raises:
        ValueError: a record holds no string prompt (naming the file's record), or there are none.
    """
    if isinstance(prompts, list | tuple):
        found = [str(p) for p in prompts]
    else:
        from zephyr.readers import read_records

        def prompt_of(record: dict[str, Any]) -> str:
            for field in PROMPT_FIELDS:
                if isinstance(record.get(field), str) and record[field]:
                    return record[field]
            raise ValueError(f"a prompt record needs a non-empty string {' or '.join(PROMPT_FIELDS)}, "
                             f"got fields {sorted(record)}")

        found = list(read_records(str(prompts), prompt_of))
    if not found:
        raise ValueError(f"no prompts in {prompts!r}")
    return found


SUMMARY_FILE = ".generation.json"
"""What the build did (shards written and reused); hidden, so that a reader of the output folder as a
dataset (``source=`` of a later step) reads only the shards."""


# The summary names the model's folder.
@step_function(StepTraits(volatile_files=(SUMMARY_FILE,), accelerator=True))
def generations_step(config: GenerationsConfig, output_path: str) -> None:
    """Step function: complete every prompt ``n`` times, one shard at a time, skipping shards a
    killed attempt completed."""
    import json

    # Here, not at the top: the model loader imports JAX, which planning a graph never needs.
    from marin.experiment.generation.model import load_generation_model
    from marin.processing.attributes import write_jsonl

    prompts = read_prompts(config.prompts)
    model = load_generation_model(str(config.model), step=None if config.checkpoint == FINAL else int(config.checkpoint))
    if config.chat and model.chat_template is None:
        raise ValueError(f"{config.model}: chat=True, but the model has no chat template (fine-tune it on "
                         "tokenized_chat data)")
    engine = model.engine(slots=config.slots, steps_per_sync=8)
    shards = range(0, len(prompts), config.prompts_per_shard)
    reused = 0
    for shard, start in enumerate(shards):
        path = fs.join(output_path, shard_name(shard))
        if fs.exists(path):  # written whole and atomically by an earlier attempt
            reused += 1
            continue
        write_jsonl(path, _complete(model, engine, config, prompts, start))
    fs.atomic_write(fs.join(output_path, SUMMARY_FILE),
                    json.dumps({"model": str(config.model), "shards": len(shards), "shards_reused": reused}) + "\n")
    print(f"{len(prompts) * config.n} completions of {len(prompts)} prompts in {len(shards)} shards "
          f"({reused} reused from an earlier attempt)")


def _complete(model: Any, engine: Any, config: GenerationsConfig, prompts: Sequence[str],
              start: int) -> list[dict[str, Any]]:
    """The records of the shard whose first prompt is ``start``."""
    indices = range(start, min(start + config.prompts_per_shard, len(prompts)))
    stops = tuple(sorted(set(config.sampling.stop_token_ids) | set(model.end_ids)))
    jobs, rendered = [], {}
    for i in indices:
        text = model.chat_template.prompt(prompts[i]) if config.chat else prompts[i]
        rendered[i] = model.encode(text)
        for j in range(config.n):
            jobs.append((i, j, dataclasses.replace(config.sampling, seed=completion_seed(config.sampling.seed, i, j),
                                                   stop_token_ids=stops)))
    try:
        done = engine.generate([rendered[i] for i, _, _ in jobs], [s for _, _, s in jobs])
    except ValueError as e:
        raise ValueError(f"prompts {indices.start}..{indices.stop - 1}: {e}") from None
    records = []
    for (i, j, _), completion in zip(jobs, done, strict=True):
        ids, text = completion.token_ids, completion.text
        record = {"id": f"{i}-{j}", "prompt": prompts[i], "prompt_index": i, "sample": j, "text": text,
                  "token_ids": ids, "logprobs": completion.logprobs, "finish_reason": completion.finish_reason}
        if config.chat:
            record["messages"] = [{"role": "user", "content": prompts[i]}, {"role": "assistant", "content": text}]
        records.append(record)
    return records


class Generations(StepHandle, fn=generations_step):
    """Handle to a generations step: its output is a dataset of completions (``source=`` of later steps)."""


def _prompts_field(prompts: Any) -> Any:
    if isinstance(prompts, str):
        return as_source(prompts)
    if isinstance(prompts, Source):
        return prompts
    if isinstance(prompts, Lazy | Step):
        return prompts  # resolved to the step's output folder when the step runs
    if isinstance(prompts, Sequence) and prompts and all(isinstance(p, str) and p for p in prompts):
        return tuple(prompts)
    raise ValueError(f"prompts must be a non-empty list of non-empty strings, a path or "
                      f"source(...), or a step whose records hold a prompt; got {type(prompts).__name__}")


def generations(name: str, model: Any, prompts: Any, *, sampling: SamplingParams | None = None, n: int = 1,
                checkpoint: int | str = FINAL, chat: bool = False, prompts_per_shard: int = 64, slots: int = 8,
                version: str = "v1") -> Generations:
    """A step completing every prompt ``n`` times with ``model`` (see the module docstring for its output).

    Args:
        name: the step's name.
        model: a ``train_lm(...)`` handle (its final parameters, or ``checkpoint``; LoRA folded).
        prompts: a list of strings, a file/folder/glob of records (``prompt`` or ``text`` fields), or a
            step whose output holds such records (another ``generations`` step, a corpus).
        sampling: ``levanter.inference.SamplingParams`` (default: greedy, 16 new tokens); its seed is
            the base of every completion's seed. The model's end token always stops a completion.
        n: completions per prompt.
        checkpoint: ``"final"`` or a kept checkpoint's step number.
        chat: render each prompt as a user turn with the model's chat template.
        prompts_per_shard: prompts per shard (a killed build resumes at a shard's grain).
        slots: completions decoded at once (memory; not part of the step's identity).

    Raises:
        InvalidStep: a bad argument, named.
    """
    try:
        trained = training_config(model)
        if checkpoint != FINAL:
            check_checkpoint_kept(trained, checkpoint)  # type: ignore[arg-type]
        config = GenerationsConfig(model=model, prompts=_prompts_field(prompts),
                                   sampling=SamplingParams() if sampling is None else sampling, n=n,
                                   checkpoint=checkpoint, chat=chat, prompts_per_shard=prompts_per_shard, slots=slots)
    except ValueError as e:
        raise InvalidStep(f"generations {name!r}: {e}") from None
    return Generations(name=name, config=config, version=version)
