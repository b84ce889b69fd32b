"""Web-site templates of the generated corpus: navigation, headers, footers, cookie banners and
sidebars around an article, in a few page layouts.

A :class:`Site` is drawn from its own ``random.Random`` (seeded by the corpus seed and the site's
number), so the boilerplate of a site is the same on every page and every machine. ``render``
turns an article (title and paragraphs; a paragraph may hold line breaks) into a full HTML page.
"""

from __future__ import annotations

import html
import random
from dataclasses import dataclass

__all__ = ["Site", "chrome_text", "make_site", "render_page"]

_PREFIXES = ("The Daily", "Morning", "Evening", "Weekly", "Hillside", "Riverside", "Maple Street", "Northern",
             "Lakeside", "Old Town", "Greenfield", "Harbor", "Meadow", "Sunrise", "Pinewood", "Brookside")
_NOUNS = ("Gazette", "Chronicle", "Courier", "Herald", "Journal", "Post", "Bulletin", "Tribune", "Review",
          "Dispatch", "Observer", "Ledger", "Times", "Almanac", "Digest", "Notebook")
_SECTIONS = ("Home", "News", "Stories", "Family", "Kids", "Books", "Garden", "Recipes", "Travel", "Weather",
             "Sports", "Opinion", "Events", "About", "Contact", "Archive", "Podcasts", "Shop", "Newsletter")
_COOKIES = (
    "We use cookies to improve your experience on our site. By continuing to browse you agree to our use of cookies.",
    "This website stores cookies on your computer to personalise content and analyse traffic. Accept all cookies?",
    "Our partners and we use cookies and similar technologies for measurement and advertising purposes.",
    "Cookies help us deliver our services. Manage your preferences or accept the default settings.",
)
_FOOTER_LINES = (
    "All rights reserved.", "Privacy Policy", "Terms of Use", "Cookie Settings", "Accessibility",
    "Advertise with us", "Careers", "Sitemap", "Contact the newsroom", "Subscribe to our newsletter",
)
_TEASERS = (
    "Ten tips for a rainy afternoon", "How to plant a sunflower", "Our favourite picnic recipes",
    "Meet the baker of the week", "The best parks for a family walk", "Five books to read aloud",
    "Why owls stay up at night", "A guide to building a kite", "What to pack for a day at the lake",
    "The story behind the old lighthouse", "Weekend events near you", "Ask the gardener",
)
_LAYOUTS = ("article", "div", "main")


@dataclass(frozen=True)
class Site:
    """One web site's boilerplate.

    Attributes:
        number: the site's number in the corpus.
        name: its display name.
        domain: the host its URLs use.
        sections: navigation labels.
        cookie: cookie-banner text.
        footer: footer link labels.
        teasers: sidebar headlines ("Popular now").
        layout: which HTML skeleton wraps the article.
        shared_block: text every article page of the site repeats inside its main content (a
            templated site: a shop or directory whose pages differ only in a short part), or "".
    """

    number: int
    name: str
    domain: str
    sections: tuple[str, ...]
    cookie: str
    footer: tuple[str, ...]
    teasers: tuple[str, ...]
    layout: str
    shared_block: str = ""


def make_site(seed: int, number: int, shared_block: str = "") -> Site:
    """Site ``number`` of the corpus with ``seed`` (deterministic)."""
    rng = random.Random(f"webcorpus-site:{seed}:{number}")
    name = f"{rng.choice(_PREFIXES)} {rng.choice(_NOUNS)}"
    domain = name.lower().replace(" ", "") + f"{number}.example"
    return Site(
        number=number, name=name, domain=domain,
        sections=tuple(rng.sample(_SECTIONS, rng.randint(5, 9))),
        cookie=rng.choice(_COOKIES),
        footer=tuple(rng.sample(_FOOTER_LINES, rng.randint(4, 7))),
        teasers=tuple(rng.sample(_TEASERS, rng.randint(3, 6))),
        layout=rng.choice(_LAYOUTS),
        shared_block=shared_block,
    )


def chrome_text(site: Site) -> str:
    """The text of a site's boilerplate alone (logo, navigation, cookie banner, sidebar, footer),
    one block per line: what a page of it gives when nothing finds the main content."""
    return "\n".join([
        site.name, " ".join(site.sections), f"{site.cookie} Accept Manage", "Popular now",
        *site.teasers, " | ".join(site.footer), f"\u00a9 {site.name}. All rights reserved.",
    ])


def _paragraph_html(paragraph: str) -> str:
    return "<p>" + "<br>\n".join(html.escape(line) for line in paragraph.split("\n")) + "</p>"


def render_page(site: Site, title: str, paragraphs: list[str], *, charset: str = "utf-8",
                byline: str = "") -> str:
    """A full HTML page for an article on ``site``; the article is ``paragraphs`` under ``title``."""
    e = html.escape
    nav = "".join(f'<li><a href="/{s.lower()}">{e(s)}</a></li>' for s in site.sections)
    teasers = "".join(f'<li><a href="/popular/{i}">{e(t)}</a></li>' for i, t in enumerate(site.teasers))
    footer = " | ".join(f'<a href="/{f.lower().replace(" ", "-")}">{e(f)}</a>' for f in site.footer)
    body = "\n".join(_paragraph_html(p) for p in paragraphs)
    if site.shared_block:
        # Templated sites repeat their block inside the article itself, where extractors keep it.
        body = body + "\n" + "\n".join(_paragraph_html(p) for p in site.shared_block.split("\n\n"))
    header = f"<h1>{e(title)}</h1>" + (f'<p class="byline">{e(byline)}</p>' if byline else "")
    if site.layout == "article":
        main = f"<article>{header}\n{body}</article>"
    elif site.layout == "main":
        main = f'<main id="content"><div class="post">{header}\n<div class="entry">{body}</div></div></main>'
    else:
        main = f'<div class="content"><div class="story-body">{header}\n{body}</div></div>'
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="{charset}">'
        f"<title>{e(title)} - {e(site.name)}</title>"
        '<script>window.dataLayer = window.dataLayer || []; function track(){}</script>'
        "<style>body{font-family:sans-serif}.nav li{display:inline}</style></head>\n<body>\n"
        f'<div id="cookie-banner" class="cookie consent">{e(site.cookie)} <button>Accept</button> '
        "<button>Manage</button></div>\n"
        f'<header><div class="logo">{e(site.name)}</div><nav class="nav"><ul>{nav}</ul></nav></header>\n'
        f"{main}\n"
        f'<aside class="sidebar"><h3>Popular now</h3><ul>{teasers}</ul></aside>\n'
        f'<footer><p>{footer}</p><p>&copy; {e(site.name)}. All rights reserved.</p></footer>\n'
        "</body></html>\n"
    )
