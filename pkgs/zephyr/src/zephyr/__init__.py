"""zephyr: streaming data pipelines (readers, lazy sharded transforms, parallel runs, writers)."""

from zephyr.dataset import Dataset, FileShard, ItemShard, ShardSource, plan_file_shards
from zephyr.errors import DataError, ShardFailed
from zephyr.execution import RunResult, run
from zephyr.readers import (
    Compression,
    FileSlice,
    JsonlReader,
    OnError,
    ParquetReader,
    Reader,
    TextMode,
    TextReader,
    TokenShardReader,
    expand_paths,
    read_documents,
    reader_for_path,
    verify_shard_index,
)
from zephyr.worker_context import Counters, WorkerContext, current_context, worker_context
from zephyr.writers import ArrayRecordSink, CollectSink, JsonlSink, Sink, shard_name

__all__ = [
    "ArrayRecordSink",
    "CollectSink",
    "Compression",
    "Counters",
    "DataError",
    "Dataset",
    "FileShard",
    "FileSlice",
    "ItemShard",
    "JsonlReader",
    "JsonlSink",
    "OnError",
    "ParquetReader",
    "Reader",
    "RunResult",
    "ShardFailed",
    "ShardSource",
    "Sink",
    "TextMode",
    "TextReader",
    "TokenShardReader",
    "WorkerContext",
    "current_context",
    "expand_paths",
    "plan_file_shards",
    "read_documents",
    "reader_for_path",
    "run",
    "shard_name",
    "verify_shard_index",
    "worker_context",
]
