"""A training step as the browser shows it: its curves (every logged series, grouped as the report
groups them) and the samples of the evaluations that scored it (each question, the choices with the
model's log-likelihoods, its pick and the answer)."""

from __future__ import annotations

import itertools
from typing import Any

from marin.execution.store.done_index import read_index
from marin.report.browse.records import iter_records, shown_text
from marin.report.browse.store_view import BrowseError, StepView, open_step
from marin.report.curves import metrics_json
from marin.report.outputs import read_metrics

__all__ = ["SAMPLES_SHOWN", "evaluations_of", "sample_view", "training_view"]

SAMPLES_SHOWN = 20
"""Samples shown per task (the first ones of its file)."""
_PROMPT_MAX = 2_000


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def sample_view(sample: dict[str, Any]) -> dict[str, Any]:
    """One line of lm-eval's samples file, for a person: the prompt, each choice with its
    log-likelihood (the model's pick and the target marked), or the model's answer, and its scores."""
    arguments = sample.get("arguments") if isinstance(sample.get("arguments"), dict) else {}
    calls = [v for _k, v in sorted(arguments.items()) if isinstance(v, dict)]
    prompt = str(calls[0].get("arg_0", "")) if calls else ""
    responses = sample.get("filtered_resps") if isinstance(sample.get("filtered_resps"), list) else []
    target = sample.get("target")
    out: dict[str, Any] = {"doc_id": sample.get("doc_id"), "prompt": shown_text(prompt, _PROMPT_MAX), "target": target,
                           "scores": {m: sample.get(m) for m in sample.get("metrics") or [] if m in sample}}
    logliks = [_number(r[0]) if isinstance(r, list) and r else None for r in responses]
    if calls and len(logliks) == len(calls) and all(v is not None for v in logliks):
        want = int(target) if isinstance(target, str) and target.isdigit() else target if isinstance(target, int) else None
        if len(calls) > 1:  # multiple choice: the model picks the likeliest continuation
            pick = max(range(len(calls)), key=lambda k: logliks[k] or 0.0)
            picked = [k == pick for k in range(len(calls))]
        else:  # one continuation: is it what greedy decoding would write?
            picked, want = [str(responses[0][1]) == "True" if len(responses[0]) > 1 else False], 0
        out["choices"] = [{"text": str(c.get("arg_1", "")), "loglik": logliks[k], "picked": picked[k], "target": k == want}
                          for k, c in enumerate(calls)]
    elif responses:
        out["response"] = str(responses[0] if not isinstance(responses[0], list) else responses[0][0])
    return out


def evaluations_of(step: StepView) -> list[StepView]:
    """The finished steps of the store that read ``step`` and wrote samples (its evaluations)."""
    found = []
    for name in sorted(read_index(step.store.prefix)):
        try:
            other = open_step(step.store, name)
        except BrowseError:
            continue
        if any(d.hash == step.hash for d in other.provenance.dependencies) and _samples_files(other):
            found.append(other)
    return found


def _samples_files(step: StepView) -> list[str]:
    return [p for p, _s in step.files if p.rpartition("/")[2].startswith("samples_") and p.endswith(".jsonl")]


def training_view(step: StepView) -> dict[str, Any]:
    """Its metrics (``series`` and the ``groups`` of charts) and its evaluations' first samples."""
    metrics = read_metrics(step.folder)
    evals = []
    for other in evaluations_of(step):
        for rel in _samples_files(other):
            task = rel.rpartition("/")[2][len("samples_"):-len(".jsonl")]
            rows = [sample_view(s) for s in itertools.islice(iter_records(other.path_of(rel)), SAMPLES_SHOWN)]
            evals.append({"step": other.name, "output": other.output_name, "task": task, "file": rel, "samples": rows})
    return {"metrics": metrics_json(metrics) if metrics is not None else None, "evaluations": evals}
