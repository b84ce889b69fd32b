"""The rules web data meets: language identification (and keep_languages in consolidate), URL
blocklists from lists and files, and PII redaction, each run on tiny JSON-lines corpora."""

from __future__ import annotations

from pathlib import Path

import pytest

from marin.execution.core.lazy import lower
from marin.experiment.datakit import (
    KeepLanguages,
    LanguageIdentified,
    consolidate,
    heuristics,
    keep_languages,
    language_id,
    pii,
    url_filter,
)
from marin.processing.attributes import list_shards, read_documents, read_records, read_summary, write_jsonl
from marin.processing.consolidate import ConsolidateConfig, DropBlockedUrls, consolidate_step
from marin.processing.language import LanguageIdConfig, language_id_step
from marin.processing.pii import PiiConfig, redact
from marin.processing.quality import C4_RULES, FINEWEB_RULES, GOPHER_RULES, HeuristicRule
from marin.processing.urls import Blocklist, UrlFilterConfig, url_filter_step
from zephyr import DataError

SENTENCES = {
    "en": "The weather was cold this morning, so we stayed inside and read our books by the window.",
    "de": "Das Wetter war heute Morgen kalt, also blieben wir drinnen und lasen unsere Bücher am Fenster.",
    "fr": "Il faisait froid ce matin, alors nous sommes restés à l'intérieur pour lire nos livres près de la fenêtre.",
    "es": "Hacía frío esta mañana, así que nos quedamos dentro y leímos nuestros libros junto a la ventana.",
}


def _attributes(folder: Path) -> dict:
    return {r["id"]: r["attributes"] for s in list_shards(str(folder)) for r in read_records(s.path)}


def test_language_id_names_each_language_and_keep_languages_keeps_one(tmp_path: Path) -> None:
    docs = [{"id": code, "text": text} for code, text in SENTENCES.items()] + [{"id": "short", "text": "ok"}]
    write_jsonl(str(tmp_path / "docs" / "a.jsonl"), docs[:3])
    write_jsonl(str(tmp_path / "docs" / "b.jsonl.gz"), docs[3:])
    language_id_step(LanguageIdConfig(input=str(tmp_path / "docs")), str(tmp_path / "lang"))
    found = _attributes(tmp_path / "lang")
    assert {k: v["language"] for k, v in found.items() if k != "short"} == {c: c for c in SENTENCES}
    assert all(found[c]["score"] > 0.9 for c in SENTENCES) and found["short"]["score"] < 0.65
    summary = read_summary(str(tmp_path / "lang"))
    assert summary["documents"] == 5 and summary["model"] == "langid" and summary["languages"]["en"] == 1

    kept = tmp_path / "kept"
    spec = KeepLanguages(str(tmp_path / "lang"), ("en", "de"), min_score=0.65, name="lang")
    consolidate_step(ConsolidateConfig(input=str(tmp_path / "docs"), filters=(spec,)), str(kept))
    assert [d["id"] for s in list_shards(str(kept)) for d in read_documents(s.path)] == ["en", "de"]
    summary = read_summary(str(kept))
    assert (summary["kept"], summary["removed"]) == (2, {"lang": 3})
    why = {e["id"]: e["why"] for e in summary["examples"]["lang"]}
    assert why["fr"].startswith("language fr (score ") and why["fr"].endswith(") not in en, de")
    assert summary["kept_examples"][0]["notes"]["lang"].startswith("language en (score 0.9")


def test_handles_build_their_rules() -> None:
    text = "/data/docs"
    assert heuristics("h", text).config.rules == GOPHER_RULES + C4_RULES  # as before FineWeb's rules came
    chosen = heuristics("h", text, rules=["fineweb", "word_count", HeuristicRule.FINEWEB_LIST_LIKE]).config.rules
    assert chosen == (*FINEWEB_RULES, HeuristicRule.WORD_COUNT)
    with pytest.raises(ValueError, match="rule must be one of 'gopher', 'c4', 'fineweb', 'word_count', .*got 'refinedweb'"):
        heuristics("h", text, rules="refinedweb")
    identified = language_id("d/lang", text)
    assert isinstance(identified, LanguageIdentified) and identified.config.model.value == "langid"
    rule = keep_languages(identified, "en", min_score=0.65)
    kept = consolidate("d/kept", text, [rule, url_filter("d/urls", text, domains=["spam.example"])])
    assert [type(f) for f in kept.config.filters] == [KeepLanguages, DropBlockedUrls]
    assert kept.config.filters[0].languages == ("en",) and kept.config.filters[0].attributes is identified
    with pytest.raises(ValueError, match="model must be one of 'langid', got 'cld3'"):
        language_id("l", text, model="cld3")
    with pytest.raises(ValueError, match="languages decide nothing alone; give keep_languages"):
        consolidate("k", text, [identified])
    with pytest.raises(ValueError, match="keep_languages\\('d/lang'\\): .*min_score must be in \\[0, 1\\], got 65"):
        keep_languages(identified, ["en"], min_score=65)
    with pytest.raises(ValueError, match="keep_languages\\(...\\) takes a language_id\\(...\\) handle, got a Heuristics"):
        keep_languages(heuristics("h", text), ["en"])  # type: ignore[arg-type]
    other = language_id("d/other", "/elsewhere")
    with pytest.raises(ValueError, match="filter 'd/other' was built on '/elsewhere'"):
        consolidate("k", text, [keep_languages(other, ["en"])])


URLS = {
    "a": "https://casino.example/play", "b": "http://www.Casino.Example:8080/x", "c": "notcasino.example/home",
    "d": "https://news.example/2024/Free-PORN-links", "e": "https://news.example/sport", "f": None,
}


def test_url_filter_blocks_domains_and_substrings_from_lists_and_files(tmp_path: Path) -> None:
    write_jsonl(str(tmp_path / "docs" / "a.jsonl"),
                [{"id": k, "text": f"page {k}", **({"url": u} if u else {})} for k, u in URLS.items()])
    docs = str(tmp_path / "docs")
    url_filter_step(UrlFilterConfig(input=docs, domains=("*.casino.example",), substrings=("porn",)),
                    str(tmp_path / "lists"))
    blocked = {k: a["reason"] for k, a in _attributes(tmp_path / "lists").items() if a["blocked"]}
    assert blocked == {"a": "domain casino.example", "b": "domain casino.example", "d": "substring porn"}
    summary = read_summary(str(tmp_path / "lists"))
    assert (summary["documents"], summary["blocked"], summary["no_url"]) == (6, 3, 1)
    assert summary["by_rule"] == {"domain casino.example": 2, "substring porn": 1}

    (tmp_path / "domains.txt").write_text("# gambling\ncasino.example\n\nnews.example\n")
    (tmp_path / "words.txt").write_text("/play\n")
    handle = url_filter("d/urls", docs, domains_file=str(tmp_path / "domains.txt"),
                        substrings_file=[str(tmp_path / "words.txt")])
    lower(handle).fn(handle.config, str(tmp_path / "files"))
    from_files = _attributes(tmp_path / "files")
    assert [k for k, a in from_files.items() if a["blocked"]] == ["a", "b", "d", "e"]
    assert from_files["a"]["reason"] == "domain casino.example"  # a domain is checked before substrings

    kept = tmp_path / "kept"
    consolidate_step(ConsolidateConfig(input=docs, filters=(DropBlockedUrls(str(tmp_path / "lists"), name="urls"),)),
                     str(kept))
    assert [d["id"] for d in read_documents(str(kept / "a.jsonl"))] == ["c", "e", "f"]
    assert read_summary(str(kept))["examples"]["urls"][0]["why"] == "blocked URL (domain casino.example)"

    (tmp_path / "bad.txt").write_text("ok.example\nhttp://bad.example/path\n")
    with pytest.raises(DataError, match="bad.txt: line 2: 'http://bad.example/path' is not a domain"):
        Blocklist.of(UrlFilterConfig(input=docs, domain_files=(str(tmp_path / "bad.txt"),)))
    with pytest.raises(ValueError, match="url_filter 'u': give at least one blocked domain or substring"):
        url_filter("u", docs)
    with pytest.raises(ValueError, match="url_filter 'u': domains must be a list of strings .*got the string"):
        url_filter("u", docs, domains="casino.example")  # type: ignore[arg-type]


TEXT = ("Mail jane.doe+list@mail.example.co.uk or bob@uni.edu (not docs@example.org). Our server 8.8.8.8 and 151.101.1.69 answer; "
        "the router 192.168.1.1 and 127.0.0.1 stay. Version 1.2.3.4.5 is no address. "
        "Call +44 20 7946 0958 or (555) 123-4567 on 2024-01-15.")


def test_pii_replaces_emails_and_public_ips_and_phones_when_asked(tmp_path: Path) -> None:
    text, counts = redact(TEXT, PiiConfig(input=""))
    assert counts == {"emails": 2, "ips": 2}
    assert "name@example.com or first.last@example.org (not docs@example.org)." in text
    assert "jane" not in text and "bob" not in text
    assert "server 192.0.2.10 and 198.51.100.20 answer" in text
    assert "192.168.1.1 and 127.0.0.1 stay" in text and "1.2.3.4.5" in text  # private, loopback: kept
    assert "+44 20 7946 0958" in text  # phones are off by default
    again, counts_again = redact(text, PiiConfig(input=""))
    assert (again, counts_again) == (text, {})  # placeholders are reserved: a second pass changes nothing

    with_phones, counts = redact(TEXT, PiiConfig(input="", phones=True))
    assert counts["phones"] == 2 and "Call +1 555 0100 or +1 555 0100 on 2024-01-15." in with_phones
    everything, _ = redact("Server 10.0.0.1.", PiiConfig(input="", only_public_ips=False))
    assert everything == "Server 192.0.2.10."

    write_jsonl(str(tmp_path / "docs" / "x" / "a.jsonl.gz"), [{"id": 1, "text": TEXT, "url": "https://a.example/"},
                                                             {"id": 2, "text": "Nothing personal here."}])
    handle = pii("d/pii", str(tmp_path / "docs"), phones=True)
    lower(handle).fn(handle.config, str(tmp_path / "out"))
    out = list(read_documents(str(tmp_path / "out" / "x" / "a.jsonl.gz")))
    assert out[0]["url"] == "https://a.example/" and out[0]["text"] == with_phones
    assert out[1]["text"] == "Nothing personal here."
    summary = read_summary(str(tmp_path / "out"))
    assert (summary["documents"], summary["edited"], summary["replaced"]) == (2, 1, {"emails": 2, "ips": 2, "phones": 2})
    with pytest.raises(ValueError, match="pii 'p': nothing to replace"):
        pii("p", str(tmp_path / "docs"), emails=False, ips=False)
    with pytest.raises(ValueError, match="pii: unknown option 'email'"):
        pii("p", str(tmp_path / "docs"), email=False)
