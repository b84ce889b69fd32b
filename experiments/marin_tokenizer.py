"""The project's default tokenizer: a byte-level BPE trained on the bundled corpus by a cached step."""

from marin.experiment import bundled_corpus, trained_tokenizer

corpus = bundled_corpus()

marin_tokenizer = trained_tokenizer(name="tokenizers/marin-bpe-2k", source=corpus, vocab_size=2048)

steps = [marin_tokenizer]
