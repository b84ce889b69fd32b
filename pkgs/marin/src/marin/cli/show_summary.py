"""``marin show``'s summary of one build, for people: sections of ``(label, value)`` lines.

The head says what the build is, when and where it was made, how big it is and what it read;
then what its output holds, by kind (a data step's counts, a training run's results, an
evaluation's scores), and its config as a tree of the hashed fields (those that decide the
build), floats in decimal. Each section is made by one function below; a new line is one more
``(label, value)`` in the section it belongs to. ``marin show --json`` prints the raw records.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from marin.cli.text import (
    format_bytes,
    format_count,
    format_local_span,
    format_local_time,
    format_value,
    plural,
)
from marin.execution.core.step import output_name_of
from marin.execution.store.provenance_record import Provenance
from marin.execution.store.status_record import StatusRecord
from marin.execution.store.step_record import StepRecord
from rigging import filesystem as fs
from rigging.store_requests import describe_counts

__all__ = ["Section", "render", "summary_sections"]


@dataclass(frozen=True)
class Section:
    """A titled block of ``(label, value)`` lines; a label of ``""`` continues the line above."""

    title: str
    rows: tuple[tuple[str, str], ...]


def render(sections: list[Section]) -> str:
    """The sections as text: each title, then its lines with their values aligned."""
    blocks = []
    for section in sections:
        if not section.rows and section.title:
            continue
        width = max((len(label) for label, _ in section.rows), default=0)
        lines = [section.title] if section.title else []
        lines += [f"  {label.ljust(width)}  {value}".rstrip() for label, value in section.rows]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def summary_sections(record: StepRecord, provenance: Provenance | None, status: StatusRecord | None, *,
                     output_name: str) -> list[Section]:
    """Everything ``marin show`` says of the build in ``record``'s folder (``output_name``: that
    folder under the prefix, its title when no provenance names the step)."""
    done = record.is_done()
    sections = [_head(record, provenance, status, done, output_name)]
    if done:
        files = record.files_folder()
        training = _training(files)
        sections += [_data(files, provenance, trained=bool(training.rows)), training, _scores(files)]
    if provenance is not None:
        sections.append(_config(provenance, record.files_folder() if done else None))
    return sections


def _head(record: StepRecord, prov: Provenance | None, status: StatusRecord | None, done: bool,
          output_name: str) -> Section:
    name = prov.name if prov is not None and prov.name else output_name
    written = status.state.value if status is not None and status.state is not None else "unknown"
    rows = [("state", "done" if done else written), ("output", record.output_path)]
    if not done and status is not None:
        rows.append(("attempt", f"{status.attempt} by {status.holder or 'an unknown runner'}, "
                                f"{format_local_time(status.time)}"))
        if status.error:
            rows.append(("error", status.error.strip().splitlines()[-1]))
        rows.append(("log", record.log))
    if prov is None:
        return Section(name, tuple(rows))
    rows += [("hash", prov.hash or "-"), ("function", f"{prov.fn or '-'}, version {prov.version or '-'}")]
    if prov.started_at is not None or prov.finished_at is not None:
        took = f" ({_duration(prov.duration_s)})" if prov.duration_s is not None else ""
        attempts = f", {prov.attempts} attempt{'s' if prov.attempts != 1 else ''}" if prov.attempts else ""
        rows.append(("built", f"{format_local_span(prov.started_at, prov.finished_at)}{took}{attempts}, "
                              f"on {prov.host or 'an unknown host'}"))
    if prov.reasons:
        rows.append(("why", "; ".join(_reason(r) for r in prov.reasons)))
    if prov.output_bytes is not None:
        rows.append(("size", f"{format_bytes(prov.output_bytes)} in {plural(prov.output_files or 0, 'file')}"))
    if prov.realised_from is not None:
        rows.append(("copied from", f"{prov.realised_from.path} (the same inputs, built before)"))
    if prov.incremental:
        rows.append(("rebuilt", f"{prov.incremental.get('files_reused', 0)} files reused, "
                                f"{prov.incremental.get('files_processed', 0)} processed"))
    requests = describe_counts(prov.store_requests)
    if requests:
        rows.append(("store requests", requests))
    rows += _labelled("reads", [output_name_of(d.name, d.hash) for d in prov.dependencies])
    rows += _labelled("sources", [_source(fp) for fp in prov.source_fingerprints()])
    rows.append(("code", _code(prov)))
    return Section(name, tuple(rows))


def _labelled(label: str, values: list[str]) -> list[tuple[str, str]]:
    """``values`` under ``label``, one a line."""
    return [(label if i == 0 else "", v) for i, v in enumerate(values)]


def _duration(seconds: float) -> str:
    # The estimate's format (``7m 36s``), the one the plan and the run's table use.
    from marin.execution.plan.estimate import format_duration

    return format_duration(seconds)


def _reason(reason: Any) -> str:
    if isinstance(reason, dict) and "kind" in reason:
        return f"{reason['kind']}: {reason['detail']}" if reason.get("detail") else str(reason["kind"])
    return str(reason)


def _source(fp: Any) -> str:
    files = f"{len(fp.files)} file{'s' if len(fp.files) != 1 else ''}" if fp.files else ""
    at = f"commit {fp.commit[:12]}" if fp.commit else files
    return f"{fp.spec} ({fp.kind}{', ' + at if at else ''}; digest {fp.digest[:12]})"


def _code(prov: Provenance) -> str:
    env = prov.environment or {}
    git = env.get("git_commit")
    parts = [f"digest {digest[:12]}" for digest in [prov.code_digest()] if digest]
    if env.get("python"):
        parts.append(f"python {env['python']}")
    if isinstance(git, str):
        parts.append(f"git {git[:12]}{' (uncommitted changes)' if env.get('git_dirty') else ''}")
    return ", ".join(parts) or "-"


def _data(files: str, prov: Provenance | None, *, trained: bool) -> Section:
    """A data step's counts: a tokenized dataset's splits, a curation step's ``_summary.json``, a
    tokenizer's vocabulary (not a training run's copy of its data's: ``trained``)."""
    # What each kind of step leaves in its folder is read where the report reads it.
    from marin.report.outputs import read_data_summary, read_tokenized

    rows: list[tuple[str, str]] = []
    tokenized = read_tokenized(files)
    if tokenized is not None:
        rows.append(("vocabulary", f"{format_count(tokenized.vocab_size)} tokens" if tokenized.vocab_size else "-"))
        for split in tokenized.splits:
            shards = f" in {format_count(split.shards)} shards" if split.shards is not None else ""
            rows.append((split.name, f"{_maybe_count(split.documents)} documents, {_maybe_count(split.tokens)} "
                                     f"tokens{shards}"))
    summary = read_data_summary(files)
    if summary is not None:
        rows += [(str(k), format_count(v) if isinstance(v, int | float) and not isinstance(v, bool) else format_value(v))
                 for k, v in summary["counts"].items()]
        for kind in ("removed", "edited"):
            rows += [(f"{kind} by {rule}", _brief(v)) for rule, v in (summary.get(kind) or {}).items()]
    if tokenized is None and not trained:
        rows += _tokenizer(files, prov)
    return Section("data", tuple(rows))


def _maybe_count(n: int | None) -> str:
    return "-" if n is None else format_count(n)


def _brief(value: Any) -> str:
    return format_count(value) if isinstance(value, int | float) and not isinstance(value, bool) else format_value(value)


def _tokenizer(files: str, prov: Provenance | None) -> list[tuple[str, str]]:
    """A trained tokenizer's vocabulary, beside the size its config asked for."""
    path = fs.join(files, "tokenizer.json")
    if not fs.exists(path):
        return []
    # The Rust tokenizer library: only for a folder that holds a tokenizer.
    from tokenizers import Tokenizer

    size = Tokenizer.from_str(fs.read_text(path)).get_vocab_size()
    asked = prov.config.get("vocab_size") if prov is not None and isinstance(prov.config, dict) else None
    if isinstance(asked, int) and asked > size:
        return [("vocabulary", f"{format_count(size)} tokens ({format_count(asked)} asked for: the corpus "
                               "offered no more merges)")]
    return [("vocabulary", f"{format_count(size)} tokens")]


def _training(files: str) -> Section:
    """A training run's results: steps, losses, throughput, the evaluations it ran while training."""
    from marin.experiment.evaluation.results import format_number
    from marin.experiment.results import read_metrics, read_train_summary, train_metrics

    summary = read_train_summary(files)
    if summary is None:
        return Section("training", ())
    metrics = read_metrics(files)
    found = train_metrics(files, metrics)
    rows = [("steps", _maybe_count(found["steps_trained"]) + (f" (from step {summary['start_step']})"
                                                             if summary.get("start_step") else ""))]
    if isinstance(summary.get("tokens_trained"), int | float):
        rows.append(("tokens", format_count(summary["tokens_trained"])))
    rows.append(("loss", ", ".join(f"{label} {format_number(found[k])}" for k, label in
                                   (("loss", "train"), ("val_loss", "validation")) if found[k] is not None) or "-"))
    if found["params"] is not None:
        rows.append(("parameters", format_count(found["params"])))
    if isinstance(summary.get("tokens_per_s"), int | float):
        mfu = f", MFU {found['mfu']:.1%}" if found["mfu"] is not None else ""
        rows.append(("throughput", f"{format_count(round(summary['tokens_per_s']))} tokens/s{mfu}"))
    evals = {k: v for k, v in (metrics.series.items() if metrics is not None else ()) if "." in k and v}
    if evals:
        step = max(points[-1][0] for points in evals.values())
        rows.append(("evals in training", f"at step {format_count(step)}: "
                     + ", ".join(f"{k} {format_number(points[-1][1])}" for k, points in evals.items())))
    return Section("training", tuple(rows))


def _scores(files: str) -> Section:
    """An evaluation's scores (``eval_results.json``), or one task's (the harness's ``results.json``)."""
    from marin.experiment.evaluation.results import EvalResults, read_eval_results, score_rows

    results = read_eval_results(files)
    if results is None:
        from levanter.eval_harness.scores import RESULTS_FILE, task_scores

        try:
            results = EvalResults(tasks=task_scores(json.loads(fs.read_text(fs.join(files, RESULTS_FILE)))))
        except (FileNotFoundError, ValueError):
            return Section("scores", ())
    title = "scores" + (f" (checkpoint {results.checkpoint}, step {results.step})" if results.step is not None else "")
    return Section(title, tuple((f"{kind} {name}", shown) for kind, name, shown in score_rows(results)))


def _config(prov: Provenance, files: str | None) -> Section:
    """The hashed config fields as a tree, in the config's own order; a field set to none is left
    out, and a model field the trainer changed says so."""
    from marin.execution.core.encoding import describe_encoded

    flat = prov.config_flat or {}
    names = {d.hash: d.name for d in prov.dependencies}
    trained = _trained_model(files) if files is not None and any(k.startswith("model.") for k in flat) else {}
    order = {key: i for i, key in enumerate(_paths(prov.config))}
    rows: list[tuple[str, str]] = []
    opened: set[str] = set()
    for key in sorted(flat, key=lambda k: (order.get(k, len(order)), k)):
        encoded = json.loads(flat[key])
        text = describe_encoded(encoded, names, limit=_LONG)
        if text == "none":
            continue
        parts = key.split(".")
        for depth in range(len(parts) - 1):
            group = ".".join(parts[:depth + 1])
            if group not in opened:
                opened.add(group)
                rows.append(("  " * depth + parts[depth], ""))
        label = "  " * (len(parts) - 1) + parts[-1]
        if len(text) >= _LONG and isinstance(encoded, list) and encoded[:1] in (["list"], ["tuple"]):
            rows += _labelled(label, [describe_encoded(item, names, limit=_LONG) for item in encoded[1]])
        else:
            rows.append((label, text + _as_trained(key, text, trained)))
    return Section("config (the fields in its hash; none-valued ones left out)", tuple(rows))


_LONG = 100
"""A config value longer than this is cut (a list: one item a line)."""


def _paths(config: Any) -> list[str]:
    """Every dotted path of the provenance's readable config, depth first in declaration order."""
    out: list[str] = []
    stack: list[tuple[str, Any]] = [("", config)]
    while stack:
        path, value = stack.pop()
        if path:
            out.append(path)
        if isinstance(value, dict):
            stack += [(f"{path}.{k}" if path else str(k), v) for k, v in reversed(list(value.items()))]
    return out


_TRAINER_CHANGES = {
    "vocab_size": "the tokenized data's vocabulary replaces it (data.vocab_from_data)",
    "max_seq_len": "raised to the training seq_len",
}
"""Why a model field of a training config differs from the model that trained (levanter's
``train_setup.resolve_model``)."""


def _trained_model(files: str) -> dict[str, Any]:
    """The model fields a training run recorded it trained with; ``{}`` for another kind of step."""
    # The model's config class only (no JAX); read where the trainer writes it.
    from levanter.models.family import RUN_CONFIG_FILE, read_model_config

    if not fs.exists(fs.join(files, RUN_CONFIG_FILE)):
        return {}
    try:
        return dataclasses.asdict(read_model_config(files))
    except (KeyError, TypeError, ValueError):
        return {}


def _as_trained(key: str, text: str, trained: dict[str, Any]) -> str:
    field = key.removeprefix("model.")
    value = trained.get(field) if key.startswith("model.") else None
    if not isinstance(value, int | float) or isinstance(value, bool) or format_value(value) == text:
        return ""
    why = _TRAINER_CHANGES.get(field)
    return f" → {format_count(value)} as trained" + (f": {why}" if why else "")
