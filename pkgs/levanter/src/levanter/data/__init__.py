"""Grain input pipelines over tokenized shards (``marin.tokenized/v1``).

Names load on first use, so naming a ``DatasetSpec`` does not import Grain.
"""

from __future__ import annotations

from rigging.lazy import lazy_getattr

__all__ = [
    "CHAT_FORMAT",
    "FORMAT",
    "ChatIterDataset",
    "DatasetSpec",
    "MixtureIterDataset",
    "MixturePhase",
    "MixtureSchedule",
    "PackedIterDataset",
    "TextLmDatasetFormat",
    "TokenizedSplit",
    "check_mixture_data",
    "data_is_chat",
    "data_vocab_size",
    "decode_chat_record",
    "decode_document",
    "encode_chat_record",
    "eval_batches",
    "mixture_schedule",
    "mixture_usage",
    "open_split",
    "read_index",
    "train_dataset",
]

_WHERE = {
    "CHAT_FORMAT": "levanter.data.chat",
    "ChatIterDataset": "levanter.data.chat_windows",
    "data_is_chat": "levanter.data.loader",
    "decode_chat_record": "levanter.data.chat",
    "encode_chat_record": "levanter.data.chat",
    "DatasetSpec": "levanter.data.spec",
    "MixturePhase": "levanter.data.spec",
    "mixture_schedule": "levanter.data.spec",
    "MixtureSchedule": "levanter.data.packing",
    "mixture_usage": "levanter.data.usage",
    "check_mixture_data": "levanter.data.loader",
    "data_vocab_size": "levanter.data.loader",
    "eval_batches": "levanter.data.loader",
    "train_dataset": "levanter.data.loader",
    "MixtureIterDataset": "levanter.data.packing",
    "PackedIterDataset": "levanter.data.packing",
    "TextLmDatasetFormat": "levanter.data.text",
    "FORMAT": "levanter.data.tokenized",
    "TokenizedSplit": "levanter.data.tokenized",
    "decode_document": "levanter.data.tokenized",
    "open_split": "levanter.data.tokenized",
    "read_index": "levanter.data.tokenized",
}


__getattr__ = lazy_getattr(__name__, _WHERE)
