"""Training documents for a quality classifier, as the generated web corpus offers them.

* positive: clean articles (:func:`~marin.processing.webcorpus.articles.make_article`) numbered
  far beyond the corpus's own, so none of them is a page of the corpus;
* negative: pages without an article, in turn a site's boilerplate alone
  (:func:`~marin.processing.webcorpus.templates.chrome_text` of a site not in the corpus) and a
  shop's policy listing (:func:`~marin.processing.webcorpus.articles.make_shared_block`) under a
  product title: the text that templated and navigation-only pages are made of.

Records are documents (``{"id", "text"}``), ids ``hq-00000`` and ``lq-00000``.
"""

from __future__ import annotations

from typing import Any

from marin.processing.webcorpus.articles import make_article, make_shared_block
from marin.processing.webcorpus.templates import chrome_text, make_site

__all__ = ["negative_documents", "positive_documents"]

# Numbers of articles, sites and shops of these documents: far above any corpus's own.
_FIRST = 30_000_000


def positive_documents(seed: int, count: int) -> list[dict[str, Any]]:
    """``count`` clean articles that are not pages of the corpus."""
    return [{"id": f"hq-{i:05d}", "text": make_article(seed, _FIRST + i).text()} for i in range(count)]


def negative_documents(seed: int, count: int) -> list[dict[str, Any]]:
    """``count`` boilerplate-only pages: site chrome and shop listings, alternating."""
    docs = []
    for i in range(count):
        site = make_site(seed, _FIRST + i)
        if i % 2 == 0:
            text = chrome_text(site)
        else:
            block = make_shared_block(seed, _FIRST + i, 13 + i % 4)
            text = "\n".join([f"Handmade toy no. {i}", *block.split("\n\n"), " | ".join(site.footer)])
        docs.append({"id": f"lq-{i:05d}", "text": text})
    return docs
