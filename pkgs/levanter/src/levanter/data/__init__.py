"""Grain input pipelines over tokenized shards (``marin.tokenized/v1``)."""

from levanter.data.loader import DatasetSpec, data_vocab_size, eval_batches, train_dataset
from levanter.data.packing import MixtureIterDataset, PackedIterDataset
from levanter.data.tokenized import FORMAT, TokenizedSplit, decode_document, open_split, read_index

__all__ = [
    "FORMAT",
    "DatasetSpec",
    "MixtureIterDataset",
    "PackedIterDataset",
    "TokenizedSplit",
    "data_vocab_size",
    "decode_document",
    "eval_batches",
    "open_split",
    "read_index",
    "train_dataset",
]
