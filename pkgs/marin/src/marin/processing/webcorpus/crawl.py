"""A generated crawl: the web corpus's pages as WARC files, with pages in other languages, pages
carrying personal data, and the odd records a real crawl has, planted among them.

:func:`write_crawl` reads the pages of a corpus made by
:func:`~marin.processing.webcorpus.generate.generate_web_corpus` and writes them as the HTTP
responses of a crawl (``<out>/CC-MAIN-<seed>-<k>.warc.gz``, ``records_per_file`` records each, one
gzip member per record), in a shuffled order, with:

* pages in German, French, Spanish, Italian, Dutch and Portuguese (``foreign_pages`` of each);
* English articles into which e-mail addresses, public and private IP addresses and phone numbers
  were written (``pii_pages``);
* an image response and a record the crawler truncated (one each).

It returns (and writes to ``<out>/crawl_truth.json``) what was planted: ``{"records",
"languages": {record id: language}, "pii": {record id: {"emails", "public_ips", "private_ips",
"phones"}}, "not_html": [ids], "truncated": [ids], "pages": {record id: page id}}``. The same
corpus and config give byte-identical files.
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from marin.processing.webcorpus.generate import HTML_FOLDER
from rigging import filesystem as fs
from zephyr.warc import TRUNCATED, WebRecord, write_web_archive

__all__ = ["CRAWL_TRUTH_FILE", "FOREIGN_TEXT", "CrawlConfig", "CrawlStepConfig", "web_crawl_step", "write_crawl"]

CRAWL_TRUTH_FILE = "crawl_truth.json"
_DATE = "2026-05-{day:02d}T{hour:02d}:{minute:02d}:00Z"

FOREIGN_TEXT: dict[str, tuple[str, ...]] = {
    "de": ("Am frühen Morgen fuhr der alte Fischer mit seinem Boot auf den stillen See hinaus.",
           "Die Kinder aus dem Dorf warteten am Ufer und hofften auf einen guten Fang.",
           "Im Sommer blühen auf den Wiesen hinter der Mühle unzählige gelbe Blumen.",
           "Nach dem Regen roch der ganze Wald nach feuchter Erde und frischem Moos.",
           "Seine Großmutter erzählte jeden Abend eine Geschichte über die Berge im Süden."),
    "fr": ("Chaque matin, la boulangère ouvrait sa boutique avant le lever du soleil.",
           "Les voisins venaient acheter du pain chaud et échanger les nouvelles du quartier.",
           "Au bord de la rivière, un vieux pêcheur réparait patiemment ses filets.",
           "Pendant l'hiver, la neige recouvrait les toits et les enfants faisaient des glissades.",
           "Le marché du samedi attirait des paysans venus de tous les villages voisins."),
    "es": ("Cada tarde, la abuela se sentaba en el patio para regar sus plantas.",
           "Los niños del barrio jugaban al fútbol en la plaza hasta que anochecía.",
           "En la costa, los pescadores volvían al puerto con las redes llenas de sardinas.",
           "El tren atravesaba los campos de olivos bajo un cielo completamente despejado.",
           "Durante las fiestas del pueblo, la música sonaba en todas las calles."),
    "it": ("Ogni domenica la famiglia si riuniva intorno a un lungo tavolo in giardino.",
           "Il nonno raccontava storie della guerra mentre i nipoti ascoltavano in silenzio.",
           "Sulle colline intorno al paese crescevano viti e alberi di ulivo.",
           "La piccola libreria del centro apriva tardi ma restava aperta fino a mezzanotte.",
           "Dopo il temporale, il cielo sopra il lago diventò di un azzurro intenso."),
    "nl": ("Elke ochtend fietste de postbode langs de grachten naar het kleine dorp.",
           "In de winter schaatsten de kinderen op het bevroren water achter de boerderij.",
           "De molenaar vertelde dat de wind die dag uit het noorden zou komen.",
           "Op de markt verkochten de boeren kaas, brood en verse groenten uit de tuin.",
           "Na het werk zaten de buren samen op een bankje voor het huis."),
    "pt": ("Todas as manhãs, o pescador saía do porto antes de o sol nascer.",
           "As crianças corriam pela praia à procura de conchas e pequenos caranguejos.",
           "Na aldeia, a festa de verão durava três dias e três noites.",
           "A avó preparava pão caseiro enquanto contava histórias da sua juventude.",
           "Depois da chuva, as ruas estreitas da cidade velha brilhavam ao sol."),
}
"""A few sentences in each planted language (written for this corpus)."""


@dataclass(frozen=True)
class CrawlConfig:
    """What a generated crawl plants, and how it is cut into files."""

    foreign_pages: int = 2
    """Pages in each language of :data:`FOREIGN_TEXT`."""
    pii_pages: int = 4
    """English pages carrying e-mail addresses, IP addresses and phone numbers."""
    records_per_file: int = 200
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("foreign_pages", "pii_pages"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.records_per_file < 1:
            raise ValueError(f"records_per_file must be >= 1, got {self.records_per_file}")


def _html(title: str, paragraphs: list[str], lang: str) -> bytes:
    body = "".join(f"<p>{p}</p>" for p in paragraphs)
    return (f'<!DOCTYPE html><html lang="{lang}"><head><meta charset="utf-8"><title>{title}</title></head>'
            f"<body><nav><a href=\"/\">Home</a></nav><article><h1>{title}</h1>{body}</article></body></html>").encode()


def _foreign(lang: str, rng: random.Random) -> bytes:
    sentences = list(FOREIGN_TEXT[lang])
    paragraphs = []
    for _ in range(3):
        rng.shuffle(sentences)
        paragraphs.append(" ".join(sentences[:4]))
    return _html(sentences[0].split(",")[0].rstrip("."), paragraphs, lang)


def _pii(k: int, rng: random.Random) -> tuple[bytes, dict[str, list[str]]]:
    found = {"emails": [f"{name}.{k}@{domain}" for name, domain in (("anna.berg", "example.org"), ("j.okafor", "mail.test"))],
             "public_ips": [f"{rng.choice((34, 52, 151, 185))}.{rng.randrange(1, 255)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"],
             "private_ips": [f"192.168.{rng.randrange(256)}.{rng.randrange(1, 255)}"],
             "phones": [f"+1 (555) {rng.randrange(100, 1000)}-{rng.randrange(1000, 10000)}"]}
    paragraphs = [
        f"The harbour office answers questions about the ferry timetable; write to {found['emails'][0]} "
        f"or call {found['phones'][0]} on weekdays before noon.",
        f"Our booking server at {found['public_ips'][0]} was moved last spring, and the old intranet address "
        f"{found['private_ips'][0]} no longer answers from outside the building.",
        f"Lost luggage is handled by the depot; its manager reads {found['emails'][1]} every morning and replies "
        "within two working days, usually with a reference number for the claim.",
    ]
    return _html(f"Ferry office notice {k}", paragraphs, "en"), found


def _record(rng: random.Random, url: str, payload: bytes, **kw) -> WebRecord:
    date = _DATE.format(day=rng.randrange(1, 29), hour=rng.randrange(24), minute=rng.randrange(60))
    return WebRecord(f"<urn:uuid:{uuid.UUID(int=rng.getrandbits(128), version=4)}>", url, date,
                     kw.pop("content_type", "text/html"), kw.pop("charset", None), payload, **kw)


def write_crawl(corpus: str, output: str, config: CrawlConfig = CrawlConfig()) -> dict:
    """Write the crawl of the corpus at ``corpus`` into ``output`` (see the module docstring)."""
    rng = random.Random(f"crawl:{config.seed}")
    html_root = fs.join(corpus, HTML_FOLDER)
    truth: dict = {"languages": {}, "pii": {}, "not_html": [], "truncated": [], "pages": {}}
    records = []
    for rel, _size in fs.walk_files(html_root):
        site = PurePosixPath(rel).parts[0]
        record = _record(rng, f"https://{site}.example/{rel}", fs.read_bytes(fs.join(html_root, rel)))
        truth["pages"][record.id] = rel
        records.append(record)
    for lang in sorted(FOREIGN_TEXT):
        for k in range(config.foreign_pages):
            record = _record(rng, f"https://{lang}.example/{k}.html", _foreign(lang, rng), charset="utf-8")
            truth["languages"][record.id] = lang
            records.append(record)
    for k in range(config.pii_pages):
        page, found = _pii(k, rng)
        record = _record(rng, f"https://ferry.example/notice-{k}.html", page, charset="utf-8")
        truth["pii"][record.id] = found
        records.append(record)
    image = _record(rng, "https://ferry.example/logo.png", b"\x89PNG\r\n\x1a\n" + bytes(64), content_type="image/png")
    cut = _record(rng, "https://ferry.example/timetable.html", _html("Timetable", ["Departures at"], "en")[:90],
                  charset="utf-8", problem=TRUNCATED)
    truth["not_html"], truth["truncated"] = [image.id], [cut.id]
    records += [image, cut]
    rng.shuffle(records)
    files = []
    for start in range(0, len(records), config.records_per_file):
        name = f"CC-MAIN-{config.seed:04d}-{start // config.records_per_file:05d}.warc.gz"
        write_web_archive(fs.join(output, name), records[start:start + config.records_per_file])
        files.append(name)
    truth.update(records=len(records), files=files)
    fs.atomic_write(fs.join(output, CRAWL_TRUTH_FILE), json.dumps(truth, indent=1, sort_keys=True) + "\n")
    return truth


@dataclass(frozen=True)
class CrawlStepConfig:
    """A crawl of a generated web corpus (a step's output folder, or a path)."""

    corpus: Any
    crawl: CrawlConfig = CrawlConfig()


def web_crawl_step(config: CrawlStepConfig, output_path: str) -> None:
    """Step function: write the crawl of a web corpus (:func:`write_crawl`)."""
    truth = write_crawl(str(config.corpus), output_path, config.crawl)
    print(f"crawl: {truth['records']} records in {len(truth['files'])} WARC files; planted "
          f"{len(truth['languages'])} pages in other languages, {len(truth['pii'])} with personal data")
