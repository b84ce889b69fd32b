"""Every regular expression the data steps run over document text runs in time linear in the
text's length (a megabyte of dashes or base64 in one crawled document must not stall its shard):
each rule is fed 8 KB and 64 KB of input built to attack it, and the two times are compared in
one run; a quadratic rule takes ~64x longer on the larger, a linear one ~8x. Beside them, the
e-mail finder is checked to match what the regular expression it replaces matches."""

from __future__ import annotations

import base64
import importlib
import pkgutil
import random
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import marin.processing
from marin.processing import html, html_decode, pii
from marin.processing.pii import PiiConfig, email_spans, redact
from marin.processing.quality import fineweb, heuristics
from marin.processing.quality.fineweb import fineweb_metrics, fineweb_words
from marin.processing.urls import Blocklist

SMALL, LARGE = 8 << 10, 64 << 10
MAX_RATIO = 20  # linear: ~8 for 8x the input; quadratic: ~64
FLOOR_S = 5e-4  # below this the smaller time is noise: judged against it (a quadratic rule takes far longer)


def _repeat(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def _base64(size: int) -> str:
    return base64.b64encode(random.Random(size).randbytes(size))[:size].decode("ascii")


# The runs the issue names, and runs that attack each rule's own structure: an address's local
# part and host name, dotted numbers, phone groups, sentence ends, blank lines, table bars, tags.
ATTACKS: dict[str, Callable[[int], str]] = {
    "dashes": lambda n: _repeat("-", n),
    "plus-a": lambda n: _repeat("+a", n),
    "a-dot": lambda n: _repeat("a.", n),
    "base64": _base64,
    "digits": lambda n: _repeat("7", n),
    "dots": lambda n: _repeat(".", n - 1) + "x",
    "atoms-then-at": lambda n: _repeat("a", n - 8) + "@a.b.c-1",
    "at-signs": lambda n: _repeat("a@", n),
    "long-host": lambda n: "x@" + _repeat("a.", n - 3) + "-",
    "hyphen-host": lambda n: "x@" + _repeat("a-", n - 2),
    "dotted-digits": lambda n: _repeat("1.", n),
    "phone-groups": lambda n: "+" + _repeat("1 ", n - 1),
    "trunk-groups": lambda n: "0" + _repeat("12 ", n - 1),
    "parentheses": lambda n: _repeat("(55) ", n),
    "blank-runs": lambda n: "\n" + _repeat(" \t", n - 2) + "x",
    "bars": lambda n: _repeat("|  ", n - 1) + "x",
    "meta-tags": lambda n: _repeat("<meta ", n),
    "words": lambda n: _repeat("l'été--a,b.c...", n),
}


def _email_regex_rule(text: str) -> Any:
    return list(email_spans(text))


BLOCKLIST = Blocklist(["bad.example"], ["casino", "free-money", "a.a.a"])

# (name, the compiled patterns it runs, how a step runs them over a document's text)
RULES: list[tuple[str, tuple[Any, ...], Callable[[str], Any]]] = [
    ("pii emails", (pii._NOT_BEFORE_EMAIL, pii._EMAIL_HOST), lambda t: redact(t, PiiConfig(input="", ips=False))),
    ("pii ips", (pii._IPV4,), lambda t: redact(t, PiiConfig(input="", emails=False))),
    ("pii phones", (pii._PHONE,), lambda t: redact(t, PiiConfig(input="", emails=False, ips=False, phones=True))),
    ("sentence ends", (heuristics._SENTENCE_END,), lambda t: heuristics._SENTENCE_END.findall(t)),
    ("paragraph breaks", (heuristics._PARAGRAPH_BREAK,), lambda t: heuristics._PARAGRAPH_BREAK.split(t)),
    ("letters", (heuristics._LETTER,), lambda t: [heuristics._LETTER.search(w) for w in (t, *t.split())]),
    ("fineweb words", fineweb._patterns(), lambda t: (fineweb_words(t), fineweb_metrics(t))),
    ("empty table lines", (html._EMPTY_TABLE_LINE,), lambda t: html._EMPTY_TABLE_LINE.fullmatch(t)),
    ("meta charset", (html_decode._META_CHARSET,), lambda t: html_decode._META_CHARSET.search(t.encode())),
    ("url substrings", (), lambda t: BLOCKLIST.reason("http://host/" + t)),
]


def _time(rule: Callable[[str], Any], text: str, repeats: int) -> float:
    """The least CPU time of this thread ``rule(text)`` took in ``repeats`` runs: on a busy machine
    (the suite runs beside other workers) time spent waiting for a core does not count."""
    best = float("inf")
    for _ in range(repeats):
        start = time.thread_time()
        rule(text)
        best = min(best, time.thread_time() - start)
    return best


def _ratio(rule: Callable[[str], Any], attack: Callable[[int], str], repeats: int) -> tuple[float, float, float]:
    small, large = attack(SMALL), attack(LARGE)
    assert len(small) == SMALL and len(large) == LARGE
    t_small = _time(rule, small, repeats)
    t_large = _time(rule, large, 1)  # one run first: a quadratic rule is not timed again
    if t_large < MAX_RATIO * max(t_small, FLOOR_S):
        t_large = min(t_large, _time(rule, large, repeats - 1))
    return t_small, t_large, t_large / max(t_small, FLOOR_S)


@pytest.mark.parametrize("name, rule", [(name, rule) for name, _patterns, rule in RULES], ids=[r[0] for r in RULES])
def test_each_rule_runs_in_linear_time_on_adversarial_input(name: str, rule: Callable[[str], Any]) -> None:
    slow = {}
    for attack_name, attack in ATTACKS.items():
        t_small, t_large, ratio = _ratio(rule, attack, repeats=3)
        if ratio >= MAX_RATIO:  # measured again before it counts: the machine may have been busy
            t_small, t_large, ratio = _ratio(rule, attack, repeats=5)
        if ratio >= MAX_RATIO:
            slow[attack_name] = f"{t_small * 1e3:.2f} ms on 8 KB, {t_large * 1e3:.1f} ms on 64 KB ({ratio:.0f}x)"
    assert not slow, f"{name} is not linear on: {slow}"


def _module_patterns() -> dict[str, Any]:
    """Every compiled pattern held at module level anywhere in ``marin.processing``."""
    found = {}
    for info in pkgutil.walk_packages(marin.processing.__path__, "marin.processing."):
        module = importlib.import_module(info.name)
        for attr, value in vars(module).items():
            if isinstance(value, re.Pattern) or type(value).__name__ == "Pattern":
                found[f"{info.name}.{attr}"] = value
    return found


def test_every_pattern_of_the_data_steps_is_timed_here() -> None:
    covered = {id(p) for _name, patterns, _rule in RULES for p in patterns}
    missing = sorted(name for name, pattern in _module_patterns().items() if id(pattern) not in covered)
    assert not missing, f"patterns with no linear-time case in this file: {missing}"


# The e-mail rule as a regular expression, as pii.py had it: the finder must match what it matches.
_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
EMAIL_REGEX = re.compile(rf"(?<![\w.@]){_ATOM}(?:\.{_ATOM})*@(?:{_LABEL}\.)+[A-Za-z]{{2,63}}(?![\w-]|\.\w)")
RESERVED_REGEX = re.compile(r"@(?:[^@]+\.)?(?:example\.(?:com|org|net)|[^@]+\.(?:example|invalid|test))$", re.IGNORECASE)
PIECES = ["a", "Z", "1", "-", "+", "_", "=", ".", "..", "@", "@@", " ", "é", "x@y.zz", "cd.ef", "com", "-.", ".q",
          "example.com", "EXAMPLE.org", ".test", ".invalid", "b.example"]


@settings(max_examples=800, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=12).map("".join))
def test_the_email_finder_matches_what_the_regular_expression_matched(text: str) -> None:
    assert list(email_spans(text)) == [m.span() for m in EMAIL_REGEX.finditer(text)]
    for start, end in email_spans(text):
        assert pii._names_someone(text[start:end]) == (RESERVED_REGEX.search(text[start:end]) is None)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([".", "!", "?", '"', "\u201d", " ", "a", "\n", "..."]), max_size=12).map("".join))
def test_sentence_ends_are_counted_as_before(text: str) -> None:
    assert heuristics._SENTENCE_END.findall(text) == re.findall(r"[.!?]+[\"\u201d]?(?=\s|$)", text)
