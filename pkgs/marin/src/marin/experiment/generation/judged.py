"""``judged_pairs()``: preference pairs from a ``generations(...)`` step, its completions scored by a judge.

For every prompt, each of its completions is scored by ``judge(prompt, text) -> float``; the best
becomes ``chosen`` and the worst ``rejected`` (a prompt whose completions all score the same gives no
pair, nor one whose best or worst completion is empty: a preference side must say something). The output is JSON-lines preference rows (``prompt``, ``chosen``, ``rejected``, and both
scores) that ``preference_chat(source=<this step>)`` tokenizes for DPO. The judge is a module-level
function: its ``module:qualname`` is in the step's identity (its code is not, as for a step's own
function: bump ``version`` when it changes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from marin.execution.core.errors import InvalidStep
from marin.execution.core.lazy import StepHandle
from marin.execution.core.step import Step
from marin.experiment.generation.steps import Generations, generations_step, shard_name
from rigging import filesystem as fs

__all__ = ["JudgedPairs", "JudgedPairsConfig", "judged_pairs", "judged_pairs_step"]


@dataclass(frozen=True)
class JudgedPairsConfig:
    """Which completions, judged by what."""

    generations: Any
    """The ``generations(...)`` step (a placeholder resolved to its output folder)."""
    judge: Callable[[str, str], float]
    """``judge(prompt, completion text) -> score``; higher is better."""


def judged_pairs_step(config: JudgedPairsConfig, output_path: str) -> None:
    """Step function: score every completion, keep the best and the worst of each prompt."""
    # Here, not at the top: naming the step in an experiment file reads no data.
    from marin.processing.attributes import write_jsonl
    from zephyr.readers import read_records

    by_prompt: dict[int, list[tuple[float, int, dict[str, Any]]]] = {}
    for record in read_records(str(config.generations), lambda r: r):
        score = float(config.judge(record["prompt"], record["text"]))
        by_prompt.setdefault(record["prompt_index"], []).append((score, record["sample"], record))
    rows = []
    for index in sorted(by_prompt):
        # Ties go to the earlier sample, so the same scores always give the same pair.
        ranked = sorted(by_prompt[index], key=lambda s: (-s[0], s[1]))
        (best, _, chosen), (worst, _, rejected) = ranked[0], ranked[-1]
        if best > worst and chosen["text"] and rejected["text"]:
            rows.append({"id": index, "prompt": chosen["prompt"], "chosen": chosen["text"],
                         "rejected": rejected["text"], "chosen_score": best, "rejected_score": worst})
    write_jsonl(fs.join(output_path, shard_name(0)), rows)
    print(f"{len(rows)} preference pairs from {len(by_prompt)} prompts")


class JudgedPairs(StepHandle, fn=judged_pairs_step):
    """Handle to a judged-pairs step: preference rows for ``preference_chat(source=...)``."""


def judged_pairs(name: str, generations: Any, judge: Callable[[str, str], float], *,
                 version: str = "v1") -> JudgedPairs:
    """A step turning ``generations`` (``n`` >= 2 completions per prompt) into preference rows by ``judge``.

    Raises:
        InvalidStep: ``generations`` is not a generations step, ``n`` < 2, or ``judge`` is not a
            module-level function.
    """
    if not (isinstance(generations, Generations) or (isinstance(generations, Step)
                                                     and generations.fn is generations_step)):
        raise InvalidStep(f"judged_pairs {name!r}: generations must be a generations(...) handle, "
                          f"got {type(generations).__name__}")
    if generations.config.n < 2:
        raise InvalidStep(f"judged_pairs {name!r}: {generations.name} makes {generations.config.n} completion per "
                          "prompt; a pair needs generations(..., n=2) or more")
    qualname = getattr(judge, "__qualname__", "")
    if not callable(judge) or not qualname or "<" in qualname:
        raise InvalidStep(f"judged_pairs {name!r}: judge must be a module-level function, got {judge!r}")
    return JudgedPairs(name=name, config=JudgedPairsConfig(generations=generations, judge=judge), version=version)
