#!/usr/bin/env python3
"""Full-text search, SQLite against PostgreSQL and against an oracle: one seeded corpus of sessions
written through the public API into a store on each engine, then seeded queries run on both.

    python tools/search_differential.py --queries 5000 --seed 1 [--sessions 60] [--engine both|sqlite]
    python tools/search_differential.py --seed 1 --query 137 [--query 140]   # reproduce queries, verbosely
    python tools/search_differential.py --text 'le café' --text 'cafe' --probe 'cafe'   # a hand-made case

The corpus (``make_corpus``, from ``Random(f"{seed}:corpus")`` alone): ``--sessions`` sessions of
user messages, assistant messages (text, thinking, a tool call's name and arguments), tool
results, bash executions, custom messages, compactions, labels and session names, whose texts are
drawn from a vocabulary mixing ASCII words (in any case), identifiers (``foo_bar``, ``foo-bar``,
``v1.2.3``, paths, URLs, hex and exponent-like ``0e02b2c3`` / ``1e293x``), accented words both
precomposed and decomposed (NFD), Cyrillic, Greek, CJK, Hangul, Hindi, Thai, Arabic (with and
without harakat), digits and other numbers (``x²``, ``½``), punctuation, private-use characters,
letters at the edges of case folding and of Unicode versions (``İ``, final ``ς``, Cherokee,
Georgian Mtavruli, ``Ⅻ``), words around PostgreSQL's 2,047-byte limit, and a few long texts
(up to 20,000 words: past the 16,383 positions and 256 positions per word a ``tsvector`` keeps).
Query ``i`` is drawn from ``Random(f"{seed}:query:{i}")`` and the corpus: words of the corpus in
another case or Unicode form, phrases in quotes, ``prefix*``, ``-excluded``, ``NOT``, ``OR``,
``AND``, parentheses, words found nowhere, long words and junk (``-x`` alone, ``()``, quotes left
open). Each runs with ``store.search(query, limit=...)`` on each engine (every hit; a quarter of
them again with a small limit, which must give the first hits of the full answer in order); the
answers are compared as entry sets (and in order where the sets agree).

The oracle (``Model``) evaluates the parsed query (``store.analysis.fts.parse_query``: its
alternatives of terms) on the texts as written, split into words by Unicode category, independent
of both engines: PostgreSQL's words are runs of letters and numbers (L*, N*) lower-cased, longer
than 2,047 bytes left out; SQLite's (FTS5 ``unicode61``) also keep combining accents (the
nonspacing marks of U+0300-U+036F, as in NFD ``café``) and private-use characters (Co) in the
word, and its query words are the terms as typed, split the same way. Outcomes, per query:

* identical: both engines give the same answer (the same hits, or both ``BadQuery``); for a query
  that is all ASCII, each engine's answer is also its oracle's;
* differing, of a known kind (docs/sql.md, "Full-text search"): ``combining-or-private-use`` (the
  entries the engines disagree on are those their oracles disagree on, where a combining accent or
  a private-use character is part of SQLite's word and ends PostgreSQL's), ``long-word-refused``
  (PostgreSQL's ``BadQuery`` for a query word over 2,047 bytes), ``long-word-unindexed`` (a text's
  word over 2,047 bytes, which PostgreSQL's index leaves out, found on SQLite by a prefix);
* failure: any other difference, an ASCII query whose answer is not the oracle's, an exception other
  than ``BadQuery`` on either engine, a limited answer that is not the start of the full one, hits
  in another order. A failure is printed with what it looks like (``diagnose``): the oracle told to
  assume some of ``DIAGNOSES`` (PostgreSQL's tsvector positions, its phrase check's numbers and
  exponents, letter numbers, SQLite's Unicode 6.1 tables, PostgreSQL lower-casing before splitting) gives both
  engines' answers, or "unexplained". ``--query N`` shows a query's hits, the oracles' and texts.

Answers that agree across engines but not with the oracle, for a query that is not all ASCII, are
counted apart ("unmodelled": the oracle's split by category is not the engines' for a few letters)
and listed, not failures. Ends with ``search-differential: N queries, I identical, D differing (K
known kinds), F failures`` (N = I + D + F; K: how many of the known kinds were seen); exit status
1 on any failure.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
import time
import traceback
import unicodedata
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from fuzz_import import store_url  # noqa: E402

from store.analysis.fts import BadQuery, Query, Term, parse_query  # noqa: E402
from store.session_store import SessionStore  # noqa: E402

LONGEST_PG_WORD = 2047  # bytes (docs/sql.md: PostgreSQL leaves longer words out of its index)
KNOWN_KINDS = ("combining-or-private-use", "long-word-refused", "long-word-unindexed")
MAX_TEXT = 60_000  # characters of an entry's searchable text (the store keeps 65,536)

# ------------------------------------------------------------------------------------ vocabulary
def _split(words: str) -> list[str]:
    return words.split()


ASCII_WORDS = _split(
    "alpha beta gamma delta epsilon zeta queue broker kafka redis session store index search token parser "
    "error warning fix bug test build deploy server client request response cache commit branch merge "
    "python rust node script config file path read write edit bash output input model answer question "
    "the a an of to in on at it is be do go up we no so or and not near cafe resume naive genève strasse "
    "foo bar baz qux quux corge grault garply waldo fred plugh xyzzy thud"
)
IDENTIFIERS = [
    "foo_bar", "foo-bar", "FooBar", "fooBar", "foo.bar", "foo::bar", "foo__bar__", "__init__", "x86_64",
    "v1.2.3", "v2.0.0-rc.1", "1.2.3", "/src/app.py", "src/store/fts.py", "C:\\Users\\dev\\file.txt",
    "~/.config/pi/settings.json", "https://example.com/a/b?c=d&e=f#g", "user@example.com", "print(x)",
    "a.b.c", "--long-option", "-f", "$HOME", "#tag", "@mention", "0e02b2c3", "f47ac10b-58cc-0e02b2c3d479",
    "1e293x", "1e10", "0x1F", "3d", "2nd", "e10", "12abc", "abc12", "i18n", "k8s", "utf-8", "sha256",
    "don't", "it's", "O'Reilly", "rock'n'roll", "end.", "(paren)", "[bracket]", "{brace}", "<tag>",
]
ACCENTED = [
    "café", "naïve", "résumé", "Genève", "Zürich", "señor", "ångström", "Łódź", "façade", "crème", "brûlée",
    "São", "Dvořák", "Ærøskøbing", "Überzeug", "élève", "Ça", "ñandú", "Île", "coöperate", "Příliš",
    "žluťoučký", "kůň", "Việt", "Nguyễn", "Tiếng",
]
CYRILLIC = ["мир", "труд", "май", "Привет", "ЁЛКА", "ёлка", "съешь", "щука", "Москва", "сервер", "ошибка"]
GREEK = ["λόγος", "Αθήνα", "ΣΊΣΥΦΟΣ", "σίσυφος", "σίσυφοσ", "ΟΔΥΣΣΕΥΣ", "οδυσσευς", "μ", "µ"]
CJK = ["请修复这个问题", "日本語", "東京", "中文", "一二三", "한국어", "서울", "カタカナ", "ひらがな", "ｶﾀｶﾅ",
       "ＦＵＬＬ"]
HINDI = ["हिन्दी", "भाषा", "बोलते", "हैं", "नमस्ते", "क्षत्रिय", "दिल्ली", "प्रश्न", "१२३"]
THAI = ["ภาษาไทย", "สวัสดี", "ครับ", "กรุงเทพ", "ขอบคุณ", "๑๒๓"]
ARABIC = ["العربية", "مرحبا", "كتاب", "كِتَابٌ", "مُحَمَّد", "٣٤٥", "۱۲۳", "שלום", "עִבְרִית"]
NUMBERS = ["42", "2024", "3.14159", "007", "1,000,000", "-17", "+5", "½", "x²", "H₂O", "①", "10³", "٣", "१"]
PUNCTUATION = [",", ".", ";", ":", "!", "?", "(", ")", "[", "]", "{", "}", '"', "'", "`", "...", "—", "–", "…",
               "«", "»", "¿", "¡", "、", "。", "，", "·", "•", "/", "\\", "|", "&", "*", "%", "~", "^", "=", "+",
               "😀", "👍🏽", "→", "©", "°", "\u00a0", "\u200b"]
PRIVATE_USE = ["\ue000", "a\ue001b", "word\uf8ff", "\U000f0000x", "alpha\ue000beta", "\ue0b0"]
EDGE_LETTERS = [  # case folding and letters newer than FTS5's Unicode 6.1 tables
    "İstanbul", "istanbul", "ISTANBUL", "ǅemal", "ǆemal", "Ꭰ", "ꭰ", "ᏣᎳᎩ", "ᲐᲑᲒ", "აბგ", "Ⅻ", "ⅻ", "aⅻb",
    "\u212aelvin", "\u212bngström", "ẞ", "straße", "STRASSE", "ﬁle", "file", "Ⱥ", "ⱥ", "〇", "ʰa", "ǈ", "ꞔ",
]
POOLS: list[tuple[str, float, list[str]]] = [
    ("ascii", 40, ASCII_WORDS), ("identifier", 8, IDENTIFIERS), ("accented", 7, ACCENTED),
    ("cyrillic", 4, CYRILLIC), ("greek", 2, GREEK), ("cjk", 3, CJK), ("hindi", 3, HINDI), ("thai", 2, THAI),
    ("arabic", 3, ARABIC), ("number", 5, NUMBERS), ("punctuation", 6, PUNCTUATION), ("private-use", 1, PRIVATE_USE),
    ("edge", 2, EDGE_LETTERS),
]
SHORT_WORDS = _split("a an of to in on at it is be do go up we no so or if as by my me he us ox ax")
SEPARATORS = [(" ", 70), (", ", 6), (". ", 5), ("\n", 5), ("\t", 2), ("", 3), ("-", 2), ("_", 1), ("/", 1),
              (" — ", 1), ("\x00", 0.3), ("\u3000", 0.5)]


def _weighted(rng: random.Random, pairs: list[tuple[Any, float]]) -> Any:
    return rng.choices([value for value, _ in pairs], [weight for _, weight in pairs])[0]


def _long_word(rng: random.Random) -> str:
    """A word around PostgreSQL's 2,047-byte limit (one- to three-byte letters; ``Ⱥ`` lengthens when
    lower-cased)."""
    letter = rng.choice(["a", "Z", "é", "ж", "語", "Ⱥ"])
    size = len(letter.encode())
    count = max(1, (rng.randint(2030, 2065) + rng.choice([0, 0, 1, 2])) // size)
    return rng.choice(["", "pre"]) + letter * count


def vocabulary_item(rng: random.Random) -> str:
    """One item of text: a word, an identifier, a number, punctuation... (possibly recased, or
    decomposed: NFD)."""
    if rng.random() < 0.004:
        return _long_word(rng)
    pool = rng.choices([items for _, _, items in POOLS], [weight for _, weight, _ in POOLS])[0]
    item = rng.choice(pool)
    roll = rng.random()
    if roll < 0.08:
        item = item.upper()
    elif roll < 0.16:
        item = item.title()
    if rng.random() < 0.25:
        item = unicodedata.normalize(rng.choice(["NFD", "NFC", "NFKC"]), item)
    return item


def make_text(rng: random.Random, size: int | None = None) -> tuple[str, list[str]]:
    """A text of ``size`` items (drawn when None) and its items in order."""
    size = size or rng.choice([rng.randint(1, 6), rng.randint(3, 20), rng.randint(10, 60)])
    items = [vocabulary_item(rng) for _ in range(size)]
    out = [items[0]]
    for item in items[1:]:
        out += [_weighted(rng, SEPARATORS), item]
    return "".join(out)[:MAX_TEXT], items


def long_text(rng: random.Random) -> tuple[str, list[str]]:
    """Up to 20,000 short words (past a tsvector's 16,383 positions, hundreds of times each) with
    ordinary items sprinkled in."""
    items: list[str] = []
    length = 0
    target = rng.randint(17_000, 20_000)
    while len(items) < target and length < MAX_TEXT - 200:
        item = vocabulary_item(rng) if rng.random() < 0.08 else rng.choice(SHORT_WORDS)
        if len(item) > 100:
            continue
        items.append(item)
        length += len(item) + 1
    return " ".join(items), items


# ------------------------------------------------------------------------------------ corpus
@dataclass(slots=True)
class Doc:
    """One searchable entry: its kind, what is appended, and the text search must read in it (the
    extractor's: the parts joined by newlines)."""

    index: int
    session: int
    kind: str
    parts: list[str]
    items: list[str]

    @property
    def text(self) -> str:
        return "\n".join(self.parts)


KINDS = [("user", 40), ("assistant", 20), ("toolResult", 12), ("bashExecution", 5), ("custom", 4),
         ("compaction", 3), ("label", 3), ("sessionInfo", 2)]


def make_corpus(seed: int | str, sessions: int, long_every: int = 40) -> list[Doc]:
    """The seeded corpus: every session starts with a user message; one text in ``long_every``
    (at least one in the corpus; none if 0) is long."""
    rng = random.Random(f"{seed}:corpus")
    docs: list[Doc] = []
    for session in range(sessions):
        count = rng.choice([rng.randint(1, 5), rng.randint(5, 25), rng.randint(20, 40)])
        for position in range(count):
            kind = "user" if position == 0 else _weighted(rng, KINDS)
            forced = long_every > 0 and session == sessions // 2 and position == 0  # at least one long text
            long = forced or (kind in ("user", "toolResult") and long_every > 0 and rng.random() * long_every < 1)
            text, items = long_text(rng) if long else make_text(rng)
            parts = [text]
            if kind == "assistant":  # thinking, then a tool call: its name and its argument's value
                for extra in range(rng.randint(0, 2)):
                    more, more_items = make_text(rng)
                    parts += ["read", more] if extra == 1 else [more]
                    items += more_items
            elif kind == "bashExecution" and rng.random() < 0.7:
                output, output_items = make_text(rng)
                parts.append(output)
                items += output_items
            docs.append(Doc(len(docs), session, kind, parts, items))
    return docs


def _assistant(parts: list[str], rng: random.Random) -> dict:
    content: list[dict] = [{"type": "text", "text": parts[0]}]
    if len(parts) >= 2:
        content.append({"type": "thinking", "thinking": parts[1]})
    if len(parts) >= 4:
        content.append({"type": "toolCall", "id": f"call-{rng.randrange(10**6)}", "name": parts[2],
                        "arguments": {"path": parts[3]}})
    return {"role": "assistant", "content": content, "api": "x", "provider": "anthropic", "model": "claude-test",
            "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 2,
                      "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}},
            "stopReason": "stop", "timestamp": 1}


def write_corpus(store: SessionStore, docs: list[Doc], seed: int | str) -> dict[tuple[str, str], int]:
    """Append the corpus through the public API; returns (session id, entry id) -> document index."""
    rng = random.Random(f"{seed}:ids")
    where: dict[tuple[str, str], int] = {}
    by_session: dict[int, list[Doc]] = {}
    for doc in docs:
        by_session.setdefault(doc.session, []).append(doc)
    for session, group in by_session.items():
        sm = store.create(f"/search/differential/{session}")
        with sm.batch():
            first = None
            for n, doc in enumerate(group):
                text = doc.parts[0]
                if doc.kind == "user":
                    entry = sm.append_message({"role": "user", "content": text, "timestamp": n})
                elif doc.kind == "assistant":
                    entry = sm.append_message(_assistant(doc.parts, rng))
                elif doc.kind == "toolResult":
                    entry = sm.append_message({"role": "toolResult", "toolCallId": "call-1", "toolName": "read",
                                               "content": [{"type": "text", "text": text}], "isError": False,
                                               "timestamp": n})
                elif doc.kind == "bashExecution":
                    entry = sm.append_message({"role": "bashExecution", "command": text,
                                               "output": doc.parts[1] if len(doc.parts) > 1 else "",
                                               "exitCode": 0, "cancelled": False, "truncated": False,
                                               "timestamp": n})
                elif doc.kind == "custom":
                    entry = sm.append_custom_message_entry("ext", text, True)
                elif doc.kind == "compaction":
                    entry = sm.append_compaction(text, first, 100)
                elif doc.kind == "label":
                    entry = sm.append_label_change(first, text)
                else:
                    entry = sm.append_session_info(text)
                first = first or entry
                where[(sm.get_session_id(), entry)] = doc.index
    return where


# ------------------------------------------------------------------------------------ the oracle
@cache
def _category(char: str) -> str:
    """The character's Unicode category; "accent" for a combining accent (a nonspacing mark of the
    Combining Diacritical Marks block, U+0300-U+036F: what decomposed Latin, Greek and Cyrillic
    letters are made of)."""
    category = unicodedata.category(char)
    return "accent" if category == "Mn" and "\u0300" <= char <= "\u036f" else category


# unicode61 keeps combining accents and private-use characters in its words (docs/sql.md)
SQLITE_EXTRA = frozenset({"accent", "Co"})
NO_EXTRA: frozenset[str] = frozenset()
LETTER_NUMBERS = frozenset({"Nl"})


def split_words(text: str, extra: frozenset[str] = NO_EXTRA, without: frozenset[str] = NO_EXTRA,
                fold: Callable[[str], str | None] | None = None) -> list[str]:
    """The runs of letters and numbers (Unicode categories L* and N*, with ``extra`` and without
    ``without`` categories, see ``_category``) of ``text``, lower-cased (or each character through
    ``fold``: None where it is no word character)."""
    words: list[str] = []
    current: list[str] = []
    for char in text:
        if fold is not None:
            folded = fold(char)
        else:
            category = _category(char)
            word = (category[0] in "LN" or category in extra) and category not in without
            folded = char if word else None
        if folded is not None:
            current.append(folded)
        elif current:
            words.append("".join(current))
            current = []
    if current:
        words.append("".join(current))
    return words if fold is not None else [word.lower() for word in words]


@cache
def unicode61(char: str) -> str | None:
    """Diagnosis only (never the oracle): what FTS5's ``unicode61 remove_diacritics 0`` makes of
    ``char`` inside a word (its case folding, from Unicode 6.1's tables; "" where it drops it), None
    where it ends the word; asked of Python's own SQLite, between two ``a``."""
    conn = _fts5_probe()
    conn.execute("DELETE FROM probe")
    conn.execute("INSERT INTO probe (x) VALUES (?)", (f"a{char}a",))
    terms = [row[0] for row in conn.execute("SELECT term FROM probe_vocab ORDER BY offset")]
    if len(terms) == 1 and len(terms[0]) >= 2:
        return terms[0][1:-1]
    return None


@cache
def _fts5_probe() -> Any:
    import sqlite3

    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE probe USING fts5(x, tokenize='unicode61 remove_diacritics 0')")
    conn.execute("CREATE VIRTUAL TABLE probe_vocab USING fts5vocab(probe, 'instance')")
    return conn


# What the oracle may be told to assume, to say what a failure looks like (never to excuse one):
# "tsvector-positions": PostgreSQL checks phrases on to_tsvector's positions, which stop at 16,383
# and keep the first 256 of each word; "phrase-other-numbers": PostgreSQL's phrase check
# (pi_search_vector, to_tsquery) reads other and letter numbers (², ½, ①, Ⅻ) as spaces, in the text
# and in the query (a query word of them alone is dropped: a gap inside a phrase, nothing at its
# edges); "letter-numbers": PostgreSQL ends a word at a letter number (Unicode Nl: Ⅻ, 〇), which is
# a word character to SQLite and to the query's words; "unicode61-tables": SQLite splits and folds
# case with unicode61's own tables (Unicode 6.1: İ, Cherokee, Georgian Mtavruli not folded, ς folded
# to σ, some marks end a word: ``unicode61``); "lower-then-split": PostgreSQL lower-cases the whole
# text before it splits it (İ becomes i and a combining dot, which ends the word), where the query's
# words are split, then lower-cased; "parser-exponents": PostgreSQL's phrase check runs the text-search
# parser, which reads ``1e293x`` as the number ``1e293`` and the word ``x`` (``0e02b2c3`` as ``0e02``
# and ``b2c3``), in the text and in the query: a word more in the tsvector, positions shifted.
DIAGNOSES = ("tsvector-positions", "phrase-other-numbers", "parser-exponents", "letter-numbers", "unicode61-tables",
             "lower-then-split")
EXPONENT = re.compile(r"([0-9]+e[0-9]+)([^0-9].*)")


def _exponent_split(word: str) -> tuple[str, ...]:
    match = EXPONENT.fullmatch(word)
    return match.groups() if match else (word,)
MAX_POSITION, MAX_POSITIONS = 16_383, 256
NUMBERS_AS_SPACES = frozenset({"No", "Nl"})
Words = tuple[str | None, ...]  # a term's words (None: any one word, a gap)


@dataclass(slots=True)
class Indexed:
    """A document's words as one engine reads them: in order (None where a word is not indexed),
    the positions of each, and (``capped``) PostgreSQL's tsvector positions of each."""

    sequence: list[str | None]
    positions: dict[str, list[int]]
    capped: dict[str, set[int]] | None = None

    @classmethod
    def of(cls, words: list[str], drop_long: bool, cap: bool = False) -> Indexed:
        sequence: list[str | None] = [None if drop_long and len(w.encode()) > LONGEST_PG_WORD else w for w in words]
        positions: dict[str, list[int]] = {}
        for i, word in enumerate(sequence):
            if word is not None:
                positions.setdefault(word, []).append(i)
        capped = None
        if cap:
            capped = {word: {min(i + 1, MAX_POSITION) for i in at[:MAX_POSITIONS]} for word, at in positions.items()}
        return cls(sequence, positions, capped)

    def has(self, words: Words, prefix: bool) -> bool:
        """Whether the phrase ``words`` (its last word a prefix if ``prefix``; never None at its
        edges) is in the document."""
        last = words[-1]
        assert last is not None and words[0] is not None
        if len(words) == 1:
            return last in self.positions if not prefix else any(w.startswith(last) for w in self.positions)
        n = len(words)
        if self.capped is not None:
            sets = self.capped
            lasts = [at for w, at in sets.items() if w.startswith(last)] if prefix else [sets.get(last, set())]
            return any(all(words[k] is None or p + k in sets.get(words[k], ()) for k in range(1, n - 1))  # type: ignore[arg-type]
                       and any(p + n - 1 in at for at in lasts) for p in sets.get(words[0], ()))
        for start in self.positions.get(words[0], ()):
            if start + n > len(self.sequence):
                break
            if all(words[k] is None or self.sequence[start + k] == words[k] for k in range(1, n - 1)):
                at = self.sequence[start + n - 1]
                if at is not None and (at.startswith(last) if prefix else at == last):
                    return True
        return False


Term3 = tuple[Words, bool, bool]  # a term's words, prefix, excluded


class Model:
    """The oracle of one engine over the corpus (see the module docstring); ``assume``: diagnoses
    (``DIAGNOSES``) it is to assume."""

    def __init__(self, engine: str, docs: list[Doc], drop_long: bool | None = None,
                 assume: frozenset[str] = frozenset()) -> None:
        self.engine = engine
        self.assume = assume
        drop = engine == "postgresql" if drop_long is None else drop_long
        self.indexed = [Indexed.of(self.split(doc.text), drop) for doc in docs]
        self.cap = engine == "postgresql" and "tsvector-positions" in assume
        self.spaces = engine == "postgresql" and "phrase-other-numbers" in assume
        self.exponents = engine == "postgresql" and "parser-exponents" in assume
        self.vectors: list[Indexed] | None = None
        if self.cap or self.spaces or self.exponents:  # PostgreSQL's phrase check reads its own words
            self.vectors = [Indexed.of(self.split(doc.text, vector=True), drop, self.cap) for doc in docs]

    def split(self, text: str, query: bool = False, vector: bool = False) -> list[str]:
        if self.engine == "sqlite":
            if "unicode61-tables" in self.assume:
                return split_words(text, fold=unicode61)
            return split_words(text, SQLITE_EXTRA)
        without = LETTER_NUMBERS if "letter-numbers" in self.assume else NO_EXTRA
        if vector and self.spaces:
            without = without | NUMBERS_AS_SPACES
        lower_first = "lower-then-split" in self.assume and not query
        words = split_words(text.lower() if lower_first else text, without=without)
        if vector and self.exponents:
            words = [part for word in words for part in _exponent_split(word)]
        return words

    def term_words(self, term: Term) -> Words:
        if self.engine == "sqlite":  # FTS5 splits the term as typed (NUL and surrogates: breaks)
            typed = "".join(" " if c == "\x00" or "\ud800" <= c <= "\udfff" else c for c in term.text)
            return tuple(self.split(typed, query=True))
        return term.words

    def vector_words(self, term: Term) -> Words:
        """The term's words as to_tsquery reads them (numbers as spaces: a word of them alone is a gap;
        exponents split off)."""
        if not (self.spaces or self.exponents):
            return term.words
        words: list[str | None] = []
        for word in term.words:
            words += self.split(word, query=True, vector=True) or [None]
        while words and words[0] is None:
            words.pop(0)
        while words and words[-1] is None:
            words.pop()
        return tuple(words)

    def answer(self, query: Query) -> set[int]:
        alternatives = [[(self.term_words(t), t.prefix, t.excluded) for t in terms] for terms in query.alternatives]
        if self.vectors is not None and query.has_phrase():
            vector_alternatives = [[(self.vector_words(t), t.prefix, t.excluded) for t in terms]
                                   for terms in query.alternatives]
            return {index for index, (doc, vector) in enumerate(zip(self.indexed, self.vectors, strict=True))
                    if self._two_steps(doc, vector, alternatives, vector_alternatives)}
        return {index for index, doc in enumerate(self.indexed)
                if any(all(bool(words) and doc.has(words, prefix) != excluded for words, prefix, excluded in terms)
                       for terms in alternatives)}

    @staticmethod
    def _two_steps(doc: Indexed, vector: Indexed, alternatives: list[list[Term3]],
                   vector_alternatives: list[list[Term3]]) -> bool:
        """PostgreSQL's two conditions: the index's words (an alternative's words all there, its
        excluded words absent, its excluded phrases left out), and the whole query on the tsvector
        (each condition may hold by another alternative; a term with no word left is dropped)."""
        def words_hold(words: Words, prefix: bool, excluded: bool) -> bool:
            if excluded:
                return len(words) > 1 or not doc.has(words, prefix)
            return all(doc.has((w,), prefix and k == len(words) - 1) for k, w in enumerate(words))

        def vector_holds(words: Words, prefix: bool, excluded: bool) -> bool:
            return not words or vector.has(words, prefix) != excluded

        kept = [terms for terms in vector_alternatives if any(words for words, _, _ in terms)]
        return (any(all(words_hold(*term) for term in terms) for terms in alternatives)
                and any(all(vector_holds(*term) for term in terms) for terms in kept))


class Models:
    """The oracles of the engines, and their variants for diagnoses, made when first asked for."""

    def __init__(self, docs: list[Doc]) -> None:
        self.docs = docs
        self._made: dict[tuple[str, bool, frozenset[str]], Model] = {}

    def get(self, engine: str, assume: frozenset[str] = frozenset(), drop_long: bool = True) -> Model:
        key = (engine, drop_long, assume)
        if key not in self._made:
            self._made[key] = Model(engine, self.docs, None if drop_long else False, assume)
        return self._made[key]


# ------------------------------------------------------------------------------------ queries
def _word_of(rng: random.Random, docs: list[Doc]) -> str:
    doc = rng.choice(docs)
    item = rng.choice(doc.items)
    roll = rng.random()
    if roll < 0.15:
        item = item.lower()
    elif roll < 0.25:
        item = item.upper()
    elif roll < 0.3:
        item = item.title()
    if rng.random() < 0.1:
        item = unicodedata.normalize(rng.choice(["NFD", "NFC"]), item)
    return item


def _phrase_of(rng: random.Random, docs: list[Doc]) -> str:
    doc = rng.choice(docs)
    size = rng.choice([2, 2, 3, 4])
    start = rng.randrange(max(1, len(doc.items) - size + 1))
    return " ".join(doc.items[start:start + size]).replace('"', " ")


def _term(rng: random.Random, docs: list[Doc]) -> str:
    roll = rng.random()
    if roll < 0.45:
        return _word_of(rng, docs)
    if roll < 0.62:
        return f'"{_phrase_of(rng, docs)}"'
    if roll < 0.76:
        word = _word_of(rng, docs)
        return word[:rng.randint(1, max(1, len(word) - 1))] + "*"
    if roll < 0.82:
        return f'"{_phrase_of(rng, docs)}"*'
    if roll < 0.92:  # a word found nowhere (mostly), or any vocabulary item
        return rng.choice(["zzqx", "nowhere", "xylophone", "qwerty12", vocabulary_item(rng)])
    if roll < 0.95:
        return _long_word(rng)
    return rng.choice(IDENTIFIERS)


JUNK = ["", "   ", "-alpha", "NOT beta", "()", "(", ")", '"', '""', "!!!", "-(alpha OR beta)", "OR", "AND", "NOT",
        "alpha NOT", "alpha AND", "alpha OR", "* *", "-", "--", "\x00", "\ue000", "\u0301", "(((alpha", "alpha)))",
        '"alpha', "NOT NOT alpha", "alpha -alpha", "a* -a*", "(-alpha)", "-\"alpha beta\"", "*", "_", "´"]


def make_query(seed: int | str, index: int, docs: list[Doc]) -> str:
    """Query ``index`` of ``seed`` over ``docs``: the same text on every machine. Most of those the
    parser refuses (an alternative of exclusions alone: ``a OR -b``) are drawn again."""
    rng = random.Random(f"{seed}:query:{index}")
    if rng.random() < 0.04:
        return rng.choice(JUNK)
    for _ in range(5):
        query = _draw_query(rng, docs)
        try:
            parse_query(query)
        except BadQuery:
            if rng.random() < 0.8:
                continue
        return query
    return query


def _draw_query(rng: random.Random, docs: list[Doc]) -> str:
    parts = []
    for _ in range(_weighted(rng, [(1, 45), (2, 30), (3, 15), (4, 10)])):
        term = _term(rng, docs)
        roll = rng.random()
        if roll < 0.12:
            term = "-" + term
        elif roll < 0.17:
            term = "NOT " + term
        parts.append(term)
    if len(parts) >= 2 and rng.random() < 0.25:  # a group
        start = rng.randrange(len(parts) - 1)
        end = rng.randint(start + 2, len(parts))
        inner = " OR ".join(parts[start:end]) if rng.random() < 0.7 else " ".join(parts[start:end])
        parts[start:end] = [rng.choice(["(", "-(", "NOT ("]) + inner + ")"]
    out = parts[0]
    for part in parts[1:]:
        out += _weighted(rng, [(" ", 55), (" OR ", 25), (" AND ", 10), (" or ", 5), ("  ", 5)]) + part
    return out


# ------------------------------------------------------------------------------------ running
@dataclass(slots=True)
class Answer:
    """One engine's answer: the documents found, newest first (None when refused or failed)."""

    hits: list[int] | None = None
    refused: str | None = None  # BadQuery's message
    error: str | None = None  # any other exception (a traceback)

    def brief(self) -> str:
        if self.error is not None:
            return "error: " + self.error.strip().splitlines()[-1]
        if self.refused is not None:
            return f"BadQuery: {self.refused[:120]}"
        return f"{len(self.hits or ())} hits {sorted(self.hits or ())[:12]}"


@dataclass(slots=True)
class Outcome:
    index: int
    query: str
    status: str  # identical / differing / failure
    kind: str | None = None  # a known kind (differing) or what failed
    detail: str = ""
    answers: dict[str, Answer] = field(default_factory=dict)
    unmodelled: bool = False
    diagnosis: str | None = None  # what a failure looks like (``diagnose``)


@dataclass(slots=True)
class Campaign:
    engines: list[str]
    docs: list[Doc]
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "failure"]

    def summary(self) -> str:
        status = Counter(o.status for o in self.outcomes)
        kinds = {o.kind for o in self.outcomes if o.status == "differing"}
        return (f"search-differential: {len(self.outcomes)} queries, {status['identical']} identical, "
                f"{status['differing']} differing ({len(kinds)} known kinds), {status['failure']} failures")

    def details(self) -> list[str]:
        refused = sum(all(a.refused is not None for a in o.answers.values()) for o in self.outcomes)
        lines = [f"  corpus: {len(self.docs)} entries in {len({d.session for d in self.docs})} sessions, "
                 f"{sum(len(d.text) for d in self.docs):,} characters; engines {', '.join(self.engines)}; "
                 f"{refused} queries refused (BadQuery) everywhere"]
        lines += [f"  {engine}: {seconds:.1f} s searching" for engine, seconds in self.seconds.items()]
        differing = Counter(o.kind for o in self.outcomes if o.status == "differing")
        if differing:
            lines.append(f"  known kinds: {dict(sorted(differing.items()))}")
        failing = Counter(o.kind + (f" ({o.diagnosis})" if o.diagnosis else "") for o in self.failures)
        if failing:
            lines.append(f"  failures: {dict(sorted(failing.items()))}")
        unmodelled = [o for o in self.outcomes if o.unmodelled]
        if unmodelled:
            lines.append(f"  unmodelled (engines agree, the oracle does not; not ASCII): {len(unmodelled)}, e.g. "
                         + ", ".join(f"query {o.index} {o.query[:60]!r}" for o in unmodelled[:8]))
        return lines


def ask(store: SessionStore, where: dict[tuple[str, str], int], query: str, limit: int) -> Answer:
    try:
        hits = store.search(query, limit=limit)
    except BadQuery as exc:
        return Answer(refused=str(exc))
    except Exception:
        return Answer(error=traceback.format_exc())
    try:
        return Answer(hits=[where[(hit.session_id, hit.entry_id)] for hit in hits])
    except KeyError as exc:
        return Answer(error=f"a hit that is no entry of the corpus: {exc!r}")


def _has_long_word(query: str) -> bool:
    try:
        parsed = parse_query(query)
    except BadQuery:
        return False
    return any(len(w.encode()) > LONGEST_PG_WORD for terms in parsed.alternatives for t in terms for w in t.words)


def judge(index: int, query: str, answers: dict[str, Answer], models: Models,
          limited: dict[str, tuple[int, Answer]]) -> Outcome:
    """Compare the engines' answers with each other and with their oracles."""
    outcome = Outcome(index, query, "identical", answers=answers)
    errors = [f"{engine}: {a.error}" for engine, a in answers.items() if a.error is not None]
    errors += [f"{engine} limit {limit}: {a.error}" for engine, (limit, a) in limited.items() if a.error is not None]
    if errors:
        outcome.status, outcome.kind, outcome.detail = "failure", "exception", "\n".join(errors)
        return outcome
    for engine, (limit, answer) in limited.items():
        full = answers[engine]
        if answer.refused != full.refused or (full.hits is not None and answer.hits != full.hits[:limit]):
            outcome.status, outcome.kind = "failure", "limit"
            outcome.detail = f"{engine}: limit {limit} gave {answer.brief()}, not the first of {full.brief()}"
            return outcome
    try:
        parsed = parse_query(query)
    except BadQuery:
        parsed = None
    expected = {engine: (None if parsed is None else models.get(engine).answer(parsed)) for engine in answers}
    ascii_query = query.isascii()
    off_model = {engine for engine, a in answers.items()
                 if a.hits is not None and expected[engine] is not None and set(a.hits) != expected[engine]}
    if set(answers) != {"sqlite", "postgresql"}:  # one engine: its oracle alone
        if off_model and ascii_query:
            _fail(outcome, "oracle", _off_model(answers, expected, off_model), parsed, models)
        outcome.unmodelled = bool(off_model) and not ascii_query
        return outcome
    sqlite, pg = answers["sqlite"], answers["postgresql"]
    if sqlite.refused is not None and pg.refused is not None:
        return outcome
    if pg.refused is not None and sqlite.hits is not None and _has_long_word(query):
        outcome.status, outcome.kind = "differing", "long-word-refused"
        if "sqlite" in off_model and ascii_query:
            _fail(outcome, "oracle", _off_model(answers, expected, off_model), parsed, models)
        return outcome
    if sqlite.hits is None or pg.hits is None:
        _fail(outcome, "refused-on-one", f"sqlite {sqlite.brief()}; postgresql {pg.brief()}", None, models)
        return outcome
    if sqlite.hits == pg.hits:
        if off_model and ascii_query:
            _fail(outcome, "oracle", _off_model(answers, expected, off_model), parsed, models)
        outcome.unmodelled = bool(off_model) and not ascii_query
        return outcome
    if set(sqlite.hits) == set(pg.hits):
        _fail(outcome, "order", f"sqlite order {sqlite.hits[:20]}; postgresql order {pg.hits[:20]}", None, models)
        return outcome
    disputed = set(sqlite.hits) ^ set(pg.hits)
    explained = all((d in sqlite.hits) == (d in expected["sqlite"])
                    and (d in pg.hits) == (d in expected["postgresql"]) for d in disputed)
    if not explained or (ascii_query and off_model):
        _fail(outcome, "unclassified", _disputed(disputed, answers, expected), parsed, models)
        return outcome
    keeping_long = models.get("postgresql", drop_long=False).answer(parsed) if parsed is not None else set()
    long_kind = any((d in keeping_long) != (d in expected["postgresql"]) for d in disputed)
    outcome.status = "differing"
    outcome.kind = "long-word-unindexed" if long_kind else "combining-or-private-use"
    outcome.unmodelled = bool(off_model)
    return outcome


def _fail(outcome: Outcome, kind: str, detail: str, parsed: Query | None, models: Models) -> None:
    """Mark ``outcome`` a failure of ``kind``, with what it looks like (``diagnose``)."""
    outcome.status, outcome.kind, outcome.detail = "failure", kind, detail
    if parsed is not None and kind in ("oracle", "unclassified"):
        outcome.diagnosis = diagnose(parsed, outcome.answers, models)


def diagnose(parsed: Query, answers: dict[str, Answer], models: Models) -> str:
    """``DIAGNOSES`` under which the oracles give each engine's answer on the entries in question
    (those the engines or their oracles disagree on), none of which can be left out: "unexplained"
    when not even all of them do."""
    base = {engine: models.get(engine).answer(parsed) for engine in answers}
    hits = {engine: set(a.hits or ()) for engine, a in answers.items()}
    asked = set.union(*(hits[e] ^ base[e] for e in answers))
    if len(answers) == 2:
        asked |= hits["sqlite"] ^ hits["postgresql"]

    def holds(assume: frozenset[str]) -> bool:
        return all((d in hits[e]) == (d in models.get(e, assume).answer(parsed)) for e in answers for d in asked)

    assumed = frozenset(DIAGNOSES)
    if not holds(assumed):
        return "unexplained"
    for name in DIAGNOSES:  # then each left out that is not needed, in turn
        if holds(assumed - {name}):
            assumed -= {name}
    return "+".join(sorted(assumed)) or "unexplained"


def _off_model(answers: dict[str, Answer], expected: dict[str, set[int] | None], engines: set[str]) -> str:
    out = []
    for engine in sorted(engines):
        got, want = set(answers[engine].hits or ()), expected[engine] or set()
        out.append(f"{engine}: found and not expected {sorted(got - want)[:10]}, expected and not found "
                   f"{sorted(want - got)[:10]}")
    return "; ".join(out)


def _disputed(disputed: set[int], answers: dict[str, Answer], expected: dict[str, set[int] | None]) -> str:
    rows = []
    for d in sorted(disputed)[:8]:
        rows.append(f"doc {d}: " + ", ".join(f"{engine} {'found' if d in (a.hits or ()) else 'not found'} "
                                              f"(oracle: {'found' if d in (expected[engine] or ()) else 'not'})"
                                              for engine, a in answers.items()))
    return "; ".join(rows)


def excerpt(text: str, query: str, width: int = 160) -> str:
    """Where in ``text`` the query's first word is (case-insensitive), else its start, as repr."""
    try:
        words = [w for terms in parse_query(query).alternatives for t in terms for w in t.words]
    except BadQuery:
        words = []
    lowered = text.lower()
    at = next((lowered.find(w) for w in words if lowered.find(w) >= 0), 0)
    start = max(0, at - width // 3)
    return repr(text[start:start + width]) + (f" (at {at} of {len(text)})" if len(text) > width else "")


def run_campaign(*, queries: int, seed: int | str, sessions: int = 60, engines: list[str] | None = None,
                 only: list[int] | None = None, limited_every: int = 4, log: Callable[[str], None] = print,
                 long_every: int = 40) -> Campaign:
    """Build the corpus in a store per engine and run the queries; see the module docstring."""
    engines = engines or ["sqlite", "postgresql"]
    docs = make_corpus(seed, sessions, long_every)
    campaign = Campaign(engines, docs)
    with tempfile.TemporaryDirectory(prefix="pi-search-diff-") as scratch, ExitStack() as stack:
        stores: dict[str, tuple[SessionStore, dict[tuple[str, str], int]]] = {}
        for engine in engines:
            url = stack.enter_context(store_url(engine, Path(scratch), "corpus"))
            store = stack.enter_context(SessionStore.connect(url))
            stores[engine] = (store, write_corpus(store, docs, seed))
            campaign.seconds[engine] = 0.0
            if engine == "postgresql":
                from sqlalchemy import text
                with store.engine.begin() as conn:  # the planner's statistics (autovacuum would gather them)
                    conn.execute(text("ANALYZE"))
        models = Models(docs)
        full = len(docs) + 10
        for index in (only if only is not None else range(queries)):
            query = make_query(seed, index, docs)
            rng = random.Random(f"{seed}:limit:{index}")
            answers: dict[str, Answer] = {}
            limited: dict[str, tuple[int, Answer]] = {}
            limit = rng.choice([1, 2, 3, 5, 10]) if rng.randrange(limited_every) == 0 else None
            for engine, (store, where) in stores.items():
                started = time.perf_counter()
                answers[engine] = ask(store, where, query, full)
                if limit is not None:
                    limited[engine] = (limit, ask(store, where, query, limit))
                campaign.seconds[engine] += time.perf_counter() - started
            outcome = judge(index, query, answers, models, limited)
            campaign.outcomes.append(outcome)
            if outcome.status == "failure":
                looks = f", looks like {outcome.diagnosis}" if outcome.diagnosis else ""
                log(f"FAILURE query {index} ({outcome.kind}{looks}): {query[:300]!r}\n    {outcome.detail[:2000]}")
            if only is not None:
                describe(outcome, docs, models, log)
    return campaign


def describe(outcome: Outcome, docs: list[Doc], models: Models, log: Callable[[str], None]) -> None:
    """Everything about one query (``--query``)."""
    log(f"query {outcome.index}: {outcome.query!r}")
    try:
        parsed = parse_query(outcome.query)
        log(f"  parsed: fts5 {parsed.fts5()!r}; tsquery {parsed.tsquery()[:300]!r}")
    except BadQuery as exc:
        parsed = None
        log(f"  parsed: BadQuery {exc}")
    shown: set[int] = set()
    for engine, answer in outcome.answers.items():
        log(f"  {engine}: {answer.brief()}")
        shown.update(answer.hits or ())
        if parsed is not None:
            expected = models.get(engine).answer(parsed)
            log(f"  {engine} oracle: {len(expected)} hits {sorted(expected)[:12]}")
            shown.update(expected)
    for d in sorted(shown)[:20]:
        log(f"  doc {d} ({docs[d].kind}, session {docs[d].session}): {excerpt(docs[d].text, outcome.query)}")
    log(f"  outcome: {outcome.status} {outcome.kind or ''} {outcome.diagnosis or ''} {outcome.detail}")


def probe(texts: list[str], queries: list[str], engines: list[str], log: Callable[[str], None] = print) -> None:
    """A hand-made case: ``texts`` as user messages of one session, each query on each engine."""
    with tempfile.TemporaryDirectory(prefix="pi-search-probe-") as scratch, ExitStack() as stack:
        for engine in engines:
            url = stack.enter_context(store_url(engine, Path(scratch), "probe"))
            store = stack.enter_context(SessionStore.connect(url))
            sm = store.create("/search/probe")
            ids = {sm.append_message({"role": "user", "content": body, "timestamp": n}): n
                   for n, body in enumerate(texts)}
            for query in queries:
                try:
                    found = sorted(ids[hit.entry_id] for hit in store.search(query, limit=1000))
                except BadQuery as exc:
                    found = f"BadQuery: {exc}"  # type: ignore[assignment]
                except Exception as exc:
                    found = f"{type(exc).__name__}: {exc}"  # type: ignore[assignment]
                log(f"{engine}: {query!r} -> texts {found}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--seed", default="1")
    parser.add_argument("--sessions", type=int, default=60, help="Sessions in the corpus.")
    parser.add_argument("--engine", choices=["both", "sqlite"], default="both",
                        help="sqlite: SQLite against the oracle alone (no server)")
    parser.add_argument("--query", type=int, action="append",
                        help="Run only this query and describe it (reproduce a failure; repeatable).")
    parser.add_argument("--long-every", type=int, default=40, help="One text in this many is long.")
    parser.add_argument("--text", action="append", default=[], help="With --probe: a message text (repeatable).")
    parser.add_argument("--probe", action="append", default=[], help="Run this query on --text messages alone.")
    args = parser.parse_args(argv)
    engines = ["sqlite", "postgresql"] if args.engine == "both" else ["sqlite"]
    if args.probe:
        probe(args.text, args.probe, engines)
        return 0
    started = time.perf_counter()
    campaign = run_campaign(queries=args.queries, seed=args.seed, sessions=args.sessions, engines=engines,
                            only=args.query, long_every=args.long_every)
    for line in campaign.details():
        print(line)
    print(f"  seed {args.seed}, {time.perf_counter() - started:.1f} s wall")
    print(campaign.summary())
    return 1 if campaign.failures else 0


if __name__ == "__main__":
    sys.exit(main())
