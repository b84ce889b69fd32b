"""From a crawl to a mixture: WARC files curated into a corpus, mixed with clean stories in two phases.

``marin run experiments/datakit/warc_pipeline.py`` (part of ``make experiments``) builds::

    web corpus -> a crawl of it as WARC files (pages in six other languages, pages carrying e-mail
                  addresses, IPs and phone numbers, an image and a truncated record planted)
      -> html_to_text (the WARC's responses; the image and the truncated record counted, not fatal)
      -> pii: e-mail and public IP addresses replaced (phone numbers too, here)
      -> language_id, heuristics (Gopher, C4 and FineWeb rules), fuzzy dedup, decontaminate
      -> consolidate (English only, every rule passed, no near-duplicate, no eval text)
      -> tokenized -> train a tiny Llama on a mixture of the web text and the clean stories whose
         weights change halfway (web 0.7 then 0.2) -> evaluate

Every filter runs on the redacted documents, so that ``consolidate`` joins them all on one source.
``marin show datakit/crawl-kept`` says what each filter removed; ``marin browse`` shows the
documents and the attributes behind it.
"""

from __future__ import annotations

from experiments.datakit.web_pipeline import llama_pico
from experiments.marin_tokenizer import marin_tokenizer
from experiments.scale import sized
from experiments.train_nano import tinystories
from levanter.optim import AdamConfig
from marin.experiment import (
    consolidate,
    decontaminate,
    dedup,
    evaluate,
    heuristics,
    html_to_text,
    keep_languages,
    language_id,
    pii,
    tokenized,
    train_lm,
    web_corpus,
    web_crawl,
)

SEQ_LEN = 128
STEPS = sized(60, 8)

corpus = web_corpus("datakit/crawl-corpus", num_pages=sized(300, 120), seed=1, contaminated_pages=6, eval_items=20,
                    bad_pages_per_kind=1, oversized_bytes=200_000, quality_documents=40)
crawl = web_crawl("datakit/crawl", corpus, foreign_pages=2, pii_pages=4, records_per_file=50)

text = html_to_text("datakit/crawl-text", crawl, extractor="trafilatura", max_bytes=150_000)
redacted = pii("datakit/crawl-pii", text, phones=True)

language = language_id("datakit/crawl-language", redacted)
rules = heuristics("datakit/crawl-rules", redacted, rules=["gopher", "c4", "fineweb"])
fuzzy = dedup("datakit/crawl-dedup", redacted, method="fuzzy", threshold=0.8)
clean = decontaminate("datakit/crawl-decontaminate", redacted, against={"qa": corpus.eval_items})

kept = consolidate("datakit/crawl-kept", redacted,
                   filters=[keep_languages(language, ["en"], min_score=0.65), rules, fuzzy, clean])

web_tokens = tokenized("tokenized/datakit-crawl", source=kept, tokenizer=marin_tokenizer, validation_fraction=0.05)

model = train_lm(name="checkpoints/datakit-crawl-pico", version="v1", model=llama_pico,
                 optimizer=AdamConfig(learning_rate=3e-3, weight_decay=0.1, warmup=2, min_lr_ratio=0.1),
                 # Two phases: mostly web text first, then mostly the clean stories (a cooldown on clean data).
                 datasets=[(0, {web_tokens: 0.7, tinystories: 0.3}), (STEPS // 2, {web_tokens: 0.2, tinystories: 0.8})],
                 batch_size=8, seq_len=SEQ_LEN, num_train_steps=STEPS)

scores = evaluate("evals/datakit-crawl-pico", model, {"web": web_tokens, "stories": tinystories})

steps = [scores]
