"""A generated web corpus, curated, tokenized and trained on: the datakit end to end.

``marin run experiments/datakit/`` (part of ``make experiments``; a few minutes on 2 CPUs) builds::

    web corpus (HTML pages with planted duplicates, quoted eval items, boilerplate-only shop pages)
      -> html_to_text (trafilatura)
      -> dedup: exact documents, and near-duplicates (Jaccard >= 0.8 of word 5-gram shingles)
      -> classify with a fastText quality classifier (clean articles against boilerplate pages)
      -> decontaminate against the corpus's eval items and held-out stories
      -> consolidate -> tokenize -> train a tiny Llama -> evaluate on the held-out stories

``marin report experiments/datakit/`` shows, for the consolidate step, what each filter removed
beside what was kept (for duplicates: the cluster's representative); ``marin show`` prints any
step's ``_summary.json``.
"""

from __future__ import annotations

from experiments.marin_tokenizer import marin_tokenizer
from experiments.scale import sized
from levanter.models.llama import LlamaConfig
from levanter.optim import AdamConfig
from marin.experiment import (
    classify,
    consolidate,
    decontaminate,
    dedup,
    evaluate,
    html_to_text,
    keep,
    quality_classifier,
    tokenized,
    train_lm,
    web_corpus,
)

SEQ_LEN = 128

corpus = web_corpus("datakit/webcorpus", num_pages=300, seed=0, contaminated_pages=9, eval_items=30,
                    bad_pages_per_kind=1, oversized_bytes=200_000, quality_documents=120)

# The planted oversized page (200 kB) is over max_bytes: counted and skipped, not parsed.
text = html_to_text("datakit/text", corpus.html, extractor="trafilatura", max_bytes=150_000, num_shards=2)

exact = dedup("datakit/dedup-exact", text, method="exact_document")
fuzzy = dedup("datakit/dedup-fuzzy", text, method="fuzzy", threshold=0.8)

# A few hundred short documents: more passes and a higher rate than fastText's defaults (5, 0.1),
# which leave every score near 0.5 on so little data.
quality_model = quality_classifier("datakit/quality-model", positive=corpus.quality_positive,
                                   negative=corpus.quality_negative, epoch=25, lr=0.5)
quality = classify("datakit/quality", text, quality_model)

clean = decontaminate("datakit/decontaminate", text,
                      against={"qa": corpus.eval_items, "held-out stories": corpus.quality_positive})

kept = consolidate("datakit/kept", text, filters=[clean, exact, fuzzy, keep(quality, min_score=0.5)])

web_tokens = tokenized("tokenized/datakit-web", source=kept, tokenizer=marin_tokenizer, validation_fraction=0.05)

# Smaller than llama_nano (one layer), and a few dozen steps: the point is the data path.
llama_pico = LlamaConfig(vocab_size=4096, hidden_dim=32, intermediate_dim=64, num_heads=2, num_kv_heads=2,
                         num_layers=1, max_seq_len=SEQ_LEN)

model = train_lm(name="checkpoints/datakit-pico", version="v1", model=llama_pico,
                 optimizer=AdamConfig(learning_rate=3e-3, weight_decay=0.1, warmup=5, min_lr_ratio=0.1),
                 datasets={web_tokens: 1.0}, batch_size=8, seq_len=SEQ_LEN, num_train_steps=sized(40, 8))

scores = evaluate("evals/datakit-pico", model, {"web": web_tokens, "held-out stories": corpus.quality_positive})

steps = [scores]
