"""zephyr: streaming data pipelines (readers, lazy sharded transforms, grouping across shards, parallel runs,
writers)."""

from zephyr.compression import Compression
from zephyr.dataset import Dataset, FileShard, ItemShard, ShardSource, plan_file_shards
from zephyr.errors import DataError, ShardFailed
from zephyr.execution import RunResult, run
from zephyr.keys import encode_json, stable_hash
from zephyr.readers import (
    FileSlice,
    JsonlReader,
    OnError,
    ParquetReader,
    Reader,
    RecordFn,
    TextMode,
    TextReader,
    expand_paths,
    read_documents,
    read_records,
    reader_for_path,
)
from zephyr.shards import (
    INDEX_FILE,
    TOKENIZED_FORMAT,
    TokenShardReader,
    decode_tokens,
    local_shard,
    read_index,
    verify_shard_index,
    write_index,
)
from zephyr.warc import WarcReader, WebRecord, read_web_records, write_web_archive
from zephyr.worker_context import Counters, WorkerContext, current_context, worker_context
from zephyr.writers import ArrayRecordSink, CollectSink, JsonlSink, Sink, shard_name

__all__ = [
    "INDEX_FILE",
    "TOKENIZED_FORMAT",
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
    "RecordFn",
    "RunResult",
    "ShardFailed",
    "ShardSource",
    "Sink",
    "TextMode",
    "TextReader",
    "TokenShardReader",
    "WarcReader",
    "WebRecord",
    "WorkerContext",
    "current_context",
    "decode_tokens",
    "encode_json",
    "expand_paths",
    "local_shard",
    "plan_file_shards",
    "read_documents",
    "read_index",
    "read_records",
    "read_web_records",
    "reader_for_path",
    "run",
    "shard_name",
    "stable_hash",
    "verify_shard_index",
    "worker_context",
    "write_index",
    "write_web_archive",
]
