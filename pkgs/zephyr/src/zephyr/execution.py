"""The driver: run a dataset's shards on a fray client, at most ``max_parallel`` jobs at a time.

Each job runs a group of neighbouring shards one after another (one group per worker slot), so
a worker process starts once per slot rather than once per shard, while every shard is still
written and committed on its own. A group's shards share one pipeline (``Dataset.run_shards``):
the background stages of ``prefetch`` read and transform the next shard while this one is being
written and committed.

``memory://`` file systems exist only inside the process that made them, so a pipeline that
reads or writes ``memory://`` runs its shards one after another in the calling process, whatever
client is given.

A pipeline with ``group_by`` stages (:mod:`zephyr.shuffle`) runs in waves: a stage's map wave
is a run of its input into partition files; its partitions then stand as the shards of what
follows (the next stage's map wave, or the sink's shards).

Shards already committed to the sink are not submitted again, so a run that was killed or
failed resumes where it stopped. When a shard fails, the shards still running are cancelled and
:class:`~zephyr.errors.ShardFailed` names the shard and carries the worker's one-line error.
"""

from __future__ import annotations

import collections
import itertools
import logging
import math
import os
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fray import DistributedClient, JobFailed, LocalClient
from rigging import filesystem as fs
from zephyr.errors import ShardFailed
from zephyr.shuffle import PendingPartition, ReducePartition
from zephyr.worker_context import Counters, WorkerContext

if TYPE_CHECKING:
    from zephyr.dataset import Dataset
    from zephyr.writers import Sink

__all__ = ["RunResult", "run"]

logger = logging.getLogger(__name__)

# How often the driver looks at running shards; small next to a shard's seconds of work.
_POLL_SECONDS = 0.02


@dataclass(frozen=True)
class RunResult:
    """What a run did.

    Attributes:
        shard_records: per shard, in shard order, the record its sink returned (stats, counters).
        written: indices of the shards this run computed.
        reused: indices of the shards found committed and skipped.
        counters: counters summed over every shard (reused ones included).
        index: the index the sink wrote last (None for sinks without one).
        shuffles: the map wave of each ``group_by`` stage, in the order they ran (the stages a
            stage reads from before it).
    """

    shard_records: list[dict[str, Any]]
    written: tuple[int, ...]
    reused: tuple[int, ...]
    counters: Counters = field(default_factory=Counters)
    index: dict[str, Any] | None = None
    shuffles: tuple[RunResult, ...] = ()


def _run_shard_group(dataset: Dataset, indices: list[int], sink: Sink,
                     on_shard: Callable[[], None] | None = None) -> dict[str, Any]:
    """Worker entry point: run shards one after another, each committed on its own.

    A group amortises the start of a worker process over several shards, and its shards share
    one pipeline (``Dataset.run_shards``): the next shard is read and transformed while this
    one is being written. A failing shard ends the group; the shards before it stay committed
    and the failure is returned, not raised, so the driver learns which shard it was.
    """
    done: dict[int, dict[str, Any]] = {}
    ctxs = [WorkerContext(shard_index=i, num_shards=dataset.num_shards, output_path=sink.output_path)
            for i in indices]

    def write(ctx: WorkerContext, records: Iterator[Any]) -> dict[str, Any]:
        return sink.write_shard(ctx, records, dataset.shards[ctx.shard_index].describe())

    results = dataset.run_shards(ctxs, write)
    try:
        for ctx in ctxs:
            try:
                done[ctx.shard_index] = next(results)
                if on_shard is not None:
                    on_shard()
            except Exception as e:  # noqa: BLE001 - handed to the driver, which raises ShardFailed
                return {"records": done, "failed": ctx.shard_index, "message": f"{type(e).__name__}: {e}",
                        "traceback": traceback.format_exc()}
    finally:
        results.close()
    return {"records": done, "failed": None}


def _in_process_only(dataset: Dataset, sink: Sink) -> bool:
    paths = [path for shard in dataset.shards for path in shard.paths()]
    if sink.output_path:
        paths.append(sink.output_path)
    return any(fs.protocol_of(p) == "memory" for p in paths)


def _take_outcome(outcome: dict[str, Any], records: list[dict[str, Any] | None], num_shards: int) -> None:
    for i, record in outcome["records"].items():
        records[int(i)] = record
    failed = outcome["failed"]
    if failed is not None:
        raise ShardFailed(f"shard {failed} of {num_shards} failed: {outcome['message']}", failed,
                          outcome["traceback"])


def _remote_message(error: JobFailed) -> str:
    text = str(error)
    # fray prefixes "job <name> failed: "; the message names the shards already.
    return text.split(" failed: ", 1)[1] if " failed: " in text else text


def _groups(pending: list[int], max_parallel: int) -> collections.deque[list[int]]:
    # One group of neighbouring shards per worker slot: a process start costs about as much as
    # tokenizing a megabyte, so each slot starts once. Shards of about equal size (one per input
    # file, or equal byte ranges) keep the slots evenly loaded.
    size = max(1, math.ceil(len(pending) / max_parallel))
    return collections.deque(pending[k:k + size] for k in range(0, len(pending), size))


def _run_on_client(
    dataset: Dataset,
    sink: Sink,
    pending: list[int],
    records: list[dict[str, Any] | None],
    client: DistributedClient | None,
    max_parallel: int,
    env: dict[str, str] | None,
    progress: Callable[[int, int], None] | None,
) -> None:
    num_shards = dataset.num_shards
    groups = _groups(pending, max_parallel)
    own_client = client is None
    client = client or LocalClient()
    running: dict[int, tuple[list[int], Any]] = {}
    try:
        while groups or running:
            while groups and len(running) < max_parallel:
                group = groups.popleft()
                name = f"zephyr-shards-{group[0]:05d}-{group[-1]:05d}"
                running[group[0]] = (group, client.submit(_run_shard_group, dataset, group, sink, name=name, env=env))
            finished = [key for key, (_group, handle) in running.items() if handle.done()]
            if not finished:
                time.sleep(_POLL_SECONDS)
                continue
            for key in finished:
                group, handle = running.pop(key)
                try:
                    outcome = handle.result()
                except JobFailed as e:
                    # The worker died (killed, out of memory): which shard it was on is unknown.
                    unfinished = [i for i in group if records[i] is None]
                    first = unfinished[0] if unfinished else group[0]
                    raise ShardFailed(f"shards {group[0]}-{group[-1]} of {num_shards} failed: {_remote_message(e)}",
                                      first, e.remote_traceback) from None
                _take_outcome(outcome, records, num_shards)
                if progress is not None:
                    progress(sum(r is not None for r in records), num_shards)
                logger.debug("shards %d-%d of %d done", group[0], group[-1], num_shards)
    finally:
        # On failure (or interrupt) stop the others: their output would be redone anyway.
        for _group, handle in running.values():
            handle.cancel()
        if own_client:
            client.shutdown()


@dataclass(frozen=True)
class _Options:
    """What every wave of one run shares."""

    client: DistributedClient | None
    max_parallel: int
    env: dict[str, str] | None
    in_process: bool
    default_work: str | None  # the folder of the run's sink: group_by stages default to it


def run(
    dataset: Dataset,
    sink: Sink,
    *,
    client: DistributedClient | None = None,
    max_parallel: int | None = None,
    env: dict[str, str] | None = None,
    in_process: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> RunResult:
    """Run the shards of ``dataset`` not yet committed to ``sink``; see :meth:`Dataset.write`.

    A pipeline with ``group_by`` stages runs in waves: each stage's map wave (its input's shards,
    written to partition files) once the stages before it are done, then the sink's shards.
    """
    if max_parallel is None:
        max_parallel = os.cpu_count() or 1
    if max_parallel <= 0:
        raise ValueError(f"max_parallel must be > 0, got {max_parallel}")
    options = _Options(client, max_parallel, env, in_process, sink.output_path)
    return _run(dataset, sink, options, progress, set())


def _run_stages(dataset: Dataset, options: _Options, folders: set[str]) -> tuple[Dataset, tuple[RunResult, ...]]:
    """Run the map wave of every group_by stage ``dataset`` reads from; return the dataset with
    those stages' partitions in place of its pending shards, and the map waves' results."""
    stages = list({id(s.stage): s.stage for s in dataset.shards if isinstance(s, PendingPartition)}.values())
    if not stages:
        return dataset, ()
    waves: list[RunResult] = []
    partitions: dict[int, list[ReducePartition]] = {}
    for stage in stages:
        folder = stage.folder(options.default_work)
        if folder in folders:
            raise ValueError(f"two group_by stages of one pipeline write to {folder}: give them distinct names")
        folders.add(folder)
        try:
            wave = _run(stage.upstream, stage.sink(folder), options, None, folders)
        except ShardFailed as e:
            raise ShardFailed(f"group_by {stage.name!r} map task: {e}", e.shard_index, e.remote_traceback) from None
        logger.info("group_by %r: %d map tasks done (%d reused)", stage.name, len(wave.shard_records), len(wave.reused))
        waves.extend(wave.shuffles)
        waves.append(wave)
        partitions[id(stage)] = stage.reduce_partitions(folder, wave.shard_records)
    shards = [partitions[id(s.stage)][s.partition] if isinstance(s, PendingPartition) else s for s in dataset.shards]
    return dataset.replace_shards(shards), tuple(waves)


def _run(dataset: Dataset, sink: Sink, options: _Options, progress: Callable[[int, int], None] | None,
         folders: set[str]) -> RunResult:
    dataset, shuffles = _run_stages(dataset, options, folders)
    num_shards = dataset.num_shards
    sink.prepare(num_shards)
    records: list[dict[str, Any] | None] = [None] * num_shards
    reused = []
    for i in range(num_shards):
        found = sink.committed(i, num_shards, dataset.shards[i].describe())
        if found is not None:
            records[i] = found
            reused.append(i)
    pending = [i for i in range(num_shards) if records[i] is None]
    written = tuple(pending)
    if reused:
        logger.info("%d of %d shards already committed; running %d", len(reused), num_shards, len(pending))

    if progress is not None:
        progress(len(reused), num_shards)
    if options.in_process or _in_process_only(dataset, sink):
        logger.debug("running %d shards in this process", len(pending))
        count = itertools.count(len(reused) + 1)
        on_shard = (lambda: progress(next(count), num_shards)) if progress is not None else None
        _take_outcome(_run_shard_group(dataset, pending, sink, on_shard), records, num_shards)
    else:
        _run_on_client(dataset, sink, pending, records, options.client, options.max_parallel, options.env, progress)

    done = [r for r in records if r is not None]
    counters = Counters.total(r.get("counters", {}) for r in done)
    index = sink.finalize(done, counters)
    if counters.get("skipped_records") or counters.get("skipped_files"):
        logger.warning("skipped bad input: %d records, %d files (see warnings above)",
                       counters.get("skipped_records", 0), counters.get("skipped_files", 0))
    return RunResult(shard_records=done, written=written, reused=tuple(reused), counters=counters, index=index,
                     shuffles=shuffles)
